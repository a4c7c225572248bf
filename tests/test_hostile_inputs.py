"""Hostile and careless input, one case per class of issue #36, each asserting the exact outcome: the error it gets,
and that nothing changed.

Classes: trace readers (a byte-order mark, a node claiming a million GPUs, a pod list without GPU pods), the Kubernetes
object reader (never raises anything but its own error), the control plane's RPC bounds, re-registering a cluster,
autoscaling series (the server opens no path a client names; a bad series is refused on enable; one workload's failing
autoscaler stalls no other), and the lab's arguments (refused before anything starts).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fedcore import kubeobjects
from fedcore.pods import Pod
from fedcore.resources import GpuRequest
from fedcore.traces import TraceError, openb
from fedcore.twin import submission

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


# ---- trace readers -------------------------------------------------------------------------------


def test_a_byte_order_mark_opening_a_trace_is_read_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (NODE_HEADER + "n0,32000,65536,2,G2\n").encode())
    assert [(n.name, n.gpus) for n in openb.load_nodes(path)] == [("n0", 2)]


def test_a_node_with_a_million_gpus_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(NODE_HEADER + "n0,32000,65536,2,G2\nn1,32000,65536,1000000,G2\n")
    with pytest.raises(TraceError) as got:
        openb.load_nodes(path)
    assert str(got.value) == f"{path}:3: column 'gpu' is over {openb.MAX_GPUS} GPUs (the most a node holds here)"


@pytest.mark.parametrize(("cell", "why"), [("1.5", "must be a whole number of GPUs"), ("65", f"is over {openb.MAX_GPUS} GPUs")])
def test_a_pod_asking_for_a_fraction_of_devices_or_too_many_is_refused(tmp_path: Path, cell: str, why: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + f"p0,1000,1024,{cell},1000\n")
    with pytest.raises(TraceError, match=why) as got:
        openb.load_pods(path)
    assert str(got.value).startswith(f"{path}:2: column 'num_gpu'")


def test_the_openb_protocol_refuses_a_pod_list_without_gpu_pods_at_once() -> None:
    from fedcore.nodes import Node

    pods = [Pod(f"p{i}", 1000, 1024) for i in range(200)]
    with pytest.raises(ValueError, match="none of the 200 pods asks for a GPU"):
        submission.run([Node("n0", 32000, 65536, gpus=8)], pods, "fgd", 0)
    assert len(submission.workload([*pods, Pod("g", 1000, 1024, gpu=GpuRequest(1, 1000))], 0, 8000)) >= 200


# ---- the Kubernetes object reader ---------------------------------------------------------------------


def _pod(cpu: object = "1", epoch: object = "1", **spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "annotations": {kubeobjects.EPOCH_ANNOTATION: epoch}},
            "spec": {"containers": [{"resources": {"requests": {"cpu": cpu}}}], **spec}}


@pytest.mark.parametrize(("cpu", "why"), [
    ("1e999999999", "not a Kubernetes quantity: '1e999999999'"),
    ("1e400", "quantity '1e400' is over the largest Kubernetes keeps"),
    ("1e17", "cpu '1e17' is over the largest Kubernetes keeps"),
])
def test_a_pod_with_an_impossible_cpu_is_refused(cpu: str, why: str) -> None:
    with pytest.raises(kubeobjects.KubeObjectError) as got:
        kubeobjects.read_pod(_pod(cpu))
    assert str(got.value).startswith(f"pod default/p container 0: {why}")


@pytest.mark.parametrize("epoch", ["1_000", "٣", str(2**70), 2**70, "0", "-1", True, None, ["1"]])
def test_a_pod_with_an_epoch_that_is_not_plain_decimal_in_range_is_refused(epoch: object) -> None:
    with pytest.raises(kubeobjects.KubeObjectError, match=r"must be an integer in 1\.\.9223372036854775807"):
        kubeobjects.read_pod(_pod(epoch=epoch))


@pytest.mark.parametrize("obj", [
    {"metadata": {"name": "p", "labels": ["x"]}},
    {"metadata": {"name": "p"}, "spec": {"containers": {"c": 1}}},
    {"metadata": {"name": "p"}, "spec": "x"},
    {"metadata": {"name": "p"}, "spec": {"tolerations": "abc"}},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": ["cpu"]}}]}},
    {"metadata": {"name": "p"}, "spec": {"priority": 2**70}},
    {"metadata": ["p"]},
    {"metadata": {"name": 5}},
    ["not", "a", "pod"],
])
def test_a_pod_of_the_wrong_shape_is_a_kube_object_error_and_nothing_else(obj: object) -> None:
    with pytest.raises(kubeobjects.KubeObjectError):
        kubeobjects.read_pod(obj)  # type: ignore[arg-type]


@pytest.mark.parametrize(("obj", "problem"), [
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e999999999"}}}, "unreadable allocatable: not a Kubernetes quantity"),
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e400"}}}, "unreadable allocatable: quantity '1e400' is over"),
    ({"metadata": {"name": "n", "labels": "x"}}, "a field has the wrong shape"),
    ({"metadata": {"name": "n"}, "status": {"allocatable": ["cpu"]}}, "a field has the wrong shape"),
    ({"metadata": {"name": "n"}, "status": {"conditions": "x"}}, "a field has the wrong shape"),
    ({"metadata": "x"}, "a field has the wrong shape"),
])
def test_a_node_of_the_wrong_shape_comes_back_with_its_problem_never_an_exception(obj: dict[str, object], problem: str) -> None:
    node = kubeobjects.read_node(obj)
    assert node.problem.startswith(problem) and node.capacity.cpu_milli == 0
    with pytest.raises(kubeobjects.KubeObjectError):
        node.to_node()  # never placed on


# ---- autoscaling series: the server opens no path a client names ------------------------------------

SECRET = "root:$6$salt$hash:19000:0:99999:7:::"


class Aborted(Exception):
    """What a fake gRPC context's ``abort`` raises: the status code and details a client would get."""


