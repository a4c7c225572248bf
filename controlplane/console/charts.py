"""Inline SVG charts drawn from a snapshot: the failover timeline (each cluster's health over time, migrations across).

Pure functions returning :class:`~controlplane.console.markup.Html`; every text goes through ``esc``. The legend
sits below the plot, never on it; axes carry their unit.
"""

from __future__ import annotations

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
                         f'fill="{HEALTH_COLOURS.get(h, "#757575")}" fill-opacity="0.8"><title>{esc(name)}: {esc(h)} {clock(a)}–{clock(b)}</title></rect>')
    for m in s.migrations:
        if m.created < t0 or m.source not in names or m.target not in names:
            continue
        colour = KIND_COLOURS.get(m.kind, "#424242")
        xa, xb = x(m.created), x(m.updated if m.state in ("done", "failed", "cancelled") else t1)
        parts.append(f'<path d="M{xa:.1f},{y(m.source):.1f} L{max(xb, xa + 3):.1f},{y(m.target):.1f}" stroke="{colour}" stroke-width="2" fill="none">'
                     f'<title>{esc(m.kind)} {esc(m.workload)}: {esc(m.source)} → {esc(m.target)}, {esc(m.state)} ({clock(m.created)})</title></path>')
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
