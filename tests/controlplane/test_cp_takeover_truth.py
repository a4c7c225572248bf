"""What a new leader (or a restarted plane) says right after a take-over, on an injected clock: the agents an earlier
leader heard are expected, so their silence reads AGENTS_SILENT (never "HEALTHY with 0/0 agents reporting") in the
verdict and in /metrics; the per-agent series; a standby's GetLeader and refusals; ``controlplane agents`` shows the
pods the back end binds, not a cut-off agent's last word."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from controlplane.agentviews import AgentSeries
from controlplane.campaigning import Campaign, Keepalive
from controlplane.evidence import AgentReport, ClusterEvidence, NodeSummary, PeerState
from controlplane.leading import Leader
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.service import ControlPlaneService
from controlplane.store import StoreUnavailable
from controlplane.verdicts import Health, Timings, judge
from controlplane.workloads import Policy, Template, Workload
from fedapi import controlplane_pb2 as cp
from fedcore.backends.twin import Binder
from fedcore.resources import Resources

NODES = ("c0-n0", "c0-n1", "c0-n2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plane(db: Path, clock: Clock, lead: bool = True) -> ControlPlane:
    p = ControlPlane(db, Backends(clock, 0.0, Binder.EXTERNAL), clock, Timings(), lead=lead, scorer_selection=False)
    if lead and not p.registry.clusters():
        p.register_cluster(ClusterSpec("c0", "r0", twin_nodes=3))
    return p


def report(node: str, seq: int) -> AgentReport:
    peers = tuple(("c0", n, PeerState.ALIVE) for n in NODES if n != node)
    return AgentReport("c0", node, f"{node}-a", seq, NodeSummary(node, Resources(1000, 1000), Resources(), pods=16), peers)


def health(p: ControlPlane) -> Health:
    return p.verdicts["c0"][0].health


def test_judge_reads_expected_silent_agents_as_silent() -> None:
    ev = ClusterEvidence("c0", 10.0, 0, 0.0, True, "", 0, 0, float("inf"), 0, 0, 0, 0)
    assert judge(ev, Timings()).health is Health.HEALTHY  # nobody expected: the API's word
    silent = judge(ev, Timings(), expected=3)
    assert silent.health is Health.AGENTS_SILENT and "0/3 agents reporting" in silent.reasons


def test_a_restarted_plane_expects_the_agents_it_heard_before(tmp_path: Path) -> None:
    clock = Clock()
    first = plane(tmp_path / "cp.db", clock)
    for seq, node in enumerate(NODES, 1):
        first.report(report(node, seq))
    first.tick(clock.now)
    assert health(first) is Health.HEALTHY
    first.close()
    clock.now += 5.0
    second = plane(tmp_path / "cp.db", clock)  # take-over: an empty evidence book, nobody has reported to it yet
    assert health(second) is Health.AGENTS_SILENT
    assert "0/3 agents reporting" in second.verdicts["c0"][0].reasons
    assert b'fedplane_cluster_health{cluster="c0",health="agents-silent"} 1.0' in generate_latest(second.metrics.registry)
    second.tick(clock.now)
    assert health(second) is Health.AGENTS_SILENT
    for seq, node in enumerate(NODES, 10):
        second.report(report(node, seq))
    clock.now += 0.2
    second.tick(clock.now)
    assert health(second) is Health.HEALTHY


def test_per_agent_series_and_pods_as_the_back_end_binds_them(tmp_path: Path) -> None:
    clock = Clock()
    p = plane(tmp_path / "cp.db", clock)
    for seq, node in enumerate(NODES, 1):
        p.report(report(node, seq))
    p.tick(clock.now)
    p.metrics.registry.register(AgentSeries(lambda: p.evidence, lambda: list(p.verdicts), clock))
    text = generate_latest(p.metrics.registry).decode()
    assert 'fedplane_agent_healthy{cluster="c0",node="c0-n1"} 1.0' in text
    assert 'fedplane_agent_pods{cluster="c0",node="c0-n1"} 16.0' in text
    clock.now += 5.0  # silent now
    text = generate_latest(p.metrics.registry).decode()
    assert 'fedplane_agent_healthy{cluster="c0",node="c0-n1"} 0.0' in text
    assert 'fedplane_agent_report_age_seconds{cluster="c0",node="c0-n1"} 5.0' in text
    clock.now += 601.0  # gone for long: no series any more
    assert "fedplane_agent_healthy{" not in generate_latest(p.metrics.registry).decode()
    # the agents said 16 pods each; the twin binds two on c0-n1 (one finished) and none elsewhere
    p.submit(Workload("web", 3, Template(100, 64), Policy()), dry_run=False)
    twin = p.backends.twins()["c0"]
    pods = sorted(s.name for s in twin.list_pods())
    for name in pods:
        assert twin.bind_pod(name, "c0-n1", 1).ok
    twin.complete_pod(pods[0], 1, True)
    ((_, _, _, rows),) = p.agents("c0")
    assert [r.report.summary.pods for r in rows] == [0, 2, 0]


class Context:
    def __init__(self) -> None:
        self.trailers: tuple[tuple[str, str], ...] = ()

    def set_trailing_metadata(self, md: tuple[tuple[str, str], ...]) -> None:
        self.trailers = md

    async def abort(self, code: object, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")


class Election:
    """Election's surface as Campaign uses it; ``down`` makes every etcd call fail."""

    def __init__(self) -> None:
        self.member, self.address, self.link, self.ttl_s = "m1", "h1:1", "h1:2", 5
        self.holds: tuple[Leader, int] | None = (Leader("m0", "h0:1", 3, "h0:2"), 77)
        self.alive, self.down, self.leases_alive = True, False, True

    class store:  # noqa: N801 (the attribute Campaign reads)
        refused = 0

    def _etcd(self) -> None:
        if self.down:
            raise StoreUnavailable("etcd unreachable")

    def holder(self) -> tuple[Leader, int] | None:
        self._etcd()
        return self.holds

    def confirmed(self, leader: Leader, lease: int) -> Leader | None:
        self._etcd()
        return leader if self.alive else None

    def dead(self, lease: int) -> bool:
        self._etcd()
        return False  # unconfirmed (no refresh for seconds) but not yet DEAD_AFTER_S: nobody is deposed

    def depose(self, lease: int) -> None:
        raise AssertionError("a holder not dead yet was deposed")

    def campaign(self) -> None:
        return None

    def refresh(self) -> bool:
        self._etcd()
        return self.leases_alive

    def step_down(self) -> None:
        pass

    def join(self) -> None:
        self._etcd()

    def links(self) -> list[str]:
        self._etcd()
        return ["h0:2", "h1:2"]


