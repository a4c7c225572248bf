"""The workload context on the wire: what an agent accepts from its control plane, and what an older one means."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedapi import controlplane_pb2 as cp
from fedapi.linkserver import to_wire
from fedapi.workloadcontext import MAX_CPU_PRESSURE, MAX_SHAPES, NONE, Profile, WorkloadContext, from_wire, quantize
from fedcore.scheduling.fragmentation import PodTypes


def test_a_context_round_trips_and_an_absent_one_means_none() -> None:
    sent = WorkloadContext(1.0, 1234)
    assert from_wire(sent.to_wire()) == sent
    assert from_wire(None) is NONE and not NONE.known
    assert from_wire({"cpu_pressure": 1, "version": 7}) == WorkloadContext(1.0, 7), "msgpack may carry a whole float as an int"
    assert from_wire({"cpu_pressure": 0.5, "version": 7, "pinned": 0.1}) == WorkloadContext(0.5, 7), "a newer plane's fields"
    ack = to_wire(cp.AgentAck(accepted=True))  # a control plane that computed none sends the field's defaults
    assert from_wire(ack["context"]) == NONE


@pytest.mark.parametrize("value", [
    {"cpu_pressure": math.nan, "version": 1}, {"cpu_pressure": -0.5, "version": 1}, {"cpu_pressure": math.inf, "version": 1},
    {"cpu_pressure": 1e300, "version": 1}, {"cpu_pressure": MAX_CPU_PRESSURE * 2, "version": 1},
    {"cpu_pressure": "1.0", "version": 1}, {"cpu_pressure": True, "version": 1}, {"cpu_pressure": 1.0, "version": -1},
    {"cpu_pressure": 1.0, "version": 1.5}, {"cpu_pressure": 1.0, "version": 2**64},
    [1.0, 2], "1.0", 3,
])
def test_hostile_contexts_are_refused_with_a_reason(value: object) -> None:
    with pytest.raises(ValueError, match=r"cpu_pressure|version|map"):
        from_wire(value)


def test_quantize_rounds_to_hundredths_within_bounds() -> None:
    assert quantize(0.996) == 1.0 and quantize(0.9549) == 0.95 and quantize(0.25) == 0.25
    assert quantize(-1.0) == 0.0 and quantize(math.nan) == 0.0
    assert quantize(1e9) == quantize(math.inf) == MAX_CPU_PRESSURE


def types(shapes: list[tuple[int, int, int, int]], slots: tuple[list[int], ...] = (), pinned: float = 0.0) -> PodTypes:
    """PodTypes of (cpu, milli, count, pods) shapes, as ``PodTypes.from_pods`` builds them (by decreasing frequency)."""
    n = np.array([s[3] for s in shapes], dtype=np.float64)
    arr = np.array([s[:3] for s in shapes], dtype=np.int64)
    return PodTypes(arr[:, 0], arr[:, 1], arr[:, 2], n / n.sum(), np.array(slots, dtype=np.int64).reshape(-1, 2), pinned, 0.7)


def test_the_quantized_profile_rounds_weights_drops_rare_shapes_and_renormalises() -> None:
    """The rule all agents of a cluster share: weights to hundredths (a shape under half a percent goes), renormalised
    to sum 1; the heaviest MAX_SHAPES; slots as they are; pinned to thousandths; no GPU shape, no profile."""
    got = Profile.quantized(types([(8000, 1000, 2, 6664), (2000, 300, 1, 3300), (4000, 0, 0, 33), (1000, 500, 1, 3)],
                                  [[16000, 32768]], 0.01234))
    assert got is not None and got.slots == ((16000, 32768),) and got.pinned == 0.012
    assert [s[:3] for s in got.shapes] == [(8000, 1000, 2), (2000, 300, 1)], "0.33% and 0.03% round to 0: dropped"
    assert [s[3] for s in got.shapes] == [0.67 / 1.0, 0.33 / 1.0] and math.fsum(s[3] for s in got.shapes) == 1.0
    odd = Profile.quantized(types([(8000, 1000, 1, 1), (2000, 1000, 1, 1), (1000, 1000, 1, 1)]))
    assert odd is not None and [s[3] for s in odd.shapes] == [0.33 / 0.99] * 3, "0.33 x 3 renormalised"
    assert Profile.quantized(types([(4000, 0, 0, 9), (8000, 1000, 1, 1)])) is not None
    assert Profile.quantized(types([(4000, 0, 0, 999), (8000, 1000, 1, 1)])) is None, "0.1% of GPU pods: no GPU shape kept"
    many = Profile.quantized(types([(1000 + i, 1000, 1, 1) for i in range(100)]))
    assert many is not None and len(many.shapes) == MAX_SHAPES, "bounded: the heaviest shapes"


def test_a_context_with_a_profile_round_trips_through_the_proto_and_the_twin_link() -> None:
    from controlplane.convert import workload_context

    profile = Profile(((8000, 1000, 2, 0.75), (2000, 300, 1, 0.25)), ((16000, 32768),), 0.012)
    sent = WorkloadContext(0.97, 77, profile)
    assert from_wire(sent.to_wire()) == sent
    assert from_wire(to_wire(cp.AgentAck(context=workload_context(sent)))["context"]) == sent, "the twin link's map of the proto"
    assert "profile" not in sent.to_wire(profile=False), "an agent's report: the version names its profile"
    base = PodTypes(np.array([1]), np.array([1000]), np.array([1]), np.array([1.0]))
    got = sent.types(base)
    assert got.cpu.tolist() == [8000, 2000] and got.milli.tolist() == [1000, 300] and got.count.tolist() == [2, 1]
    assert got.weight.tolist() == [0.75, 0.25] and got.slots.tolist() == [[16000, 32768]] and got.pinned == 0.012
    assert got.cpu_pressure == 0.97
    assert WorkloadContext(0.5, 3).types(base).cpu.tolist() == [1] and WorkloadContext(0.5, 3).types(base).cpu_pressure == 0.5


GOOD = {"cpu": [8000, 2000], "milli": [1000, 300], "count": [2, 1], "weight": [0.75, 0.25], "slots": [16000, 32768], "pinned": 0.0}


@pytest.mark.parametrize(("change", "reason"), [
    ({"cpu": [8000]}, "one length"), ({"weight": [0.75, math.nan]}, "weight"), ({"weight": [0.75, -0.25]}, "weight"),
    ({"weight": [0.75, 0.5]}, "sum to 1"), ({"weight": [1.0, 0.0]}, "weight 0"), ({"cpu": [-8000, 2000]}, "cpu"),
    ({"cpu": [10**30, 2000]}, "cpu"), ({"cpu": [8000.0, 2000]}, "cpu"), ({"count": [True, 1]}, "count"),
    ({"milli": [1001, 300]}, "milli"), ({"milli": [0, 300]}, "both 0"), ({"count": [2, 100]}, "count"),
    ({"cpu": [8000, 8000], "milli": [1000, 1000], "count": [2, 2]}, "twice"),
    ({"milli": [0, 0], "count": [0, 0]}, "GPU shape"), ({"slots": [16000]}, "pairs"), ({"slots": [16000, -1]}, "slot memory"),
    ({"slots": [1, 1] * 9}, "slot shapes"), ({"pinned": 1.5}, "pinned"), ({"pinned": math.nan}, "pinned"),
    ({"cpu": list(range(10**6))}, "at most"), ({"weight": "0.75"}, "list"),
    ({"cpu": [1000 + i for i in range(65)], "milli": [1000] * 65, "count": [1] * 65, "weight": [1 / 65] * 65}, "1 to 64"),
])
def test_hostile_profiles_are_refused_with_a_reason(change: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        from_wire({"cpu_pressure": 0.9, "version": 3, "profile": {**GOOD, **change}})
    with pytest.raises(ValueError, match="profile map"):
        from_wire({"cpu_pressure": 0.9, "version": 3, "profile": [GOOD]})
    assert from_wire({"cpu_pressure": 0.9, "version": 3, "profile": GOOD}).profile is not None


def test_an_empty_profile_is_none_as_an_older_plane_or_no_gpu_workload_sends_it() -> None:
    empty = to_wire(cp.WorkloadContext(cpu_pressure=0.5, version=4))["profile"]  # the proto's defaults on the twin link
    assert from_wire({"cpu_pressure": 0.5, "version": 4, "profile": empty}) == WorkloadContext(0.5, 4)


def test_the_sender_leaves_out_shapes_beyond_the_bounds_rather_than_stop() -> None:
    """A workload asking for more than the bounds (a 2,000-core pod) is left out of the profile, not sent to be refused."""
    got = Profile.quantized(types([(8000, 1000, 1, 5), (2_000_000, 1000, 1, 5)], [[2_000_000, 1], [4000, 8192]]))
    assert got is not None and got.shapes == ((8000, 1000, 1, 1.0),) and got.slots == ((4000, 8192),)


def test_the_scorer_family_and_the_fleets_largest_node_round_trip_and_an_older_planes_context_is_learned() -> None:
    profile = Profile(((8000, 1000, 1, 1.0),))
    sent = WorkloadContext(0.5, 9, profile, "fgd", 96000, 8)
    assert from_wire(sent.to_wire()) == sent and sent.max_spec == (96000.0, 8000.0)
    ack = to_wire(cp.AgentAck(context=cp.WorkloadContext(cpu_pressure=0.5, version=9)))  # a plane without the fields
    assert ack["context"]["scorer"] == "" and from_wire(ack["context"]) == WorkloadContext(0.5, 9), "empty: learned"
    assert WorkloadContext(0.5, 9).max_spec is None, "not sent: BestFit reads the agent's own node"
    assert sent.to_wire(profile=False) == {"cpu_pressure": 0.5, "version": 9, "scorer": "fgd"}, "a report names the family"
    assert "scorer" not in WorkloadContext(0.5, 9).to_wire(profile=False), "learned is left out: an older plane refuses the field"


@pytest.mark.parametrize(("value", "reason"), [
    ({"cpu_pressure": 0.5, "version": 9, "scorer": "kube-default"}, "scorer must be one of learned, fgd, bestfit"),
    ({"cpu_pressure": 0.5, "version": 9, "scorer": 3}, "scorer must be one of"),
    ({"cpu_pressure": 0.5, "version": 9, "scorer": "fgd"}, "scorer fgd needs the cluster's workload profile"),
    ({"cpu_pressure": 0.5, "version": 9, "max_cpu_milli": -1}, "max_cpu_milli must be an integer"),
    ({"cpu_pressure": 0.5, "version": 9, "max_cpu_milli": 96000, "max_gpus": 10**6}, "max_gpus must be an integer"),
])
def test_an_unknown_scorer_family_or_a_bad_fleet_size_is_refused_with_a_reason(value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        from_wire(value)
