"""The loop across hosts (#38): trainers pull their region's experience from the plane's feed, authenticated; what the
netns bench reports of a killed trainer host and of promotions; the rounds service's commands. The netns bench itself
runs behind FEDPLANE_NETNS_DRILLS=1 (root, minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from controlplane.auth import Authenticator
from controlplane.experiencefeed import ExperienceFeed
from controlplane.experienceinbox import ExperienceInbox
from controlplane.sqlitestore import SqliteStore
from fedapi import credentials
from federated.flower import feed, roundservice
from federated.flower.roundcommands import rounds
from federated.runtime.experience import Row
from federated.runtime.features import NODE_FEATURES, POD_FEATURES
from fedplane.lab.loop import hostsbench

ROOT = Path(__file__).resolve().parents[2]


def _row(pod: str) -> Row:
    return Row(t=1.0, pod=pod, model="m", score=50.0, pod_x=np.zeros(len(POD_FEATURES), np.float32),
               node_x=np.ones(len(NODE_FEATURES), np.float32), outcome="bound", wait_s=0.1, gpu_alloc_after=0.5,
               frag_before=2000.0, frag_after=1000.0)


def _ship(inbox: ExperienceInbox, cluster: str, node: str, pods: list[str]) -> None:
    frames = [[_row(p).encode()] for p in pods]
    inbox.take(cluster, node, 0, len(frames), zlib.compress(msgpack.packb(frames)))


@pytest.fixture
def plane(tmp_path: Path):  # type: ignore[no-untyped-def]
    inbox = ExperienceInbox(tmp_path / "experience", 1 << 20)
    auth = Authenticator(SqliteStore(tmp_path / "credentials.db"))
    _ship(inbox, "region-0", "a", [f"a{i}" for i in range(5)])
    _ship(inbox, "region-0", "b", ["b0", "b1"])
    _ship(inbox, "region-1", "c", ["c0"])
    served = ExperienceFeed(inbox, auth)
    served.start()
    yield served, auth, f"http://127.0.0.1:{served.port}"
    served.stop()
    inbox.close()
    auth.store.close()


def test_a_trainer_pulls_the_newest_rows_of_its_own_region_only(plane) -> None:  # type: ignore[no-untyped-def]
    served, auth, url = plane
    trainer = auth.issue("agent", "region-0")
    rows = feed.pull(url, "region-0", trainer, window=3)
    assert sorted(r.pod for r in rows) == ["a2", "a3", "a4", "b0", "b1"], "the newest 3 rows of each agent of the region"
    assert served.served_bytes > 0
    with pytest.raises(feed.FeedError, match="403"):
        feed.pull(url, "region-1", trainer, window=3)
    assert [r.pod for r in feed.pull(url, "region-1", auth.issue("operator"), window=3)] == ["c0"]


@pytest.mark.parametrize(("token", "status"), [("", "401"), ("no-such-token", "401"), ("board", "403"), ("viewer", "403")])
def test_who_may_not_read_is_refused_before_a_row_is_read(plane, token: str, status: str) -> None:  # type: ignore[no-untyped-def]
    _, auth, url = plane
    if token == "board":  # an agent credential bound to a node: a board must not read its peers' rows
        token = auth.issue("agent", "region-0", "a")
    elif token == "viewer":
        token = auth.issue("viewer")
    with pytest.raises(feed.FeedError, match=status):
        feed.pull(url, "region-0", token, window=3)


def test_bad_requests_get_a_clear_answer(plane, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, auth, url = plane
    with pytest.raises(feed.FeedError, match="400 window must be"):
        feed.pull(url, "region-0", auth.issue("operator"), window=0)
    with pytest.raises(feed.FeedError, match="token file .* is empty"):
        (tmp_path / "empty").write_text("\n")
        feed.read_token(tmp_path / "empty")
    with pytest.raises(feed.FeedError, match="127.0.0.1:1"):
        feed.pull("http://127.0.0.1:1", "region-0", "t", window=3, timeout_s=2)


def test_the_regional_trainer_reads_the_feed_when_its_node_config_names_one(plane, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("flwr")
    from federated.flower.loopclient import NoExperience, region_rows

    _, auth, url = plane
    token = tmp_path / "region-0.cred"  # as `fedplane controlplane credentials --role agent --cluster region-0` writes it
    credentials.write(token, credentials.Credential(auth.issue("agent", "region-0"), "agent", "region-0", "", url))
    rows, where = region_rows({"feed": url, "region": "region-0", "token-file": str(token)}, 2)
    assert sorted(r.pod for r in rows) == ["a3", "a4", "b0", "b1"] and url in where
    with pytest.raises(NoExperience, match="neither 'feed' nor 'agents'"):
        region_rows({}, 2)


def _line(rnd: int, wall: float, canary: str = "promoted", answered: int = 3, drill: bool = False) -> dict[str, object]:
    return {"round": rnd, "round_wall_s": wall, "canary": canary, "answered": answered, "asked": 3, **({"drill": True} if drill else {})}


def test_a_trainer_host_fault_is_judged_by_its_round_s_extra_wall_and_outcome() -> None:
    lines = [_line(1, 10.0), _line(2, 12.0), _line(3, 11.0), _line(4, 41.0, answered=2), _line(5, 30.0), _line(6, 11.0),
             _line(7, 35.0, answered=2), _line(8, 20.0)]
    kill, cut = hostsbench.HostFault("kill", 4, 0, at=100.0, reported_at=135.0), hostsbench.HostFault("cut", 7, 1, at=200.0, reported_at=230.0)
    got = hostsbench.fault_outcome(kill, lines, [kill, cut])
    assert got["round_outcome"] == "completed" and got["answered"] == 2 and got["fault_to_verdict_s"] == 35.0
    assert got["stall_s"] == 30.0, "the round's wall beyond the median of the rounds no fault touched (11 s)"
    assert hostsbench.fault_outcome(cut, lines, [kill, cut])["stall_s"] == 24.0
    skipped = hostsbench.fault_outcome(kill, [*lines[:3], _line(4, 35.0, canary="skipped", answered=0)], [kill])
    assert skipped["round_outcome"] == "skipped"
    never = hostsbench.fault_outcome(hostsbench.HostFault("kill", 4, 0), lines, [kill])
    assert never["round_outcome"] == "not reached" and never["stall_s"] == float("inf"), "a fault that never struck fails the goal"


def test_the_bench_kills_one_trainer_host_and_with_rounds_enough_cuts_another() -> None:
    from fedplane.lab.loop.learning import LoopSettings

    assert [(f.kind, f.round, f.region) for f in hostsbench.faults_for(LoopSettings(rounds=10))] == [("kill", 4, 0), ("cut", 7, 1)]
    assert [(f.kind, f.round) for f in hostsbench.faults_for(LoopSettings(rounds=4))] == [("kill", 4)]


def test_an_agent_cut_off_ships_its_experience_after_the_heal_and_the_inbox_holds_each_frame_once(tmp_path: Path) -> None:
    inbox = ExperienceInbox(tmp_path / "experience", 1 << 20)
    frames = [[_row(f"p{i}").encode()] for i in range(6)]

    def ship(first: int, last: int) -> int:
        return inbox.take("region-2", "r2-edge-2", first, last - first, zlib.compress(msgpack.packb(frames[first:last])))

    cut = hostsbench.AgentCut("r2-edge-2", "region-2")
    ship(0, 3)
    cut.frames["cut"], cut.at["cut"] = 3, 10.0
    cut.frames["healed"], cut.at["healed"] = 3, 70.0  # nothing got through while cut
    assert ship(1, 6) == 6, "after the heal the agent ships again from its last acknowledged frame: 1 and 2 were kept already"
    seqs = hostsbench.inbox_seqs(tmp_path / "experience" / "region-2" / "r2-edge-2")
    inbox.close()
    out = hostsbench.agent_cut_outcome(cut, seqs)
    assert seqs == [0, 1, 2, 3, 4, 5]
    assert (out["frames_before_cut"], out["frames_arrived_while_cut"], out["frames_arrived_after_heal"]) == (3, 0, 3)
    assert out["duplicate_seqs"] == 0 and out["missing_seqs"] == 0 and out["cut_s"] == 60.0
    assert hostsbench.agent_cut_outcome(hostsbench.AgentCut("x", "y"), [])["outcome"] == "not reached"


def test_a_promotion_to_a_worse_fleet_or_of_the_drill_counts_as_bad() -> None:
    measured = {"event": "measured", "metrics": [0.80, 0.85, 0.84, 0.70, 0.90], "drill_canary_metric": {}}
    lines = [_line(1, 1.0), _line(2, 1.0), _line(3, 1.0), _line(4, 1.0, drill=True), measured]
    assert hostsbench.bad_promotions(lines, 0.005) == [2, 3, 4], "0.84 < 0.85 - 0.5%, 0.70 far below, and a drill promoted"
    fine = [_line(1, 1.0), _line(2, 1.0, canary="rolled_back"), {**measured, "metrics": [0.80, 0.85, 0.85, 0.85, 0.85]}]
    assert hostsbench.bad_promotions(fine, 0.005) == []


def test_every_agent_and_trainer_gets_a_host_of_its_own() -> None:
    from fedplane.lab.loop.learning import LoopSettings

    names = hostsbench.hosts_for(LoopSettings())
    assert len(names) == len(set(names)) == 12
    assert sum(n.startswith("trainer-") for n in names) == 3


def test_the_rounds_service_commands_fail_clearly_without_a_service(tmp_path: Path) -> None:
    runner = CliRunner()
    for command in ("status", "stop"):
        done = runner.invoke(rounds, [command, "--dir", str(tmp_path)])
        assert done.exit_code != 0 and "no rounds service" in done.output
    fleet = tmp_path / "fleet.json"
    fleet.write_text("[]")
    done = runner.invoke(rounds, ["start", "--dir", str(tmp_path / "svc"), "--models", str(tmp_path), "--fleet", str(fleet),
                                  "--host", "10.0.0.1"])
    assert done.exit_code != 0 and "lists no agents" in done.output
    fleet.write_text("{not json")
    done = runner.invoke(rounds, ["start", "--dir", str(tmp_path / "svc"), "--models", str(tmp_path), "--fleet", str(fleet)])
    assert done.exit_code != 0 and "not a fleet file" in done.output


@pytest.mark.parametrize(("flags", "secure"), [([], True), (["--insecure"], False)])
def test_the_rounds_service_is_secure_unless_told_insecure_and_admits_the_fleet_s_regions(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], secure: bool) -> None:
    made: dict[str, object] = {}

    class Service:
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.update(trainers=args[7], secure=kwargs["secure"])

        def serve(self) -> None:
            pass

    monkeypatch.setattr(roundservice, "Service", Service)
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([{"name": f"n{k}", "region": f"c{k % 2}", "models": "m", "data": "d", "http": 9000 + k} for k in range(4)]))
    done = CliRunner().invoke(rounds, ["serve", "--dir", str(tmp_path), "--models", str(tmp_path), "--fleet", str(fleet), *flags])
    assert done.exit_code == 0, done.output
    assert made == {"trainers": ["c0", "c1"], "secure": secure}


def test_status_reads_the_state_and_the_last_rounds_and_never_trusts_a_recycled_pid(tmp_path: Path) -> None:
    (tmp_path / roundservice.STATE).write_text(json.dumps({"pid": os.getpid(), "phase": "running", "run": 2, "superlink": "127.0.0.1:9"}))
    (tmp_path / roundservice.REPORT).write_text(
        json.dumps({"event": "start"}) + "\n" + json.dumps({**_line(1, 3.0), "model_version": "v2", "candidate": "v2"}) + "\n{torn")
    assert not roundservice.alive(roundservice.read_state(tmp_path) or {}), "pytest's pid is not a rounds service"
    done = CliRunner().invoke(rounds, ["status", "--dir", str(tmp_path), "--json"])
    summary = json.loads(done.output)
    assert summary["alive"] is False and summary["run"] == 2
    assert [r["round"] for r in summary["recent_rounds"]] == [1] and summary["recent_rounds"][0]["canary"] == "promoted"


@pytest.mark.skipif(os.environ.get("FEDPLANE_NETNS_DRILLS") != "1", reason="the netns loop bench: set FEDPLANE_NETNS_DRILLS=1 (root, minutes)")
def test_the_loop_across_hosts_meets_its_goals(traces: Path, tmp_path: Path) -> None:
    from fedplane.lab.drills import netns

    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    done = subprocess.run([sys.executable, "-m", "fedplane", "bench", "loop", "--hosts", "netns", "--rounds", "5", "--json",
                           "--png", str(tmp_path / "curve.png")], capture_output=True, text=True, timeout=2400, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    j = json.loads(done.stdout)
    assert j["agent_hosts"] >= 9 and j["trainer_hosts"] >= 3 and j["transport"] == "network" and j["authenticated"] is True
    assert j["trainer_killed"]["round_outcome"] in ("completed", "skipped") and j["trainer_killed"]["stall_s"] <= 60
    assert j["bad_models_promoted"] == 0 and j["rollback_drill"]["rounds_to_rollback"] == 1
    assert j["experience_kib_per_agent_round"] <= 256 and j["model_rollout_s_p99"] <= 10


def test_a_trainer_runs_behind_its_hosts_wrapper_and_joins_the_superlink_where_it_listens(monkeypatch: pytest.MonkeyPatch,
                                                                                          tmp_path: Path) -> None:
    from federated.flower import engine, supervisor

    spawned: list[list[str]] = []

    class Started:
        pid = 4242

    def spawn(command: list[str], env: object, log: Path) -> Started:
        spawned.append(command)
        return Started()

    monkeypatch.setattr(supervisor, "spawn", spawn)
    eng = engine.Engine(tmp_path, 9092, "10.231.0.1")
    eng.add_supernode("supernode-0", {"partition-id": 0, "feed": "http://10.231.0.1:7443"}, ["ip", "netns", "exec", "trainer-0"])
    (command,) = spawned
    assert command[:4] == ["ip", "netns", "exec", "trainer-0"] and command[4].endswith("flower-supernode")
    assert command[command.index("--superlink") + 1] == "10.231.0.1:9092"
    assert json.loads((tmp_path / engine.STATE).read_text())["host"] == "10.231.0.1", "federated down finds it again"
    assert engine.attach(tmp_path).address == "10.231.0.1:9092"
