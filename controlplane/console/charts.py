"""Inline SVG charts drawn from a snapshot: the failover timeline (each cluster's health over time, migrations across),
a line chart with labelled axes (an autoscaled workload's demand against its replicas), and sparklines (recent load).

Pure functions returning :class:`~controlplane.console.markup.Html`; every text goes through ``esc``. The legend
sits below the plot, never on it; axes carry their unit.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.console.markup import HEALTH_COLOURS, Html, clock, esc
from controlplane.console.snapshots import Snapshot

WINDOW_S = 1800.0
"""The timeline shows at most the last half hour ..."""
MIN_WINDOW_S = 30.0
"""... and at least half a minute, so a young plane's first seconds are not stretched across the page."""
KIND_COLOURS = {"failover": "#c62828", "rebalance": "#1565c0", "return": "#2e7d32", "manual": "#424242"}
WIDTH, GUTTER, ROW, TOP = 960, 110, 24, 8


def _health_spans(s: Snapshot, cluster: str, t0: float) -> list[tuple[float, float, str]]:
    """(start, end, health) over [t0, taken]: the verdict changes the decisions log holds, then the verdict now."""
    c = s.cluster(cluster)
    changes = sorted((d.at, d.kind.split(":", 1)[1]) for d in s.decisions if d.kind.startswith("verdict:") and d.source == cluster)
    if c is not None:
        changes.append((c.since, c.health))
        changes.sort()
    spans: list[tuple[float, float, str]] = []
    start, health = t0, ""  # before the first verdict the log holds: nothing known, nothing drawn
    for at, h in changes:
        if at > start:
            spans.append((start, min(at, s.taken), health))
            start = at
        health = h
    spans.append((start, s.taken, health))
    return [(a, b, h) for a, b, h in spans if b > a and h]


def timeline(s: Snapshot) -> Html:
    events = [d.at for d in s.decisions] + [m.created for m in s.migrations]
    t1 = s.taken
    t0 = t1 - min(WINDOW_S, max(MIN_WINDOW_S, 1.05 * (t1 - min(events, default=t1))))
    names = [c.name for c in s.clusters]
    if not names:
        return Html('<p class="empty">No cluster is registered: nothing to draw.</p>')
    plot = WIDTH - GUTTER - 10
    height = TOP + ROW * len(names) + 34

    def x(t: float) -> float:
        return GUTTER + plot * (max(t0, min(t1, t)) - t0) / (t1 - t0)

    def y(name: str) -> float:
        return TOP + ROW * names.index(name) + ROW / 2

    span = f"{(t1 - t0) / 60:.0f} minutes" if t1 - t0 >= 90 else f"{t1 - t0:.0f} seconds"
    parts = [(f'<svg class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
              f'aria-label="health of each cluster and migrations over the last {span}">')]
    for name in names:
        parts.append(f'<text x="{GUTTER - 6}" y="{y(name) + 4:.1f}" text-anchor="end" font-size="12" fill="#222">{esc(name)}</text>')
        for a, b, h in _health_spans(s, name, t0):
            parts.append(f'<rect x="{x(a):.1f}" y="{y(name) - 7:.1f}" width="{max(1.0, x(b) - x(a)):.1f}" height="14" '
                         f'fill="{HEALTH_COLOURS.get(h, "#757575")}" fill-opacity="0.8">'
                         f'<title>{esc(name)}: {esc(h)} {clock(a)}–{clock(b)}</title></rect>')
    for m in s.migrations:
        if m.created < t0 or m.source not in names or m.target not in names:
            continue
        colour = KIND_COLOURS.get(m.kind, "#424242")
        xa, xb = x(m.created), x(m.updated if m.state in ("done", "failed", "cancelled") else t1)
        parts.append(f'<path d="M{xa:.1f},{y(m.source):.1f} L{max(xb, xa + 3):.1f},{y(m.target):.1f}" stroke="{colour}" '
                     f'stroke-width="2" fill="none"><title>{esc(m.kind)} {esc(m.workload)}: {esc(m.source)} → {esc(m.target)}, {esc(m.state)} ({clock(m.created)})</title></path>')
        parts.append(f'<circle cx="{max(xb, xa + 3):.1f}" cy="{y(m.target):.1f}" r="3" fill="{colour}"/>')
    axis_y = TOP + ROW * len(names) + 4
    parts.append(f'<line x1="{GUTTER}" y1="{axis_y}" x2="{GUTTER + plot}" y2="{axis_y}" stroke="#555"/>')
    for i in range(5):
        t = t0 + (t1 - t0) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(f'<line x1="{x(t):.1f}" y1="{axis_y}" x2="{x(t):.1f}" y2="{axis_y + 4}" stroke="#555"/>'
                     f'<text x="{x(t):.1f}" y="{axis_y + 16}" text-anchor="{anchor}" font-size="11" fill="#333">{clock(t)}</text>')
    parts.append(f'<text x="{GUTTER + plot / 2:.1f}" y="{axis_y + 29}" text-anchor="middle" font-size="11" fill="#555">time (UTC)</text></svg>')
    legend = " ".join(f'<span class="key"><i class="h-{esc(h)}"></i>{esc(h)}</span>' for h in HEALTH_COLOURS)
    legend += " &nbsp; Migrations: " + " ".join(f'<span class="key"><b class="k-{esc(k)}">—</b>{esc(k)}</span>' for k in KIND_COLOURS)
    return Html("".join(parts) + f'<p class="legend">{legend}</p>')