class FakeContext:
    async def abort(self, code: object, details: str) -> None:
        raise Aborted(code, details)


def _plane(tmp_path: Path, *workloads: str) -> object:
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Template, Workload

    clock = lambda: 0.0  # noqa: E731
    plane = ControlPlane(tmp_path / "cp.db", Backends(clock), clock)
    plane.register_cluster(ClusterSpec("a", "r0"))
    plane.tick(0.0)
    for name in workloads:
        plane.submit(Workload(name, 2, Template(250, 256)), dry_run=False)
    return plane


def _enable(plane: object, **spec: object) -> tuple[object, str]:
    """EnableAutoscale through the servicer, as the server runs it: (status code, details) of a refusal."""
    import asyncio

    from controlplane.autoscaling.api import AutoscalerService
    from fedapi import autoscale_pb2 as pb

    request = pb.EnableAutoscaleRequest(spec=pb.AutoscaleSpec(**spec))
    try:
        asyncio.run(AutoscalerService(plane).EnableAutoscale(request, FakeContext()))  # type: ignore[arg-type]
    except Aborted as exc:
        return exc.args[0], exc.args[1]
    return "OK", ""


def test_the_server_never_opens_a_series_path_a_client_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc

    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    opened: list[str] = []
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: opened.append(str(self)) or real_open(self, *a, **k))
    plane = _plane(tmp_path, "w1")
    try:
        code, details = _enable(plane, workload="w1", series=str(secret))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "neither a packaged series" in details and "root:" not in details
        assert str(secret) not in opened
        assert plane.autoscaling.statuses() == [] and plane.autoscaling.book.all() == []  # nothing enabled, nothing stored
    finally:
        plane.close()