def test_a_standby_names_only_a_confirmed_leader_counts_refusals_and_knows_nothing_without_etcd(tmp_path: Path) -> None:
    clock = Clock()
    p = plane(tmp_path / "cp.db", clock, lead=False)
    election = Election()
    campaign = Campaign(election, p, poll_s=0.01)  # type: ignore[arg-type]
    service = ControlPlaneService(p, lambda *a: {}, campaign)

    async def run() -> None:
        await campaign._watch()
        assert campaign.leader() == Leader("m0", "h0:1", 3, "h0:2")
        await campaign._roster()
        assert campaign.members == ("h0:2", "h1:2")  # the leader's link first: agents learn every member from acks
        with pytest.raises(RuntimeError, match="send writes to h0:1"):
            await service.SubmitWorkload(cp.SubmitWorkloadRequest(), Context())  # type: ignore[arg-type]
        assert campaign.refused == 1
        assert b"fedplane_writes_refused 1.0" in generate_latest(p.metrics.registry)
        election.alive = False  # the leader stopped refreshing its lease (killed, or cut off)
        await campaign._watch()
        with pytest.raises(RuntimeError, match="no leader is elected now"):
            await service.SubmitWorkload(cp.SubmitWorkloadRequest(), Context())  # type: ignore[arg-type]
        election.alive, election.down = True, True  # etcd unreachable: who leads is unknown
        task = asyncio.create_task(campaign.run())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        shown = await service.GetLeader(cp.GetLeaderRequest(), Context())  # type: ignore[arg-type]
        assert shown.leader == "" and not shown.is_leader

    asyncio.run(run())


