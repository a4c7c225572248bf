"""HTML building blocks for the console: escaping by type, tables, the page frame, small inline SVG charts.

The one rule: text reaches a page only through :func:`esc` (or a helper that calls it). :class:`Html` marks a
string that is already markup; everything else is escaped where it is put into a tag, so a cluster, node or
reason named ``<script>`` is shown, never run. Charts are inline SVG with presentation attributes only (no
``style``), so the pages' Content-Security-Policy forbids every inline style and script and they still draw.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Iterable, Sequence

NAV = (("/", "Overview"), ("/workloads", "Workloads"), ("/timeline", "Timeline"), ("/decisions", "Decisions"),
       ("/autoscaling", "Autoscaling"), ("/learning", "Learning"), ("/drills", "Drills"))
HEALTH_COLOURS = {"healthy": "#2e7d32", "degraded": "#b26a00", "agents-silent": "#b26a00", "partitioned": "#6a1b9a",
                  "down": "#c62828", "unknown": "#757575"}


class Html(str):
    """A string that is markup already: composed by this module's helpers from escaped parts. Adding text to it
    escapes the text; adding markup keeps both as markup."""

    __slots__ = ()

    def __add__(self, other: object) -> Html:
        return Html(str.__add__(self, esc(other)))

    def __radd__(self, other: object) -> Html:
        return Html(str.__add__(esc(other), self))


def esc(value: object) -> Html:
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Html:
    return Html(esc(sep).join(esc(p) for p in parts))


def tag(name: str, *content: object, **attrs: object) -> Html:
    """``<name attrs>content</name>``; attribute names take ``_`` for ``-`` and a trailing ``_`` (``class_``)."""
    attr = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None and v is not False)
    return Html(f"<{name}{attr}>{join(content)}</{name}>")


def link(href: str, text: object) -> Html:
    return tag("a", text, href=href)


def named_link(section: str, name: str) -> Html:
    """A link to one cluster's or workload's page: ``/section/NAME``, NAME percent-encoded."""
    return link(f"/{section}/" + urllib.parse.quote(name, safe=""), name)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "none", **attrs: object) -> Html:
    """A table; a row given as ``(attrs_dict, cells)`` puts attributes on its ``<tr>``."""
    body = []
    for row in rows:
        row_attrs: dict[str, object] = {}
        if len(row) == 2 and isinstance(row[0], dict):
            row_attrs, row = row[0], row[1]
        body.append(tag("tr", *(c if isinstance(c, Html) and c.startswith("<td") else tag("td", c) for c in row), **row_attrs))
    if not body:
        return tag("p", empty, class_="empty")
    return tag("table", tag("thead", tag("tr", *(tag("th", h) for h in headers))), tag("tbody", *body), **attrs)


def cell(content: object, **attrs: object) -> Html:
    """A ``<td>`` with attributes (a class, a data- hook for the live script)."""
    return tag("td", content, **attrs)


def health_cell(health: str) -> Html:
    return cell(health, class_=f"health h-{health}", data_health=health)


def when(t: float) -> str:
    """Wall time as an operator reads it, UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + "Z"


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def ago(seconds: float) -> str:
    if seconds < 0.05:
        return "now"
    if seconds < 90:
        return f"{seconds:.1f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def cores(milli: int) -> str:
    return f"{milli / 1000:g}"


def gib(mib: int) -> str:
    return f"{mib / 1024:.1f} Gi" if mib >= 1024 else f"{mib} Mi"


def meter(used: float, total: float, width: int = 70) -> Html:
    """A used/total bar with its percentage; an unknown total draws an empty frame."""
    frac = min(1.0, used / total) if total > 0 else 0.0
    fill = "#c62828" if frac > 0.9 else "#b26a00" if frac > 0.7 else "#1565c0"
    label = f"{100 * frac:.0f}%" if total > 0 else "n/a"
    return Html(
        f'<svg class="meter" width="{width + 34}" height="12" role="img" aria-label="{esc(label)}">'
        f'<rect x="0.5" y="1.5" width="{width}" height="9" fill="#fff" stroke="#9e9e9e"/>'
        f'<rect x="1" y="2" width="{(width - 1) * frac:.1f}" height="8" fill="{fill}"/>'
        f'<text x="{width + 4}" y="10" font-size="10" fill="#333">{esc(label)}</text></svg>'
    )


def document(title: str, path: str, regions: Sequence[tuple[str, Html]]) -> str:
    """The whole page at ``path`` ("": none, nothing live): the frame, the navigation, and each region in a ``div``
    the live script replaces when ``/events?path=`` sends it again."""
    nav = join(tag("a", text, href=href, class_="here" if href == path else None) for href, text in NAV)
    body = join(tag("div", content, id=f"r-{name}", class_="region") for name, content in regions)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · fedplane</title>"
        '<link rel="stylesheet" href="/static/console.css"><link rel="icon" href="data:,">'
        '<script src="/static/live.js" defer></script></head>'
        f'<body data-live="{esc(path)}"><header><span class="brand">fedplane</span><nav>{nav}</nav>'
        '<span id="live" class="off" title="live updates">static</span>'
        '<form method="post" action="/logout"><button type="submit">Sign out</button></form></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )


def login_page(message: str = "") -> str:
    """The one page without credentials: a form that trades a token for a session cookie."""
    note = tag("p", message, class_="error") if message else Html("")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · fedplane</title>'
        '<link rel="stylesheet" href="/static/console.css"><link rel="icon" href="data:,"></head><body><main class="login">'
        "<h1>fedplane control plane</h1><p>Sign in with the bearer token of a credentials file "
        "(viewer or above: <code>fedplane controlplane credentials --role viewer --out FILE</code>).</p>"
        f'{note}<form method="post" action="/login"><label>Token <input type="password" name="token" autocomplete="off" required></label>'
        ' <button type="submit">Sign in</button></form></main></body></html>'
    )