@pytest.mark.parametrize(("spec", "why"), [
    ({"values": [1.0, 2.0, float("nan")]}, "sample 3 is not a finite number in 0..1e+12"),
    ({"values": [1.0, float("inf")]}, "sample 2 is not a finite number"),
    ({"values": [1.0, -1.0]}, "sample 2 is not a finite number"),
    ({"values": [1e308]}, "sample 1 is not a finite number"),
    ({"values": [1.0] * 20_001}, "20001 samples, at most 20000"),
    ({"values": [1.0], "peak_replicas": float("nan")}, "peak_replicas must be a number in 0.1..500, not nan"),
    ({"values": [1.0], "speed": 1e308}, "speed must be a number in 0.001..1000"),
    ({"values": [1.0], "startup_s": float("inf")}, "startup_s must be a number in 0..86400, not inf"),
    ({"values": [1.0], "series": "x" * 129}, "in at most 128 printable characters"),
    ({"values": [1.0], "stride_s": 0.001}, "stride_s must be 0 (60 s) or at least 1, not 0.001"),
    ({"values": [1.0], "stride_s": 1.0, "speed": 1000.0}, "1000 samples per second (at most 100) and a start-up horizon of 7.5e+04 samples"),
    ({"values": [1.0], "stride_s": 60.0, "speed": 1000.0, "startup_s": 86400.0}, "and a start-up horizon of 1.44e+06 samples (at most 2000)"),
])
def test_a_bad_series_or_spec_is_refused_on_enable_and_nothing_is_enabled(tmp_path: Path, spec: dict[str, object], why: str) -> None:
    import grpc

    plane = _plane(tmp_path, "w1")
    try:
        code, details = _enable(plane, **{"workload": "w1", "series": "load.csv", **spec})
        assert code == grpc.StatusCode.INVALID_ARGUMENT and why in details, details
        assert plane.autoscaling.statuses() == [] and plane.autoscaling.book.all() == []
    finally:
        plane.close()