def test_a_leader_that_lost_its_lease_never_names_itself(tmp_path: Path) -> None:
    clock = Clock()
    p = plane(tmp_path / "cp.db", clock, lead=False)
    election = Election()
    campaign = Campaign(election, p, poll_s=0.01)  # type: ignore[arg-type]
    service = ControlPlaneService(p, lambda *a: {}, campaign)

    async def run() -> None:
        campaign.leading, campaign.known = True, Leader("m1", "h1:1", 4, "h1:2")
        campaign._keepalive = Keepalive(election)  # type: ignore[arg-type]
        await campaign._hold()
        assert campaign.is_leader
        election.leases_alive = False  # cut off: etcd says the lease is gone
        for _ in range(100):
            await campaign._hold()
            if not campaign.is_leader:
                break
        assert campaign._keepalive is None
        shown = await service.GetLeader(cp.GetLeaderRequest(), Context())  # type: ignore[arg-type]
        assert not shown.is_leader and shown.leader == ""

    asyncio.run(run())


def test_a_rebuilt_twin_adopts_what_agents_run_and_refences_the_rest(tmp_path: Path) -> None:
    """Restart after a submit: the twin comes back with every pod pending; pods agents say they run at the twin's epoch
    are bound where they run (the same epoch: no second copy, nothing stopped); once every expected agent answered,
    the pods nobody runs get a new epoch, so a claim or copy at the old one loses at the fence."""
    from controlplane.adopting import ADOPT_S

    clock = Clock()
    first = plane(tmp_path / "cp.db", clock)
    for seq, node in enumerate(NODES, 1):
        first.report(report(node, seq))
    first.tick(clock.now)
    first.submit(Workload("web", 6, Template(100, 64), Policy()), dry_run=False)
    twin = first.backends.twins()["c0"]
    for i, node in enumerate(("c0-n0", "c0-n0", "c0-n1", "c0-n1")):
        assert twin.bind_pod(f"web-{i}", node, 1).ok
    first.close()
    clock.now += 5.0
    second = plane(tmp_path / "cp.db", clock)
    rebuilt = second.backends.twins()["c0"]
    assert {(s.name, s.epoch, s.node) for s in rebuilt.list_pods()} == {(f"web-{i}", 1, "") for i in range(6)}
    assert second.adopting.wanted("c0", "c0-n0")
    assert second.adopt("c0", "c0-n0", [("web-0", 1), ("web-1", 1), ("web-4", 0)]) == ["web-0", "web-1"]  # web-4: an older epoch
    assert not second.adopting.wanted("c0", "c0-n0")  # answered: its acks stop asking
    second.tick(clock.now)
    assert second.adopting.open, "still waiting for c0-n1 and c0-n2"
    assert second.adopt("c0", "c0-n1", [("web-2", 1), ("web-3", 1), ("web-0", 1)]) == ["web-2", "web-3"]  # web-0 is n0's
    second.adopt("c0", "c0-n2", [])
    second.tick(clock.now)
    assert not second.adopting.open
    pods = {s.name: (s.epoch, s.node) for s in rebuilt.list_pods()}
    assert pods == {"web-0": (1, "c0-n0"), "web-1": (1, "c0-n0"), "web-2": (1, "c0-n1"), "web-3": (1, "c0-n1"),
                    "web-4": (2, ""), "web-5": (2, "")}
    assert rebuilt.safety.duplicate_binds == rebuilt.safety.stale_binds == 0
    assert any(d.kind == "adoption-closed" for d in second.registry.decisions(10))
    # a window nobody answers closes on time
    second.close()
    third = plane(tmp_path / "cp.db", clock)
    assert third.adopting.open
    clock.now += ADOPT_S
    third.tick(clock.now)
    assert not third.adopting.open and all(s.epoch == 2 for s in third.backends.twins()["c0"].list_pods())
