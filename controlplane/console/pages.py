"""The console's pages as pure functions: a :class:`~controlplane.console.snapshots.Snapshot` in, named HTML regions out.

A page is a title and regions; the server frames them (:func:`controlplane.console.markup.document`) and the
live stream sends a region again whenever its HTML changes, so what the first load shows and what ``/events``
updates are the same function of the same snapshot. :func:`render` maps a path to its page (None: no such page).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from controlplane.console import charts, markup
from controlplane.console.markup import (
    Html,
    ago,
    cell,
    clock,
    cores,
    gib,
    health_cell,
    join,
    meter,
    named_link,
    table,
    tag,
    when,
)
from controlplane.console.snapshots import (
    AgentView,
    ClusterView,
    DecisionView,
    MigrationView,
    Snapshot,
)
from fedcore.kubeobjects import WORKLOAD_LABEL

LOG_ROWS = 60
"""Decisions on pages other than the log itself (the log shows every one the snapshot holds)."""


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    path: str
    regions: tuple[tuple[str, Html], ...]

    def html(self) -> str:
        return markup.document(self.title, self.path, self.regions)


def _status(s: Snapshot) -> Html:
    if not s.member:
        role = "this process leads (embedded: one store, one member)" if s.leading else "this process does not lead"
    elif s.leading:
        role = f"this member ({s.member}) leads"
    else:
        role = f"standby member {s.member}; the leader is {s.leader or 'not known yet'} (this page shows what the store holds)"
    counts: dict[str, int] = {}
    for c in s.clusters:
        counts[c.health] = counts.get(c.health, 0) + 1
    active = sum(1 for m in s.migrations if m.state not in ("done", "failed", "cancelled"))
    health = join((tag("span", f"{n} {h}", class_=f"h-{h}") for h, n in sorted(counts.items())), ", ")
    return tag("p", tag("b", "Leader: "), role, " · ", health,
               f" · {sum(c.agents_reporting for c in s.clusters)}/{sum(len(c.agents) for c in s.clusters)} agents reporting",
               f" · {len(s.workloads)} workloads · {active} migrations in flight", class_="status")


def _agent_chips(c: ClusterView) -> Html:
    if not c.agents:
        return tag("span", "no agent has reported", class_="muted")
    return join((tag("span", a.node, class_=f"chip a-{a.state}", title=f"{a.state}, model {a.model_version or '-'}, scorer {a.scorer}")
                 for a in c.agents), " ")


def _evidence(c: ClusterView) -> Html:
    return join((tag("span", r, class_="reason") for r in c.reasons), "; ") if c.reasons else Html("")


def overview(s: Snapshot) -> Page:
    regions: dict[str, list[ClusterView]] = {}
    for c in s.clusters:
        regions.setdefault(c.region, []).append(c)
    blocks = []
    for region in sorted(regions):
        rows = [({"data_cluster": c.name}, (
            named_link("clusters", c.name), health_cell(c.health), clock(c.since) + "Z", cell(_evidence(c), class_="evidence"),
            f"{sum(1 for n in c.nodes if n.ready)}/{len(c.nodes)}", f"{c.agents_reporting}/{len(c.agents)}", _agent_chips(c),
            meter(c.cpu_used, c.cpu_milli), meter(c.memory_used, c.memory_mib),
            cell(charts.sparkline(c.load_history) + f"→ {c.forecast:.2f}", class_="load"), c.scorer,
        )) for c in regions[region]]
        blocks.append(tag("h2", f"Region {region}"))
        blocks.append(table(("Cluster", "Health", "Since (UTC)", "Evidence", "Nodes ready", "Agents", "Agents (node)", "CPU placed",
                             "Memory placed", "Load (0–1), 2 min → forecast", "Scorer"), rows, class_="clusters"))
    clusters = join(blocks) if blocks else tag("p", "No cluster is registered (serve --twin-clusters N, or --kubeconfig).", class_="empty")
    recent = tag("h2", "Recent decisions") + _decision_table(s.decisions[:10])
    return Page("Overview", "/", (("status", _status(s)), ("clusters", clusters), ("recent", recent)))


def _gossip(view: tuple[int, int, int]) -> Html:
    alive, suspect, dead = view
    return join((tag("span", f"{alive} alive", class_="g-alive"), tag("span", f"{suspect} suspect", class_="g-suspect" if suspect else "muted"),
                 tag("span", f"{dead} dead", class_="g-dead" if dead else "muted")), " / ")


def _model(a: AgentView) -> Html:
    """The model an agent reports; flagged when it is told to place with the learned family but runs no learned model
    (the heuristic fallback: no model file reached it, or no onnxruntime on its machine)."""
    if a.scorer == "learned" and (not a.model_version or a.model_version.startswith("heuristic")):
        return cell(f"{a.model_version or '-'} (no learned model)", class_="warn",
                    title="sent the learned family, but no policy model loads on this agent: it scores with best fit")
    return cell(a.model_version or "-")


def _agents_table(agents: tuple[AgentView, ...]) -> Html:
    return table(
        ("Node", "Agent", "State", "Last report", "Model version", "Scorer", "Context", "Pods", "Load", "Gossip: own cluster",
         "Gossip: other clusters", "Health note"),
        (({"data_agent": a.node}, (
            a.node, a.agent_id, cell(a.state, class_=f"a-{a.state}"), "fresh" if a.state != "silent" else ago(a.age_s), _model(a),
            a.scorer, f"v{a.context_version}" if a.context_version else "-", a.pods, f"{a.load:.2f}", _gossip(a.own), _gossip(a.others),
            a.health_reason)) for a in agents),
        empty="No agent has reported for this cluster (agents report over the twin link or gRPC).",
    )


def cluster(s: Snapshot, name: str) -> Page | None:
    c = s.cluster(name)
    if c is None:
        return None
    verdict = join((
        tag("p", tag("span", c.health, class_=f"badge h-{c.health}", data_health=c.health), f" since {when(c.since)}",
            f" · region {c.region} · {c.backend} back end · scorer family sent to agents: {c.scorer}"),
        tag("ul", *(tag("li", r) for r in c.reasons), class_="evidence") if c.reasons else tag("p", "no evidence recorded", class_="muted"),
    ))
    agent_of = {a.node: a for a in c.agents}
    nodes = table(
        ("Node", "Ready", "CPU", "Memory", "GPUs", "Arch", "Problem", "Agent"),
        ((n.name, cell("ready" if n.ready else "not ready", class_="ok" if n.ready else "bad"), cores(n.cpu_milli), gib(n.memory_mib), n.gpus,
          n.arch, n.problem, agent_of[n.name].state if n.name in agent_of else "none") for n in c.nodes),
        empty="No node listed: the cluster's API has not answered a probe.",
    )
    here = [(w, p) for w in s.workloads for p in w.placements if p.cluster == name]
    placed = table(("Workload", "Replicas", "Epoch", "State"), ((named_link("workloads", w.name), p.replicas, p.epoch, p.state) for w, p in here),
                   empty="No workload is placed here.")
    return Page(f"Cluster {name}", "/clusters/" + urllib.parse.quote(name, safe=""), (
        ("verdict", verdict),
        ("nodes", tag("h2", "Nodes, as the cluster's API last listed them") + nodes),
        ("agents", tag("h2", "Agents and their gossip view") + _agents_table(c.agents)),
        ("placements", tag("h2", "Placements") + placed),
    ))


def workloads(s: Snapshot) -> Page:
    names = [c.name for c in s.clusters]
    health = {c.name: c.health for c in s.clusters}
    rows = []
    for w in s.workloads:
        by = {p.cluster: p for p in w.placements}
        cells = [cell(f"{by[n].replicas} @ e{by[n].epoch}" + ("" if by[n].state == "placed" else f" ({by[n].state})"),
                      class_=f"placed h-{health.get(n, 'unknown')}") if n in by else cell("", class_="muted") for n in names]
        request = f"{cores(w.cpu_milli)} CPU, {gib(w.memory_mib)}" + (f", {w.gpus} GPU" if w.gpus else "")
        rows.append((named_link("workloads", w.name), w.qos, w.replicas, request, sum(p.replicas for p in w.placements if p.state == "placed"), *cells))
    headers = ("Workload", "Class", "Desired", "Per replica", "Placed", *names)
    matrix = table(headers, rows, empty="No workload is submitted (fedplane controlplane submit NAME --replicas N).", class_="matrix")
    moving = [m for m in s.migrations if m.state not in ("done", "failed", "cancelled")]
    return Page("Workloads", "/workloads", (
        ("placements", tag("p", "Replicas @ fencing epoch per cluster; the cell's colour is the cluster's health.", class_="muted") + matrix),
        ("moving", tag("h2", "Migrations in flight") + _migration_table(moving, s.taken, "Nothing is moving.")),
    ))


def workload(s: Snapshot, name: str) -> Page | None:
    """One workload's placements and its trail: each decision about it and each journaled step of its migrations."""
    w = next((w for w in s.workloads if w.name == name), None)
    if w is None:
        return None
    health = {c.name: c.health for c in s.clusters}
    summary = tag("p", f"Class {w.qos}: {w.replicas} replicas desired, each {cores(w.cpu_milli)} CPU, {gib(w.memory_mib)}"
                       + (f", {w.gpus} GPU" if w.gpus else "") + ". A fencing epoch grows with every migration: "
                       "a bind at an older epoch is refused."
                       + (" Batch runs on CPU online pods reserve and leave unused; online demand preempts it, lowest bid first."
                          if w.qos == "batch" else ""))
    placed = table(("Cluster", "Health", "Replicas", "Fencing epoch", "State", "On reclaimed CPU", "Preempted"),
                   ((named_link("clusters", p.cluster), health_cell(health.get(p.cluster, "unknown")), p.replicas, p.epoch, p.state,
                     cores(p.reclaimed_milli), p.preemptions) for p in w.placements), empty="Placed nowhere now.")
    events = [(d.at, cell(d.kind, class_=_kind_class(d.kind)), " → ".join(x for x in (d.source, d.target) if x), "; ".join(d.reasons))
              for d in s.decisions if d.workload == name]
    events += [(st.at, cell(f"{m.kind}: {st.step} {st.phase}", class_="step"), f"{m.source} → {m.target}, epoch {m.epoch}", st.detail)
               for m in s.migrations if m.workload == name for st in m.steps]
    current = {p.cluster: p.epoch for p in w.placements}
    mine = sorted((p for p in s.pods if p.workload == name), key=lambda p: (p.cluster, p.name))
    pods = table(("Pod", "Cluster", "Bound to", "Epoch", "Phase", "Ready"),
                 ((p.name, p.cluster, p.node or "pending", cell(p.epoch if p.epoch >= current.get(p.cluster, 0) else f"{p.epoch} (stale)",
                                                               class_=None if p.epoch >= current.get(p.cluster, 0) else "bad"),
                   p.phase.lower(), "yes" if p.ready else "no") for p in mine),
                 empty="No pod listed: the clusters holding it are not embedded twins, or do not answer now.")
    elsewhere = sorted({p.cluster for p in w.placements} - {c.name for c in s.clusters if c.backend == "twin"})
    if elsewhere:
        pods += tag("p", f"Pods on {', '.join(elsewhere)} are in that cluster's API: kubectl get pods -l {WORKLOAD_LABEL}={name}",
                    class_="muted")
    trail = table(("Time (UTC)", "What", "Where", "Detail"), ((when(at), *rest) for at, *rest in sorted(events, key=lambda e: e[0])),
                  empty="Nothing about it in the decisions and migrations the plane keeps.", class_="log")
    return Page(f"Workload {name}", "/workloads/" + urllib.parse.quote(name, safe=""), (
        ("placements", summary + placed),
        ("pods", tag("h2", "Pods and where they are bound") + pods),
        ("trail", tag("h2", "Trail, oldest first: decisions and migration steps") + trail),
    ))