@pytest.mark.parametrize(("content", "why"), [
    (b"", "no samples (empty, or a header only)"),
    (b"demand\n", "no samples (empty, or a header only)"),
    (b"demand\n1\n2\nnan\n", "line 4 is not a finite number in 0..1e+12"),
    (b"1\ninf\n", "line 2 is not a finite number in 0..1e+12"),
    (b"1\n-3\n", "line 2 is not a finite number in 0..1e+12"),
    (b"1\n\n2\n", "line 2 is not a number"),
    ((SECRET + "\ndaemon:*:19000:0:99999:7:::\n").encode(), "line 2 is not a number"),
    (b"1\n" + b"9" * 5000 + b"\n", "line 2 is longer than 4096 bytes"),
    (b"1\n\xff\n", "line 2 is not UTF-8 text in CSV"),
    (b"1\n" * 20_001, "more than 20000 samples (line 20001)"),
])
def test_the_client_reads_its_csv_and_refuses_it_by_line_never_echoing_it(tmp_path: Path, content: bytes, why: str) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    path = tmp_path / "load.csv"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["autoscale", "enable", "w1", "--series", str(path), "--target", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert f"error: series {path}: {why}" in result.output.splitlines()
    assert "root:" not in result.output and "daemon:" not in result.output


def test_a_bom_headed_csv_is_read_by_the_client() -> None:
    from controlplane.autoscaling import series as sr

    assert sr._samples(Path("x.csv"), [b"\xef\xbb\xbf1.5\n", b"2\n"]) == [1.5, 2.0]


@pytest.mark.parametrize("option", ["--peak-replicas", "--speed", "--startup-s", "--stride-s"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_the_client_refuses_a_non_finite_number_before_connecting(option: str, value: str) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    result = CliRunner().invoke(main, ["autoscale", "enable", "w1", option, value, "--target", "127.0.0.1:1"])
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output
    assert f"'{value}' is not a finite number." in result.output or f"{value} is not in the range" in result.output


def test_one_failing_autoscaler_stalls_no_other_and_its_status_says_why(tmp_path: Path) -> None:
    from controlplane.autoscaling.specs import AutoscaleSpec

    plane = _plane(tmp_path, "bad", "good")
    try:
        wave = tuple(float(10 + (i % 30)) for i in range(400))
        for name in ("bad", "good"):
            plane.autoscaling.enable(AutoscaleSpec(name, "wave.csv", values=wave, stride_s=60.0, speed=60.0, startup_s=1.0), 0.0)
        plane.autoscaling.scalers["bad"].replay = np.array([])  # an empty replay, as an empty series once gave: modulo by zero
        for t in range(1, 40):
            plane.tick(float(t))
        bad, good = plane.autoscaling.status("bad"), plane.autoscaling.status("good")
        assert bad.reason == "failed: ZeroDivisionError: integer modulo by zero; replicas kept"
        assert good.reason.startswith("forecast_hpa:") and good.desired != 2  # the other one kept deciding
        failures = [d for d in plane.registry.decisions(1000) if d.kind == "autoscale-failed"]
        assert [(d.workload, d.reasons) for d in failures] == [("bad", ("ZeroDivisionError: integer modulo by zero",))]  # once
        assert plane.registry.placements("bad")[0].replicas == 2
    finally:
        plane.close()


# ---- the lab: arguments refused before anything starts, children gone with their parent ------------------


@pytest.mark.parametrize(("args", "why"), [
    (["--agents", "0"], "Invalid value for '--agents': 0 is not in the range 1<=x<=256."),
    (["--agents", "1000000"], "Invalid value for '--agents': 1000000 is not in the range 1<=x<=256."),
    (["--rate", "-1"], "Invalid value for '--rate': -1.0 is not in the range 0.01<=x<=10000."),
    (["--rate", "nan"], "Invalid value for '--rate': 'nan' is not a finite number."),
    (["--life", "inf"], "Invalid value for '--life': inf is not in the range 0.01<=x<=86400."),
])
def test_bench_agent_refuses_its_arguments_before_starting_anything(args: list[str], why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main
    from fedplane.lab.benches import agentbench

    monkeypatch.setattr(agentbench, "run_bench", lambda *a: pytest.fail("the bench started"))
    result = CliRunner().invoke(main, ["bench", "agent", *args, "--json"])
    assert result.exit_code == 2 and f"Error: {why}" in result.output.splitlines()


def test_a_drill_with_an_unwritable_plot_is_refused_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main
    from fedplane.lab.drills import failoverdrill

    monkeypatch.setattr(failoverdrill, "run_drill", lambda *a, **k: pytest.fail("the drill ran"))
    result = CliRunner().invoke(main, ["drill", "failover", "--scenario", "cluster-outage", "--runs", "1", "--plot", "/nonexistent/dir/x.png"])
    assert result.exit_code == 2
    assert "error: --plot /nonexistent/dir/x.png: folder /nonexistent/dir does not exist" in result.output.splitlines()


@pytest.mark.integration
def test_a_sigtermed_bench_agent_leaves_no_process_behind(tmp_path: Path, traces: Path) -> None:  # the bench reads openb
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tests.conftest import ROOT

    bench = subprocess.Popen([sys.executable, "-m", "fedplane", "bench", "agent", "--agents", "2", "--kill", "0", "--pods", "50",
                              "--rate", "2", "--json"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    parent = psutil.Process(bench.pid)
    deadline, started = time.monotonic() + 120, []
    while time.monotonic() < deadline and bench.poll() is None:  # until the plane and both agents run
        started = parent.children(recursive=True)
        if sum("serve" in " ".join(p.cmdline()) for p in started if p.is_running()) and \
                sum("agent" in p.cmdline() and "--check" not in p.cmdline() for p in started if p.is_running()) >= 2:
            break
        time.sleep(0.5)
    assert bench.poll() is None and started, "the bench did not get its plane and agents up"
    bench.send_signal(signal.SIGTERM)
    assert bench.wait(timeout=15) == 128 + signal.SIGTERM
    gone, alive = psutil.wait_procs(started, timeout=5)
    assert alive == [], [p.cmdline() for p in alive]


# ---- re-registering a cluster: refused without --force, idempotent, forced with nothing dropped ------------


def _call(service: object, method: str, request: object) -> tuple[object, object]:
    """One RPC through the servicer as the server runs it: ("OK", response) or (status code, details)."""
    import asyncio

    try:
        return "OK", asyncio.run(getattr(service, method)(request, FakeContext()))
    except Aborted as exc:
        return exc.args[0], exc.args[1]


def _control(plane: object) -> object:
    from controlplane.service import ControlPlaneService

    return ControlPlaneService(plane, lambda *a: {})  # type: ignore[arg-type]


def _register(name: str = "c0", region: str = "r0", nodes: int = 4, force: bool = False, **spec: object) -> object:
    from fedapi import controlplane_pb2 as cp

    return cp.RegisterClusterRequest(cluster=cp.ClusterSpec(name=name, region=region, twin_nodes=nodes, **spec), force=force)


def _cluster_plane(tmp_path: Path) -> object:
    """c0 (4 twin nodes of 8 CPUs) holding w (6 replicas of 2 CPUs), every replica placed and running."""
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Policy, Template, Workload

    clock = lambda: 0.0  # noqa: E731
    plane = ControlPlane(tmp_path / "cp.db", Backends(clock, twin_ready_delay_s=0.0), clock)
    assert _call(_control(plane), "RegisterCluster", _register())[0] == "OK"
    plane.tick(0.0)
    assert plane.submit(Workload("w", 6, Template(2000, 1024), Policy(clusters=("c0",))), dry_run=False).ok
    plane.tick(0.0)
    return plane


def _state(plane: object) -> tuple[object, ...]:
    twin = plane.backends("c0")
    return ([c.to_json() for c in plane.registry.clusters()], len(twin.list_nodes()), twin.get_workload("w").ready_replicas,
            plane.registry.placements("w"), [d.kind for d in plane.registry.decisions(1000)])


def test_re_registering_a_cluster_with_another_spec_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    import grpc

    plane = _cluster_plane(tmp_path)
    try:
        before, twin = _state(plane), plane.backends("c0")
        code, details = _call(_control(plane), "RegisterCluster", _register(region="r9", nodes=1))
        assert code == grpc.StatusCode.ALREADY_EXISTS
        assert details == ("cluster c0 already exists with another spec (region 'r0' -> 'r9'; twin_nodes 4 -> 1): nothing changed; "
                           "register it with --force (RegisterCluster force) to apply it")
        assert _state(plane) == before and plane.backends("c0") is twin and before[2] == 6
    finally:
        plane.close()


def test_re_registering_a_cluster_with_its_own_spec_changes_nothing(tmp_path: Path) -> None:
    plane = _cluster_plane(tmp_path)
    try:
        before, twin = _state(plane), plane.backends("c0")
        code, status = _call(_control(plane), "RegisterCluster", _register())
        assert code == "OK" and status.spec.region == "r0" and status.spec.twin_nodes == 4
        assert _state(plane) == before and plane.backends("c0") is twin
    finally:
        plane.close()


def test_a_forced_shrink_re_creates_every_replica_and_leaves_what_does_not_fit_pending_never_dropped(tmp_path: Path) -> None:
    plane = _cluster_plane(tmp_path)
    try:
        epoch = plane.registry.placements("w")[0].epoch
        code, status = _call(_control(plane), "RegisterCluster", _register(region="r9", nodes=1, force=True))
        assert code == "OK" and status.spec.region == "r9" and status.spec.twin_nodes == 1
        plane.tick(0.0)
        twin = plane.backends("c0")
        assert len(twin.list_nodes()) == 1
        [placement] = plane.registry.placements("w")
        assert placement.replicas == 6 and placement.epoch > epoch  # re-created at a bumped epoch: old binds are fenced
        w = twin.get_workload("w")
        assert w.spec.replicas == 6 and w.ready_replicas == 4  # one 8-CPU node holds four 2-CPU replicas: two stay pending
        respec = next(d for d in plane.registry.decisions(1000) if d.kind == "cluster-respec")
        assert respec.source == "c0" and respec.reasons == ("region 'r0' -> 'r9'; twin_nodes 4 -> 1", "w: 6 replicas")
    finally:
        plane.close()


def test_serve_refuses_to_start_on_flags_that_would_change_a_registered_cluster(tmp_path: Path) -> None:
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane

    clock = lambda: 0.0  # noqa: E731
    plane = ControlPlane(tmp_path / "cp.db", Backends(clock), clock)
    try:
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=4))
        with pytest.raises(ValueError, match=r"cluster c0 already exists with another spec \(twin_nodes 4 -> 2\)"):
            plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=2))
        assert [c.twin_nodes for c in plane.registry.clusters()] == [4]
    finally:
        plane.close()


# ---- every RPC bounded at the server ----------------------------------------------------------------


@pytest.mark.parametrize(("request_of", "why"), [
    (lambda: _register("c1", nodes=2**31 - 1), "cluster c1: twin_nodes must be in 0..10000, got 2147483647"),
    (lambda: _register("c1", labels={f"k{i}": "v" for i in range(65)}), "cluster c1: labels: at most 64 entries, got 65"),
    (lambda: _register("c1", region="r" * 300), "cluster c1: region must be at most 253 printable characters, got 300"),
    (lambda: _register("c" * 1_000_000), "cluster name 'cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc'... "
                                         "(1000000 characters) must be a lowercase RFC 1123 label"),
])
def test_register_cluster_past_a_bound_is_invalid_argument_with_the_limit_and_nothing_registered(
        tmp_path: Path, request_of: object, why: str) -> None:
    import grpc

    plane = _cluster_plane(tmp_path)
    try:
        before = _state(plane)
        code, details = _call(_control(plane), "RegisterCluster", request_of())  # type: ignore[operator]
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(why) and len(details) < 300, details
        assert _state(plane) == before
    finally:
        plane.close()


def _submit(**pod: object) -> object:
    from fedapi import controlplane_pb2 as cp

    policy = pod.pop("policy", None)
    return cp.SubmitWorkloadRequest(workload=cp.WorkloadSpec(name="big", replicas=int(pod.pop("replicas", 1)),  # type: ignore[call-overload]
                                                             pod=cp.PodTemplate(**{"cpu_milli": 100, "memory_mib": 64, **pod}), policy=policy))


@pytest.mark.parametrize(("method", "request_of", "why"), [
    ("SubmitWorkload", lambda: _submit(cpu_milli=2**62), "pod cpu_milli must be in 0..10000000, got 4611686018427387904"),
    ("SubmitWorkload", lambda: _submit(gpus=2**31 - 1), "pod gpus must be in 0..64, got 2147483647"),
    ("SubmitWorkload", lambda: _submit(replicas=2**31 - 1), "workload big: replicas must be 1..10000, got 2147483647"),
    ("SubmitWorkload", lambda: _submit(node_selector={f"k{i}": "v" for i in range(100)}), "pod node_selector: at most 64 entries, got 100"),
    ("SubmitWorkload", lambda: _submit(policy=_policy(clusters=[f"c{i}" for i in range(1001)])), "policy clusters: at most 1000 entries"),
    ("SubmitWorkload", lambda: _submit(policy=_policy(max_per_cluster=2**31 - 1)), "max_per_cluster must be in 0..10000"),
    ("ListDecisions", lambda: _decisions(2**31 - 1), "limit must be in 0..20000 (0: 100), got 2147483647"),
    ("ListDecisions", lambda: _decisions(-1), "limit must be in 0..20000 (0: 100), got -1"),
    ("RunDrill", lambda: _drill(2**31 - 1), "runs must be in 0..1000 (0: 1), got 2147483647"),
    ("ReportAgent", lambda: _report(peers=10_001), "agent report peers: at most 10000 entries, got 10001"),
    ("ReportAgent", lambda: _report(agent_id="a" * 10_000), "agent report agent_id must be at most 253 printable characters, got 10000"),
])
def test_an_rpc_past_a_bound_is_invalid_argument_with_the_limit_and_changes_nothing(
        tmp_path: Path, method: str, request_of: object, why: str) -> None:
    import grpc

    plane = _cluster_plane(tmp_path)
    try:
        before = _state(plane)
        code, details = _call(_control(plane), method, request_of())  # type: ignore[operator]
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(why) and len(details) < 300, details
        assert _state(plane) == before and plane.registry.workload("big") is None
    finally:
        plane.close()


def _policy(**fields: object) -> object:
    from fedapi import controlplane_pb2 as cp

    return cp.PlacementPolicy(**fields)


def _decisions(limit: int) -> object:
    from fedapi import controlplane_pb2 as cp

    return cp.ListDecisionsRequest(limit=limit)


def _drill(runs: int) -> object:
    from fedapi import controlplane_pb2 as cp

    return cp.RunDrillRequest(scenario="cluster-outage", runs=runs)


def _report(peers: int = 0, agent_id: str = "a1") -> object:
    from fedapi import controlplane_pb2 as cp

    return cp.AgentReport(cluster="c0", node="c0-n0", agent_id=agent_id, sequence=1,
                          peers=[cp.PeerView(node=f"n{i}", cluster="c0", state=cp.PEER_ALIVE) for i in range(peers)])


@pytest.mark.integration
def test_a_request_over_the_message_cap_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    import asyncio

    import grpc

    from controlplane import limits, server
    from controlplane.auth import INSECURE
    from fedapi import client

    plane = _cluster_plane(tmp_path)

    async def scenario() -> tuple[object, str]:
        running = await server.start(plane, auth=INSECURE)
        conn = client.connect(f"127.0.0.1:{running.port}")
        try:
            await asyncio.to_thread(conn.control.SubmitWorkload, _submit(image="x" * (limits.MAX_MESSAGE_BYTES + 1)), timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
        finally:
            conn.close()
            await running.stop(0)
        return "OK", ""

    try:
        code, details = asyncio.run(scenario())
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and str(limits.MAX_MESSAGE_BYTES) in details, details
        assert plane.registry.workload("big") is None
    finally:
        plane.close()


def test_register_cluster_opens_no_kubeconfig_a_client_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc

    from fedapi import controlplane_pb2 as cp

    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    opened: list[str] = []
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: opened.append(str(self)) or real_open(self, *a, **k))
    plane = _cluster_plane(tmp_path)
    try:
        before = _state(plane)
        code, details = _call(_control(plane), "RegisterCluster", _register(
            "k1", backend=cp.BACKEND_KUBERNETES, kube_context="ctx", kubeconfig=str(secret)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("kubeconfig: leave it empty") and "root:" not in details
        assert str(secret) not in opened and _state(plane) == before
    finally:
        plane.close()


@pytest.mark.parametrize("command", [["sim"], ["bench", "schedule", "--seeds", "1", "--profiles", "fgd"]])
def test_a_pod_list_without_gpu_pods_is_a_clear_error_not_a_hang(tmp_path: Path, command: list[str]) -> None:
    import time

    from click.testing import CliRunner

    from fedplane.cli import main

    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODE_HEADER + "n0,32000,65536,8,G2\n")
    pods.write_text(POD_HEADER + "".join(f"p{i},1000,1024,0,0\n" for i in range(200)))
    started = time.monotonic()
    result = CliRunner().invoke(main, [*command, "--nodes", str(nodes), "--pods", str(pods), "--json"])
    assert result.exit_code == 2 and time.monotonic() - started < 10
    assert "error: the openb protocol fills the cluster's GPUs: none of the 200 pods asks for a GPU" in result.output.splitlines()


def test_bench_schedule_refuses_a_node_with_a_million_gpus_at_once(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODE_HEADER + "n0,32000,65536,1000000,G2\n")
    pods.write_text(POD_HEADER + "p0,1000,1024,1,1000\n")
    result = CliRunner().invoke(main, ["bench", "schedule", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--json"])
    assert result.exit_code == 2
    assert f"error: {nodes}:2: column 'gpu' is over 64 GPUs (the most a node holds here)" in result.output.splitlines()


def test_an_autoscaler_catching_up_after_a_long_pause_feeds_one_loop_of_its_replay_not_every_sample_missed() -> None:
    import time

    from controlplane.autoscaling.scaler import Autoscaler
    from controlplane.autoscaling.specs import AutoscaleSpec

    wave = tuple(float(10 + (i % 30)) for i in range(400))
    a = Autoscaler.build(AutoscaleSpec("w", "wave.csv", values=wave, stride_s=1.0, speed=100.0, startup_s=1.0), strict=True)
    started = time.monotonic()
    a.step(86_400.0, 2, 2)  # a day at 100 samples per second: 8.6 million samples behind
    assert time.monotonic() - started < 5 and a.fed == 86_400 * 100 + 1


# ---- the agent's configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "why"), [
    ("node: n0\ncluster: $FEDPLANE_TEST_UNSET\n", "{path}:2: $FEDPLANE_TEST_UNSET is not set in the environment"),
    ("node: n0\ncluster: ${FEDPLANE_TEST_UNSET}-x\n", "{path}:2: $FEDPLANE_TEST_UNSET is not set in the environment"),
    ("node: n0\nnode: n1\n", "{path}: not valid YAML: key 'node' given twice"),
    ("node: n0\ngossip: {pushpull_interval: .inf}\n", "gossip.pushpull_interval: must be a finite number, got inf"),
    ("node: n0\nplacement: {claim_window: .nan}\n", "placement.claim_window: must be a finite number, got nan"),
])
def test_an_agent_config_with_an_unset_variable_a_repeated_key_or_a_non_finite_number_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, why: str) -> None:
    from edgeagent import config

    monkeypatch.delenv("FEDPLANE_TEST_UNSET", raising=False)
    path = tmp_path / "agent.yaml"
    path.write_text(text + f"data_dir: {tmp_path}\n")
    with pytest.raises(config.ConfigError) as got:
        config.load(path)
    assert str(got.value).startswith(why.format(path=path))


def test_variables_in_agent_config_comments_are_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeagent import config

    monkeypatch.delenv("FEDPLANE_TEST_UNSET", raising=False)
    monkeypatch.setenv("FEDPLANE_TEST_NODE", "edge-9")
    path = tmp_path / "agent.yaml"
    path.write_text(f"# $FEDPLANE_TEST_UNSET comes from the downward API\nnode: $FEDPLANE_TEST_NODE  # not $FEDPLANE_TEST_UNSET\ndata_dir: {tmp_path}\n")
    assert config.load(path).node == "edge-9"


@pytest.mark.parametrize("method", ["DeleteWorkload", "GetPlacements", "StartMigration"])
def test_an_error_quoting_a_huge_name_is_cut_to_a_stated_length(tmp_path: Path, method: str) -> None:
    import grpc

    from controlplane import limits
    from fedapi import controlplane_pb2 as cp

    requests = {"DeleteWorkload": cp.DeleteWorkloadRequest(workload="w" * 900_000),
                "GetPlacements": cp.GetPlacementsRequest(workload="w" * 900_000),
                "StartMigration": cp.StartMigrationRequest(workload="w" * 900_000, source="c0")}
    plane = _cluster_plane(tmp_path)
    try:
        before = _state(plane)
        code, details = _call(_control(plane), method, requests[method])
        assert code == grpc.StatusCode.NOT_FOUND and len(details) < limits.MAX_DETAILS + 40
        assert "workload 'www" in details and re.search(r"\.\.\. \(9000\d\d characters\)$", details), details
        assert _state(plane) == before
    finally:
        plane.close()


def test_a_forced_shrink_is_rebalanced_to_a_cluster_with_room_make_before_break(tmp_path: Path) -> None:
    from controlplane.registry import ClusterSpec
    from controlplane.runtime import Backends, ControlPlane
    from controlplane.workloads import Template, Workload

    now = [0.0]
    plane = ControlPlane(tmp_path / "cp.db", Backends(lambda: now[0], twin_ready_delay_s=0.0), lambda: now[0])
    try:
        plane.register_cluster(ClusterSpec("c0", "r0"))
        plane.register_cluster(ClusterSpec("c1", "r0"))
        plane.tick(0.0)
        assert plane.submit(Workload("w", 6, Template(2000, 1024)), dry_run=False).counts == {"c0": 6}
        plane.register_cluster(ClusterSpec("c0", "r0", twin_nodes=1), force=True)
        ready = []
        for _ in range(60):
            now[0] += 1.0
            plane.tick(now[0])
            ready.append(sum(plane.backends(c).get_workload("w").ready_replicas for c in ("c0", "c1")
                             if any(p.cluster == c for p in plane.registry.placements("w"))))
        assert [(p.cluster, p.replicas) for p in plane.registry.placements("w")] == [("c1", 6)]
        assert plane.backends("c1").get_workload("w").ready_replicas == 6 and min(ready) >= 4  # never below what c0 held
        assert any(d.kind == "rebalance" and d.source == "c0" and d.target == "c1" for d in plane.registry.decisions(100))
    finally:
        plane.close()
