"""The workload context on the wire: what an agent accepts from its control plane, and what an older one means."""

from __future__ import annotations

import math

import pytest

from fedapi import controlplane_pb2 as cp
from fedapi.linkserver import to_wire
from fedapi.workloadcontext import MAX_CPU_PRESSURE, NONE, WorkloadContext, from_wire, quantize


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