def _steps(m: MigrationView) -> str:
    """The journal's steps in order, each once: done ones by name, the one under way marked with its phase."""
    names: dict[str, str] = {}
    for st in m.steps:
        names[st.step] = st.phase
    return " → ".join(step if phase == "done" else f"{step} ({phase})" for step, phase in names.items())


def _migration_table(ms: list[MigrationView], now: float, empty: str) -> Html:
    return table(
        ("Started", "Kind", "Workload", "From → to", "Replicas", "Epoch", "State", "Took", "Steps", "Reasons"),
        ((when(m.created), cell(m.kind, class_=f"k-{m.kind}"), m.workload, f"{m.source} → {m.target}", m.replicas, m.epoch,
          cell(m.state + (f": {m.error}" if m.error else ""), class_=f"m-{m.state}"),
          f"{(m.updated if m.state in ('done', 'failed', 'cancelled') else now) - m.created:.1f} s",
          _steps(m), "; ".join(m.reasons)) for m in reversed(ms)),
        empty=empty, class_="log",
    )


def timeline(s: Snapshot) -> Page:
    chart = charts.timeline(s)
    return Page("Migrations and failovers", "/timeline", (
        ("chart", chart),
        ("migrations", tag("h2", "Migrations, newest first") + _migration_table(list(s.migrations), s.taken, "No migration has run yet.")),
        ("verdicts", tag("h2", "Verdict changes") + _decision_table([d for d in s.decisions if d.kind.startswith("verdict:")][:LOG_ROWS])),
    ))


