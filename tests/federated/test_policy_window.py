"""The held-out DLRM window's honest figures: never-placed pods wait until they leave or the window ends."""

from __future__ import annotations

import pytest

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.traces.dlrm import Instance
from federated import evaluating


def test_never_placed_pods_count_as_waiting_and_infeasible_ones_apart() -> None:
    nodes = [Node("a", 4000, 8192), Node("b", 4000, 8192)]
    big = Pod("big", 3000, 1024)
    instances = [
        Instance(Pod("old1", 3000, 1024), 0.0, None),  # alive at the cut: pre-placed, never counted
        Instance(Pod("old2", 3000, 1024), 0.0, 900.0),
        Instance(big, 850.0, None),  # waits for old2 to leave at 900
        Instance(Pod("late", 3000, 1024), 860.0, 950.0),  # never placed: leaves at 950
        Instance(Pod("huge", 64000, 1024), 870.0, None),  # fits no empty node
        Instance(Pod("tail", 100, 64), 1000.0, None),  # placed at once; the window ends at 1000
    ]
    held = evaluating.Window.of(nodes, instances)
    assert held.preplaced == 2 and held.end == pytest.approx(200.0)
    result = evaluating.dlrm_holdout(nodes, instances, "bestfit", held=held)
    assert result.infeasible == 1 and result.arrivals == 4
    assert result.never_placed == 1
    assert result.preplaced_never_placed == 0  # both running pods fit at the start
    # Waits of the three feasible arrivals: big 50 s, late 90 s (until it left), tail 0 s.
    assert result.wait_s_mean == pytest.approx((50.0 + 90.0 + 0.0) / 3)
    assert result.wait_s_p99 <= 90.0


def test_running_pods_left_unplaced_at_the_start_are_reported_apart() -> None:
    nodes = [Node("a", 4000, 8192)]
    instances = [
        Instance(Pod("old1", 3000, 1024), 0.0, None),
        Instance(Pod("old2", 3000, 1024), 0.0, None),  # alive at the cut but no room: never placed, not a window arrival
        Instance(Pod("new", 500, 64), 1000.0, None),
    ]
    held = evaluating.Window.of(nodes, instances, start=500.0)
    assert held.preplaced == 2
    result = evaluating.dlrm_holdout(nodes, instances, "bestfit", held=held)
    assert result.preplaced_never_placed == 1
    assert result.never_placed == 0 and result.arrivals == 1


def test_bench_window_section_holds_profiles_as_objects_and_the_fluid_bound_flat() -> None:
    """Readers pick the best heuristic among the section's objects: the fluid bound must not read as one."""
    from fedplane.lab.benches import policybench
    from federated.runtime.scorer import default_model_dir

    nodes = [Node(f"n{i}", 8000, 32768) for i in range(3)]
    instances = [Instance(Pod(f"p{i}", 3000 + 500 * (i % 3), 4096), float(10 * i), float(10 * i + 75)) for i in range(40)]
    traces = evaluating.Traces(nodes, [], instances, nodes, [])
    out = policybench.dlrm_window(default_model_dir(), traces, lambda label: None)
    profiles = {k: v for k, v in out.items() if isinstance(v, dict)}
    variants = {f"{h}+{q}" for h in policybench.HEURISTICS for q in policybench.VARIANT_QUEUES}
    assert set(profiles) == {*policybench.HEURISTICS, *variants, "learned"}
    assert all("never_placed" in v and "wait_s_mean" in v for v in profiles.values())
    heuristics = [k for k in profiles if k != "learned"]
    assert out["best_heuristic"] == min(heuristics, key=lambda k: (profiles[k]["never_placed"], profiles[k]["wait_s_mean"]))
    assert out["fluid_bound_never_placed"] == 0
    assert 0 <= out["preplaced_left_out_at_start"] <= out["preplaced"] and "first-fit" in out["start"]


def test_every_profile_starts_from_one_placement_of_the_running_pods() -> None:
    """The start state is the trace's, not the profile's: a profile cannot gain room by leaving running pods out."""
    nodes = [Node("small", 4000, 8192), Node("big", 8000, 16384)]
    running = [Instance(Pod("r1", 1000, 1024), 0.0, None), Instance(Pod("r2", 6000, 1024), 0.0, None), Instance(Pod("r3", 3000, 1024), 0.0, None)]
    instances = [*running, Instance(Pod("new", 2000, 1024), 600.0, None)]
    held = evaluating.Window.of(nodes, instances, start=500.0)
    states = []
    for profile in ("bestfit", "kube-default", "random"):
        replay = evaluating.WindowReplay(nodes, held.instances, profile, 0, running=held.preplaced)
        states.append(replay.table.cpu_used.tolist())
        assert sorted(replay.placed) == [0, 1, 2] and all(replay.wait_of[r] == 0.0 for r in range(3))
    # Largest CPU first onto the first node that takes it: r2 (6 cores) -> big, r3 (3) -> small, r1 (1) -> small.
    assert states == [[4000, 6000]] * 3
