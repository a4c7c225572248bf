"""``fedplane bench loop --hosts netns``: the learning loop across hosts of their own (network namespaces).

The plane runs on the control-plane host (this process, in its namespace): the regions' twin link with the agents'
credentials, the models directory agents fetch signed models from, the experience inbox they ship to, the
experience feed (:mod:`controlplane.experiencefeed`) and the Flower SuperLink with the loop's ServerApp. Every agent
runs on a host of its own (:class:`fedplane.lab.drills.netns.Fabric`), and each region's trainer (its SuperNode and
the ClientApps it starts) on another: it pulls its region's experience from the feed with a credential for that
region only, and its updates go to the SuperLink; nothing crosses between hosts but over their links.

One run: the clean loop from the cold start (the heuristics, central training and the rollback drill as one extra
round, as in ``bench loop``), and mid-way a trainer host dies. Rounds overlap (:mod:`federated.flower.loopserver`):
round r+1's replies are in before round r's verdict is written, and round r+2's training goes out right after it;
so when round ``kill_round - 2`` is reported, region 0's SuperNode and every process it started are SIGKILLed while
round ``kill_round``'s training is under way. That round must end by its deadline with the other regions
(``completed``) or without a candidate (``skipped``). After it is reported the host comes back (a reboot: a new
SuperNode), so later rounds have every region again. With rounds enough, region 1's trainer host is then cut off
(every link down) the same way in round :data:`CUT_ROUND` and healed after it (``trainer_cut``). With ``--agent-cut``
an agent's host is cut off from round :data:`AGENT_CUT_ROUND` - 2's report to round :data:`AGENT_CUT_ROUND`'s (``agent_cut``): its
experience waits in its own log and arrives after the heal, and the plane's inbox, which keeps frames by the agent's
sequence numbers, holds each frame once (no number twice, none missing).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from controlplane.experiencefeed import ExperienceFeed
from fedapi import credentials
from fedcore.framelog import read_frames
from federated.flower import engine
from federated.runtime.experience import CURRENT, OLDER
from fedplane.lab.drills.netns import CONTROL_PLANE_ADDRESS, DESCRIPTION, Fabric
from fedplane.lab.loop.learning import (
    Line,
    LoopFleet,
    LoopSettings,
    event,
    measure_supernode_later,
    network_figures,
    plot,
    reported,
    rounds_of,
    run_federation,
    summarise,
)

KILL_ROUND = 4
"""The round during which a trainer host dies (the cold start's first rounds have settled by then)."""
CUT_ROUND = 7
"""The round during which another trainer host is cut off."""
AGENT_CUT_ROUND = 5
"""The round by whose report a cut-off agent host is healed (cut two rounds earlier)."""


def agent_nodes(settings: LoopSettings) -> list[str]:
    """The agents' node names, as :class:`LoopFleet` names them."""
    return [f"r{r}-edge-{i}" for r in range(settings.regions) for i in range(settings.agents_per_region)]


def trainer_host(region: int) -> str:
    return f"trainer-region-{region}"


def hosts_for(settings: LoopSettings) -> list[str]:
    """Every host besides the plane's: one per agent, one per regional trainer."""
    return [*agent_nodes(settings), *(trainer_host(r) for r in range(settings.regions))]


@dataclass(slots=True)
class TrainerHosts:
    """Each region's trainer on a host of its own, pulling from the plane's feed with its region's credential."""

    fabric: Fabric
    feed: str
    tokens: dict[int, Path]

    def node_config(self, region: int) -> dict[str, str | int | float]:
        return {"feed": self.feed, "region": f"region-{region}", "token-file": str(self.tokens[region])}

    def wrap(self, region: int) -> list[str]:
        return self.fabric.wrap(trainer_host(region), [])


@dataclass(slots=True)
class HostFault:
    """A trainer-host fault: ``kill`` (SIGKILL of its SuperNode and everything it started, then a reboot: a new
    SuperNode) or ``cut`` (every link of the host down, then up); the round it strikes and when."""

    kind: str
    round: int
    region: int
    at: float | None = None
    reported_at: float | None = None
    killed: list[int] = field(default_factory=list)

    @property
    def describe(self) -> str:
        if self.kind == "kill":
            return "SIGKILL of the trainer host's SuperNode and every process it started; a new SuperNode after the round (a reboot)"
        return "every link of the trainer host cut (control network: plane, feed and SuperLink); healed after the round"


def faults_for(settings: LoopSettings) -> list[HostFault]:
    """Region 0's trainer host killed in round :data:`KILL_ROUND`; with rounds enough, region 1's cut in
    :data:`CUT_ROUND` (later rounds show the loop back on every region)."""
    found = [HostFault("kill", min(KILL_ROUND, max(3, settings.rounds)), 0)]
    if settings.rounds >= CUT_ROUND + 1 and settings.regions > 1:
        found.append(HostFault("cut", CUT_ROUND, 1))
    return found


def kill_host_processes(pid: int) -> list[int]:
    """SIGKILL a SuperNode and everything it started (the host's processes of the loop): the pids killed."""
    try:
        root = psutil.Process(pid)
        victims = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    for proc in victims:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [p.pid for p in victims]


def fault_outcome(fault: HostFault, lines: list[Line], faults: list[HostFault]) -> dict[str, Any]:
    """What became of the round a trainer-host fault struck. ``stall_s``: how much longer than the median unaffected
    round it took (the wait for the lost region, at most its deadline)."""
    rounds = [line for line in lines if "round" in line]
    hit = next((line for line in rounds if line["round"] == fault.round), None)
    if hit is None or fault.at is None:
        return {"round": fault.round, "round_outcome": "not reached", "stall_s": float("inf")}
    touched = {f.round + k for f in faults for k in (0, 1)}
    normal = [line["round_wall_s"] for line in rounds if line["round"] not in touched and not line.get("drill")]
    typical = statistics.median(normal) if normal else 0.0
    return {
        "round": fault.round, "region": f"region-{fault.region}", "fault": fault.describe,
        "round_outcome": "skipped" if hit["canary"] == "skipped" else "completed", "verdict": hit["canary"],
        "answered": hit["answered"], "asked": hit["asked"],
        "stall_s": round(max(0.0, hit["round_wall_s"] - typical), 2), "round_wall_s": round(hit["round_wall_s"], 2),
        "typical_round_wall_s": round(typical, 2), "fault_to_verdict_s": round((fault.reported_at or fault.at) - fault.at, 2),
        "next_round_wall_s": next((round(line["round_wall_s"], 2) for line in rounds if line["round"] == fault.round + 1), None),
        "next_round_answered": next((line["answered"] for line in rounds if line["round"] == fault.round + 1), None),
    }


@dataclass(slots=True)
class AgentCut:
    """An agent host cut off (every link down) and healed: the inbox's frames of that agent at each step."""

    node: str
    cluster: str
    frames: dict[str, int] = field(default_factory=dict)
    at: dict[str, float] = field(default_factory=dict)


def inbox_seqs(directory: Path) -> list[int]:
    """The sequence numbers of every frame the plane's inbox holds for one agent, oldest first (older file, then
    current)."""
    seqs: list[int] = []
    for name in (OLDER, CURRENT):
        if (directory / name).is_file():
            seqs.extend(int(frame["seq"]) for frame in read_frames(directory / name))
    return seqs


def agent_cut_outcome(cut: AgentCut, seqs: list[int]) -> dict[str, Any]:
    """What the inbox holds of a cut-off agent: frames before, during and after the cut, and whether any sequence
    number is there twice or missing (a shipment retried after the heal must not count twice)."""
    if "cut" not in cut.frames:
        return {"node": cut.node, "outcome": "not reached"}
    return {
        "node": cut.node, "cluster": cut.cluster, "round": AGENT_CUT_ROUND,
        "fault": "every link of the agent's host cut for two rounds (plane, peers, feed), then healed",
        "cut_s": round(cut.at.get("healed", cut.at["cut"]) - cut.at["cut"], 2),
        "frames_before_cut": cut.frames["cut"],
        "frames_arrived_while_cut": cut.frames.get("healed", cut.frames["cut"]) - cut.frames["cut"],
        "frames_arrived_after_heal": len(seqs) - cut.frames.get("healed", cut.frames["cut"]),
        "frames_held": len(seqs), "duplicate_seqs": len(seqs) - len(set(seqs)),
        "missing_seqs": (max(seqs) - min(seqs) + 1 - len(set(seqs))) if seqs else 0,
    }


def bad_promotions(lines: list[Line], tolerance: float) -> list[int]:
    """Rounds whose promotion moved the fleet to a worse model, measured on the report seeds (more than ``tolerance``
    below the fleet before it), and any drill candidate promoted."""
    bad, before = [], event(lines, "measured")["metrics"][0]
    for line in reported(lines):
        if line["canary"] == "promoted" and (line.get("drill") or line["metric"] < before * (1.0 - tolerance)):
            bad.append(line["round"])
        before = line["metric"]
    return bad


async def bench_hosts(settings: LoopSettings, fabric: Fabric, workdir: Path, png: Path | None,
                      on_line: Callable[[str, Line], None], agent_cut: bool = False) -> dict[str, Any]:
    """The run described in the module's docstring; returns ``bench loop``'s keys plus the hosts' figures (``agent_cut``:
    with the agent host's cut too)."""
    started = time.monotonic()
    fleet = LoopFleet(settings, workdir, hosts=fabric, plane_host=CONTROL_PLANE_ADDRESS)
    faults = faults_for(settings)
    engines: list[engine.Engine] = []
    supernode: list[float] = []
    feed: ExperienceFeed | None = None

    cut = AgentCut(agent_nodes(settings)[-1], f"region-{settings.regions - 1}") if agent_cut and settings.rounds > AGENT_CUT_ROUND else None

    def agent_frames() -> int:
        assert fleet.inbox is not None and cut is not None
        return len(inbox_seqs(fleet.inbox.directory / cut.cluster / cut.node))

    def strike(fault: HostFault) -> None:
        fault.at = time.monotonic()
        if fault.kind == "kill":
            fault.killed = kill_host_processes(engines[0].groups[f"supernode-{fault.region}"])
        else:
            fabric.isolate([trainer_host(fault.region)])

    def recover(fault: HostFault) -> None:
        fault.reported_at = time.monotonic()
        if fault.kind == "cut":
            fabric.heal([trainer_host(fault.region)])
            return
        assert fleet.trainers is not None
        engines[0].add_supernode(f"supernode-{fault.region}", {"partition-id": fault.region, **fleet.trainers.node_config(fault.region)},
                                 fleet.trainers.wrap(fault.region))

    def follow(line: Line) -> None:
        on_line("hosts", line)
        if cut is not None and line.get("round") == AGENT_CUT_ROUND - 2 and "cut" not in cut.at:
            cut.frames["cut"], cut.at["cut"] = agent_frames(), time.monotonic()
            fabric.isolate([cut.node])
        elif cut is not None and line.get("round") == AGENT_CUT_ROUND and "cut" in cut.at and "healed" not in cut.at:
            cut.frames["healed"], cut.at["healed"] = agent_frames(), time.monotonic()
            fabric.heal([cut.node])
        for fault in faults:
            if line.get("round") == fault.round - 2 and fault.at is None:
                strike(fault)
            elif line.get("round") == fault.round and fault.at is not None and fault.reported_at is None:
                recover(fault)

    def on_engine(eng: engine.Engine) -> None:
        engines.append(eng)
        measure_supernode_later(eng, supernode)

    try:
        await fleet.start()
        assert fleet.inbox is not None and fleet.auth is not None
        feed = ExperienceFeed(fleet.inbox, fleet.auth, CONTROL_PLANE_ADDRESS)
        feed.start()
        tokens = {}
        for r in range(settings.regions):  # a region's trainer reads its own region's experience only
            path = workdir / "trainers" / f"region-{r}.cred"
            path.parent.mkdir(parents=True, exist_ok=True)
            token = fleet.auth.issue("agent", f"region-{r}")
            credentials.write(path, credentials.Credential(token, "agent", f"region-{r}", "", f"{CONTROL_PLANE_ADDRESS}:{feed.port}"))
            tokens[r] = path
        fleet.trainers = TrainerHosts(fabric, f"http://{CONTROL_PLANE_ADDRESS}:{feed.port}", tokens)
        overrides = {"baselines": 1, "num-rounds": settings.rounds + 1, "drill-round": settings.rounds + 1,
                     "min-clients": settings.regions - 1}
        lines = await run_federation(fleet, "hosts", overrides, {}, follow, on_engine)
        placed = fleet.placed()
        cut_seqs = inbox_seqs(fleet.inbox.directory / cut.cluster / cut.node) if cut is not None else []
    finally:
        if feed is not None:
            feed.stop()
        await fleet.stop()
    result = summarise(settings, fleet, lines, max(supernode, default=0.0), placed, started)
    result.update(network_figures(fleet, lines))
    learning = rounds_of(lines)
    result.update({
        "agent_hosts": len(fleet.agents), "trainer_hosts": settings.regions, "plane_hosts": 1,
        "trainer_killed": fault_outcome(faults[0], lines, faults),
        **({"trainer_cut": fault_outcome(faults[1], lines, faults)} if len(faults) > 1 else {}),
        **({"agent_cut": agent_cut_outcome(cut, cut_seqs)} if cut is not None else {}),
        "bad_models_promoted": len(bad_promotions(lines, 0.005)),
        "experience_pulled_kib_per_trainer_round": round((feed.served_bytes if feed else 0) / 1024 / max(1, settings.regions * len(learning)), 2),
    })
    result["detail"].update({
        "hosts": DESCRIPTION + f"; {settings.regions} trainer hosts on the control network, one SuperNode each",
        "engine": f"flower deployment engine: 1 SuperLink on the plane's host ({CONTROL_PLANE_ADDRESS}), 1 SuperNode per region on a "
                  "trainer host of its own; trainers pull their region's experience from the plane's feed (HTTP, bearer "
                  "credential for that region only); SuperLink-SuperNode channel over TLS (the SuperLink's own CA) with SuperNode "
                  "authentication (each trainer's key registered with the SuperLink)",
        "bad_models": "a promotion whose fleet model measures more than 0.5% below the fleet before it on the report seeds, "
                      "or a drill candidate promoted",
        "min_clients": settings.regions - 1,
    })
    result["superlink_channel"] = "tls+supernode-auth" if engines and engines[0].security else "insecure"
    if png is not None:
        result["curve_png"] = str(plot(result, png))
    return result