def _kind_class(kind: str) -> str:
    """A verdict reads in its health's colour, any other decision in its kind's."""
    family, _, detail = kind.partition(":")
    return f"v-{detail}" if family == "verdict" else f"k-{family}"


def _decision_table(ds: list[DecisionView] | tuple[DecisionView, ...]) -> Html:
    return table(("Time (UTC)", "Kind", "Workload", "From", "To", "Reasons"),
                 ((when(d.at), cell(d.kind, class_=_kind_class(d.kind)), d.workload, d.source, d.target, "; ".join(d.reasons)) for d in ds),
                 empty="No decision recorded yet.", class_="log")


def decisions(s: Snapshot) -> Page:
    return Page("Decisions", "/decisions", (("log", tag("p", f"The newest {len(s.decisions)} decisions, newest first.", class_="muted")
                                                    + _decision_table(s.decisions)),))


def autoscaling(s: Snapshot) -> Page:
    rows = ((a.workload, a.policy, a.series, f"{a.demand:.2f}", f"{a.forecast:.2f}", a.desired, f"{a.ready}/{a.replicas}",
             f"{a.min_replicas}..{a.max_replicas}", meter(a.replicas, a.max_replicas), a.reason, a.fallback or "-") for a in s.autoscaling)
    status = table(("Workload", "Policy", "Demand series", "Demand", "Forecast", "Desired", "Ready/replicas", "Bounds", "Of max", "Last reason",
                    "Fallback"), rows, empty="No workload is autoscaled (fedplane autoscale enable WORKLOAD).")
    charted = join(tag("div", tag("h2", f"{a.workload}: demand against replicas"), charts.lines(
        [("demand (replayed series)", "#1565c0", a.demand_history)],
        [("forecast peak", "#b26a00", a.forecast), ("desired", "#6a1b9a", a.desired), ("replicas", "#2e7d32", a.replicas)],
        "replicas' worth"), class_="chart") for a in s.autoscaling)
    changes = [d for d in s.decisions if d.kind.startswith("autoscale")][:LOG_ROWS]
    return Page("Autoscaling", "/autoscaling", (("status", status), ("charts", charted),
                                                ("changes", tag("h2", "Journaled changes") + _decision_table(changes))))


