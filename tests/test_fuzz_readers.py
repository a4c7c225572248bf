"""Every reader of outside input, fed random and hostile bytes, raises only its documented error type.

Readers: trace files (openb nodes and pods, DLRM), the agent's YAML configuration, gossip and
claims wire frames, twin-link frames and messages, and policy artifacts. Anything else escaping
(IndexError, AttributeError, OverflowError...) is a traceback a user would see.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crdt import wire as crdt_wire
from crdt.errors import InvalidDelta
from edgeagent import config as agent_config
from edgeagent import linkcodec
from edgeagent.clusters import ClusterUnavailable
from fedapi import workloadcontext
from fedapi import agentlink
from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.traces import TraceError, dlrm, openb
from federated.runtime import artifacts
from federated.runtime.features import FeatureBuilder
from gossip import wire as gossip_wire

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CSV_CELLS = st.one_of(st.sampled_from(["", "0", "-1", "1e308", "inf", "nan", "1e999", "9" * 40, "x", "\x00", "\"", ",", "\n"]),
                      st.text(max_size=8))


def _csv(header: list[str], rows: list[list[str]]) -> bytes:
    return ("\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n").encode("utf-8", "surrogatepass")


def _file(data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=".csv")
    handle.write(data)
    handle.close()
    return Path(handle.name)


@FUZZ
@given(st.lists(st.lists(CSV_CELLS, min_size=5, max_size=6), max_size=4), st.binary(max_size=40))
@example([["n0", "inf", "1", "0", "G2"]], b"")
@example([["n0", "1e400", "1", "0", "G2"]], b"\xff\xfe")
def test_openb_node_lists(rows: list[list[str]], tail: bytes) -> None:
    path = _file(_csv(sorted(openb.NODE_COLUMNS), rows) + tail)
    try:
        openb.load_nodes(path)
    except TraceError:
        pass
    finally:
        path.unlink()


@FUZZ
@given(st.lists(st.lists(CSV_CELLS, min_size=7, max_size=8), max_size=4), st.binary(max_size=40))
@example([["p", "1e300", "1", "0", "0", "BE", "0"]], b"")
def test_openb_pod_lists(rows: list[list[str]], tail: bytes) -> None:
    path = _file(_csv(sorted(openb.POD_COLUMNS), rows) + tail)
    try:
        openb.load_pods(path)
    except TraceError:
        pass
    finally:
        path.unlink()


@FUZZ
@given(st.lists(st.lists(CSV_CELLS, min_size=10, max_size=10), max_size=4))
def test_dlrm_traces(rows: list[list[str]]) -> None:
    path = _file(_csv(sorted(dlrm.COLUMNS), rows))
    try:
        dlrm.load(path)
    except TraceError:
        pass
    finally:
        path.unlink()


@FUZZ
@given(st.binary(max_size=300))
def test_trace_bytes(data: bytes) -> None:
    path = _file(data)
    try:
        openb.load_pods(path)
    except TraceError:
        pass
    finally:
        path.unlink()


YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=8,
)
KEYS = st.sampled_from(["node", "cluster", "data_dir", "gossip", "backend", "placement", "probe", "http", "bind",
                        "seeds", "probe_interval", "kind", "address", "candidates", "models", "x"])


@FUZZ
@given(st.dictionaries(KEYS, st.one_of(YAML_VALUES, st.dictionaries(KEYS, YAML_VALUES, max_size=4)), max_size=5))
def test_agent_configs(raw: dict[str, object]) -> None:
    try:
        agent_config.parse(raw)
    except agent_config.ConfigError:
        pass


@FUZZ
@given(st.binary(max_size=400))
@example(b"gossip: [1, 2]\n")
@example(b"\xff\xfe\x00")
def test_agent_config_files(data: bytes) -> None:
    path = _file(data)
    try:
        agent_config.load(path)
    except agent_config.ConfigError:
        pass
    finally:
        path.unlink()


@FUZZ
@given(st.binary(max_size=300))
def test_gossip_frames(data: bytes) -> None:
    try:
        gossip_wire.unpack_envelope(data)
    except gossip_wire.WireError:
        pass
    try:
        gossip_wire.decode(data)
    except gossip_wire.WireError:
        pass


@FUZZ
@given(st.binary(max_size=300))
def test_claims_records(data: bytes) -> None:
    try:
        crdt_wire.decode_delta(data)
    except InvalidDelta:
        pass
    try:
        crdt_wire.decode_version(data)
    except InvalidDelta:
        pass


@FUZZ
@given(st.binary(min_size=agentlink.HEADER_BYTES, max_size=agentlink.HEADER_BYTES), st.binary(max_size=200))
def test_twin_link_frames_and_messages(header: bytes, body: bytes) -> None:
    try:
        agentlink.unpack_header(header)
    except agentlink.ProtocolError:
        pass
    try:
        message = agentlink.decode(body)
    except ValueError:
        return
    for read in (linkcodec.update_from_wire, linkcodec.node_from_wire, linkcodec.result_from_wire):
        try:
            read(message)
        except ClusterUnavailable:
            pass


WIRE_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4), st.binary(max_size=4),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


PROFILE_NUMBERS = st.one_of(st.integers(-2, 2**41), st.floats(), st.booleans(), st.sampled_from([0, 300, 1000, 1.0, 0.5]))
PROFILES = st.one_of(WIRE_VALUES, st.dictionaries(
    st.sampled_from(["cpu", "milli", "count", "weight", "slots", "pinned"]),
    st.one_of(st.lists(PROFILE_NUMBERS, max_size=4), PROFILE_NUMBERS, WIRE_VALUES), max_size=6))


@FUZZ
@given(st.one_of(WIRE_VALUES, st.dictionaries(st.sampled_from(["cpu_pressure", "version", "profile", "x"]),
                                              st.one_of(WIRE_VALUES, PROFILES), max_size=4)))
@example({"cpu_pressure": 10**400, "version": 1})
@example({"cpu_pressure": 1.0, "version": 2**70})
@example({"cpu_pressure": 1.0, "version": 1, "profile": {"cpu": [8000], "milli": [1000], "count": [1], "weight": [1.0]}})
def test_workload_contexts_from_the_control_plane(value: object) -> None:
    """What an agent reads from an ack's ``context``: a context within bounds whose profile, if any, builds the
    ``PodTypes`` and fragment tables an agent scores with, or ValueError."""
    try:
        context = workloadcontext.from_wire(value)
    except ValueError:
        return
    assert 0.0 <= context.cpu_pressure <= workloadcontext.MAX_CPU_PRESSURE and 0 <= context.version < 2**63
    if context.profile is not None:
        FeatureBuilder(context.profile.types(context.cpu_pressure))


GPU_SHAPES = st.tuples(st.integers(0, 10**6), st.sampled_from([100, 300, 500, 1000]), st.integers(1, 8))
CPU_SHAPES = st.tuples(st.integers(0, 10**6), st.just(0), st.just(0))


@FUZZ
@given(st.lists(st.one_of(GPU_SHAPES, CPU_SHAPES), min_size=1, max_size=8, unique=True),
       st.lists(st.integers(1, 1000), min_size=8, max_size=8), st.lists(st.integers(0, 10**6), max_size=6), st.floats(0, 1))
def test_every_profile_an_agent_accepts_builds_its_features(shapes: list[tuple[int, int, int]], counts: list[int],
                                                            slots: list[int], pinned: float) -> None:
    """Any profile within the bounds (odd shapes, zero CPU, CPU-only shapes beside GPU ones) builds the features an
    agent scores its node with: no crash on the decision path after an accepted context."""
    total = sum(counts[: len(shapes)])
    wire = {"cpu": [s[0] for s in shapes], "milli": [s[1] for s in shapes], "count": [s[2] for s in shapes],
            "weight": [n / total for n in counts[: len(shapes)]], "slots": slots[: len(slots) // 2 * 2], "pinned": pinned}
    try:
        context = workloadcontext.from_wire({"cpu_pressure": 0.9, "version": 1, "profile": wire})
    except ValueError:
        assert not any(s[2] for s in shapes), "only a profile without GPU shape is refused"
        return
    assert context.profile is not None
    builder = FeatureBuilder(context.profile.types(context.cpu_pressure))
    table = NodeTable([Node("n", 64000, 262144, gpus=8)])
    for pod in (Pod("g", 4000, 8192, gpu=GpuRequest(1, 500)), Pod("w", 8000, 16384, gpu=GpuRequest(2, 1000)), Pod("c", 2000, 4096)):
        assert np.isfinite(builder(pod, table, np.array([0]))).all()


@FUZZ
@given(st.one_of(YAML_VALUES, st.dictionaries(st.sampled_from(["format", "feature_spec", "files", "pod_types",
                                                                "node_features", "pod_features"]), YAML_VALUES, max_size=6)))
@example({"format": 1, "files": []})
def test_policy_artifacts(manifest: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / artifacts.MANIFEST).write_text(json.dumps(manifest))
        try:
            artifacts.load(tmp)
        except artifacts.ArtifactError:
            pass
