"""The stateful hand-off: fence, checkpoint and restore around make-before-break, resumed exactly once after a crash
at every step, never two writers, nothing acknowledged lost; rollback unfences; a plane without volumes says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.journal import MigrationState
from controlplane.migrations import CrashHook, RetryPolicy, SimulatedCrash, no_crash
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Policy, Template, Workload
from fedcore.backends.volumes import DirectoryVolumes, Fenced, writing

RETRY = RetryPolicy(base_s=0.1, max_s=1.0, max_attempts=5, ready_timeout_s=5.0)
HANDOFF_STEPS = ("fence-source", "checkpoint", "restore-target")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class World:
    def __init__(self, tmp: Path, with_volumes: bool = True) -> None:
        self.clock, self.db = Clock(), tmp / "cp.db"
        self.backends = Backends(self.clock, twin_ready_delay_s=1.0)
        self.volumes = DirectoryVolumes({"a": tmp / "a", "b": tmp / "b"}, tmp / "snapshots") if with_volumes else None
        plane = self.plane()
        plane.register_cluster(ClusterSpec("a", "r0"))
        plane.register_cluster(ClusterSpec("b", "r1"))
        plane.tick(0.0)
        assert plane.submit(Workload("kv", 1, Template(500, 512), Policy(clusters=("a",)), stateful=True), dry_run=False).ok
        self.acked = [self.write(f"k{i}", 1, "a") for i in range(50)]
        (tmp / "a" / "kv" / "data" / "status.json").write_text(json.dumps({"last_seq": 49}))
        plane.close()

    def plane(self, crash: CrashHook = no_crash) -> ControlPlane:
        return ControlPlane(self.db, self.backends, self.clock, retry=RETRY, crash=crash, volumes=self.volumes)

    def write(self, key: str, epoch: int, cluster: str) -> str:
        """One acknowledged write of the workload's replica at ``epoch`` on ``cluster`` (the key-value service's rule)."""
        assert self.volumes is not None
        with writing(self.volumes.volume(cluster, "kv"), epoch) as data:
            data.mkdir(parents=True, exist_ok=True)
            with open(data / "log", "a") as f:
                f.write(key + "\n")
        return key

    def run(self, plane: ControlPlane, mid: str) -> None:
        while self.clock.t < 30:
            self.clock.t = round(self.clock.t + 0.2, 3)
            plane.tick(self.clock.t)
            m = plane.journal.get(mid)
            if m is not None and m.state.terminal:
                return
        raise AssertionError("did not finish in time")


@pytest.mark.parametrize("step", HANDOFF_STEPS + ("create-target",))
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_every_hand_off_step_resumes_exactly_once(tmp_path: Path, step: str, when: str) -> None:
    world = World(tmp_path)
    fired: list[str] = []

    def crash(s: str, w: str) -> None:
        if (s, w) == (step, when) and not fired:
            fired.append(s)
            raise SimulatedCrash(f"{s}/{w}")

    first = world.plane(crash)
    m = first.start_migration("kv", "a", "b", world.clock.t, force=True)
    with pytest.raises(SimulatedCrash):
        world.run(first, m.id)
    first.close()
    second = world.plane()
    world.run(second, m.id)
    done = second.journal.get(m.id)
    assert done is not None and done.state is MigrationState.DONE, done
    dones = [e.step for e in second.journal.entries(m.id) if e.phase == "done"]
    assert [s for s in dones if s in HANDOFF_STEPS] == list(HANDOFF_STEPS), "every hand-off step journaled done exactly once"
    ref = json.loads(done.checkpoint)
    assert ref["fields"] == {"last_seq": 49} and ref["bytes"] > 0
    with pytest.raises(Fenced):
        world.write("late", 1, "b")  # the old epoch cannot write at the target either
    world.write("after", m.epoch, "b")
    log = (tmp_path / "b" / "kv" / "data" / "log").read_text().split()
    assert log == world.acked + ["after"], "every acknowledged write carried over, in order"
    assert not (tmp_path / "a" / "kv").exists() and not (tmp_path / "snapshots" / m.id).exists()
    second.close()


def test_the_fence_refuses_the_source_writer_from_the_first_step(tmp_path: Path) -> None:
    world = World(tmp_path)
    seen: list[str] = []

    def after_fence(s: str, w: str) -> None:
        if (s, w) == ("checkpoint", "before"):
            with pytest.raises(Fenced):
                world.write("during", 1, "a")
            seen.append(s)

    plane = world.plane(after_fence)
    m = plane.start_migration("kv", "a", "b", world.clock.t, force=True)
    world.run(plane, m.id)
    assert seen == ["checkpoint"]
    assert "during" not in (tmp_path / "b" / "kv" / "data" / "log").read_text().split()
    plane.close()


def test_cancel_before_the_restore_unfences_the_source(tmp_path: Path) -> None:
    world = World(tmp_path)

    def stop(s: str, w: str) -> None:
        if (s, w) == ("restore-target", "before"):
            raise SimulatedCrash("stop here")

    plane = world.plane(stop)
    m = plane.start_migration("kv", "a", "b", world.clock.t, force=True)
    with pytest.raises(SimulatedCrash):
        world.run(plane, m.id)
    plane.close()
    plane = world.plane()
    cancelled = plane.cancel_migration(m.id, world.clock.t)
    assert cancelled.state is MigrationState.CANCELLED and "unfenced" in cancelled.error
    world.write("again", 1, "a")  # the source's writers resume
    plane.close()


def test_a_stateful_workload_without_a_volume_host_fails_clearly(tmp_path: Path) -> None:
    world = World.__new__(World)
    world.clock, world.db = Clock(), tmp_path / "cp.db"
    world.backends, world.volumes = Backends(world.clock, twin_ready_delay_s=1.0), None
    plane = world.plane()
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.register_cluster(ClusterSpec("b", "r1"))
    plane.tick(0.0)
    plane.submit(Workload("kv", 1, Template(500, 512), Policy(clusters=("a",)), stateful=True), dry_run=False)
    m = plane.start_migration("kv", "a", "b", 0.0, force=True)
    world.run(plane, m.id)
    failed = plane.journal.get(m.id)
    assert failed is not None and failed.state is MigrationState.FAILED and "no volume host" in failed.error
    plane.close()