def learning(s: Snapshot) -> Page:
    families = table(("Cluster", "Scorer family sent", "Agents on it", "Model versions reported"),
                     ((named_link("clusters", c.name), c.scorer, f"{sum(1 for a in c.agents if a.scorer == c.scorer)}/{len(c.agents)}",
                       ", ".join(sorted({a.model_version or '-' for a in c.agents})) or "-") for c in s.clusters))
    agents = table(("Cluster", "Node", "Model version", "Scorer", "Context", "State"),
                   ((c.name, a.node, _model(a), a.scorer, f"v{a.context_version}" if a.context_version else "-", a.state)
                    for c in s.clusters for a in c.agents), empty="No agent has reported, so no model is known to run anywhere.")
    selections = _decision_table([d for d in s.decisions if d.kind.startswith("scorer")][:LOG_ROWS])
    note = tag("p", "The learning loop's rounds run beside the plane (fedplane federated rounds start) and decide through its models "
                    "directory: below, the models the plane hands its agents and the loop's decisions, then which family each "
                    "cluster places with, which model each agent reports, and the scorer selections it made.", class_="note")
    loop = [d for d in s.decisions if d.kind.startswith(("model-", "rounds-"))]
    return Page("Learning", "/learning", (("note", note), ("models", tag("h2", "Models the plane hands out") + _models(loop)),
                                          ("rounds", tag("h2", "The loop's decisions: rounds and model changes") + _decision_table(loop[:LOG_ROWS])),
                                          ("families", tag("h2", "Scorer family per cluster") + families),
                                          ("agents", tag("h2", "Which agent runs which model") + agents),
                                          ("selections", tag("h2", "Scorer selections") + selections)))