def sparkline(points: Sequence[tuple[float, float]], top: float = 1.0, width: int = 48, height: int = 18) -> Html:
    """Recent values as a small line from 0 to ``top`` (or their maximum, if higher), the newest value beside it."""
    if len(points) < 2:
        return Html('<span class="muted">no samples yet</span>')
    t0, t1 = points[0][0], points[-1][0]
    top = max(top, max(v for _, v in points), 1e-9)
    xy = " ".join(f"{width * (t - t0) / max(t1 - t0, 1e-9):.1f},{height - 2 - (height - 4) * v / top:.1f}" for t, v in points)
    return Html(f'<svg class="spark" width="{width + 36}" height="{height}" role="img" aria-label="last {t1 - t0:.0f} s, now {points[-1][1]:.2f}">'
                f'<polyline points="{xy}" fill="none" stroke="#1565c0" stroke-width="1.5"/>'
                f'<text x="{width + 4}" y="{height - 5}" font-size="10" fill="#333">{points[-1][1]:.2f}</text></svg>')


def lines(series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], levels: Sequence[tuple[str, str, float]], y_label: str,
          width: int = 520, height: int = 150) -> Html:
    """Series (label, colour, (wall time, value) points) over time and levels (label, colour, value) as dashed lines
    across it; axes labelled (time in UTC, ``y_label``), the legend below."""
    times = [t for _, _, pts in series for t, _ in pts]
    if len(times) < 2:
        return Html('<p class="muted">no samples yet</p>')
    t0, t1 = min(times), max(times)
    top = max([v for _, _, pts in series for _, v in pts] + [v for _, _, v in levels] + [1.0]) * 1.1
    left, right, up, down = 44, 10, 8, 30
    plot_w, plot_h = width - left - right, height - up - down

    def x(t: float) -> float:
        return left + plot_w * (t - t0) / max(t1 - t0, 1e-9)

    def y(v: float) -> float:
        return up + plot_h * (1 - v / top)

    parts = [f'<svg class="lines" width="{width}" height="{height}" role="img" aria-label="{esc(y_label)} over time">',
             f'<line x1="{left}" y1="{up}" x2="{left}" y2="{up + plot_h}" stroke="#555"/>',
             f'<line x1="{left}" y1="{up + plot_h}" x2="{left + plot_w}" y2="{up + plot_h}" stroke="#555"/>']
    for v in (0.0, top / 2.2, top / 1.1):  # zero, half the highest value, the highest
        parts.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#333">{v:.1f}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        parts.append(f'<text x="{x(t):.1f}" y="{up + plot_h + 13}" text-anchor="{anchor}" font-size="10" fill="#333">{clock(t)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 3}" text-anchor="middle" font-size="10" fill="#555">time (UTC)</text>')
    parts.append(f'<text x="10" y="{up + plot_h / 2:.1f}" text-anchor="middle" font-size="10" fill="#555" '
                 f'transform="rotate(-90 10 {up + plot_h / 2:.1f})">{esc(y_label)}</text>')
    for _, colour, value in levels:
        parts.append(f'<line x1="{left}" y1="{y(value):.1f}" x2="{left + plot_w}" y2="{y(value):.1f}" stroke="{colour}" stroke-dasharray="4 3"/>')
    for _, colour, pts in series:
        xy = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        parts.append(f'<polyline points="{xy}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    keys = [(label, colour, "") for label, colour, _ in series] + [(f"{label} {value:.1f}", colour, "4 3") for label, colour, value in levels]
    legend = " ".join(f'<span class="key">{_swatch(colour, dashes)}{esc(label)}</span>' for label, colour, dashes in keys)
    return Html("".join(parts) + "</svg>" + f'<p class="legend">{legend}</p>')


def _swatch(colour: str, dashes: str = "") -> str:
    """A legend's sample of a line (SVG, so the page's policy against inline styles still lets it draw its colour)."""
    dash = f' stroke-dasharray="{dashes}"' if dashes else ""
    return (f'<svg width="20" height="8" class="swatch"><line x1="0" y1="4" x2="20" y2="4" stroke="{esc(colour)}" '
            f'stroke-width="2"{dash}/></svg>')