def _models(loop: list[DecisionView]) -> Html:
    """Promoted and on-trial versions as the newest model decisions the plane keeps say (newest first)."""
    promoted = next((d for d in loop if d.kind == "model-promote"), None)
    trial = next((d for d in loop if d.kind in ("model-canary", "model-canary-end", "model-promote")), None)
    rows = [("promoted (every agent)", promoted.target if promoted else "-", when(promoted.at) if promoted else "-"),
            ("on trial (canary)", trial.target if trial and trial.kind == "model-canary" else "none",
             "; ".join(trial.reasons) if trial and trial.kind == "model-canary" else "-")]
    return table(("", "Version", "Since / why"), rows) if promoted or trial else tag(
        "p", "No model decision in the newest decisions this plane keeps (serve --models DIR; the rounds service decides).", class_="muted")


def drills(s: Snapshot) -> Page:
    note = tag("p", "No drill data: a serving control plane runs no drills (RunDrill answers FAILED_PRECONDITION). Drills belong to "
                    "the lab: ", tag("code", "fedplane drill failover --json --plot FILE"), " prints their figures and draws their timeline.",
                class_="note")
    failovers = [m for m in s.migrations if m.kind == "failover"]
    return Page("Drills", "/drills", (("note", note), ("failovers", tag("h2", "Failovers this plane ran for real")
                                                                     + _migration_table(failovers, s.taken, "None."))))


PAGES: dict[str, Callable[[Snapshot], Page]] = {
    "/": overview, "/workloads": workloads, "/timeline": timeline, "/decisions": decisions, "/autoscaling": autoscaling,
    "/learning": learning, "/drills": drills,
}


def render(s: Snapshot, path: str) -> Page | None:
    """The page at ``path`` (``/clusters/NAME``, ``/workloads/NAME`` with NAME percent-encoded), or None when there is none."""
    if path.startswith("/clusters/"):
        return cluster(s, urllib.parse.unquote(path[len("/clusters/"):]))
    if path.startswith("/workloads/"):
        return workload(s, urllib.parse.unquote(path[len("/workloads/"):]))
    page = PAGES.get(path)
    return page(s) if page else None


def paths(s: Snapshot) -> list[str]:
    """Every page of this snapshot: the fixed ones, one per cluster and one per workload."""
    return [*PAGES, *("/clusters/" + urllib.parse.quote(c.name, safe="") for c in s.clusters),
            *("/workloads/" + urllib.parse.quote(w.name, safe="") for w in s.workloads)]

