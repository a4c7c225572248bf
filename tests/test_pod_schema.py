"""One workload, every codec: a field the submit → bind path drops fails here.

The path: the CLI's proto (``cp.WorkloadSpec``) → the plane's ``Workload`` → its store JSON → the back ends'
``WorkloadSpec`` → (twin) pod → the agent link's map → the agent's ``Pod``, or (Kubernetes) the Deployment's pod
template → ``kubeobjects.read_pod`` → the agent's ``Pod``. Hypothesis draws every field of the template and policy.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane import convert
from controlplane.failbacks import Failback, FailbackMode
from controlplane.workloads import Policy, Spread, Template, Workload
from edgeagent import linkcodec
from fedapi import twincluster_pb2 as tw
from fedapi.linkserver import to_wire
from fedcore import kubeobjects
from fedcore.backends.kubernetes import KubernetesCluster
from fedcore.backends.twin import TwinCluster
from fedcore.nodes import Arch, Node, TaintEffect
from fedcore.pods import Pod, qos_of

label = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
words = st.dictionaries(label, label, max_size=3)
templates = st.builds(
    Template,
    cpu_milli=st.integers(0, 64_000), memory_mib=st.integers(0, 256_000), gpus=st.integers(0, 8),
    gpu_model=st.sampled_from(["", "A100", "V100M16"]),
    archs=st.lists(st.sampled_from([a.value for a in Arch]), unique=True, max_size=2).map(tuple),
    tolerations=st.lists(st.tuples(label, st.one_of(st.just(""), label), st.sampled_from(["", *(e.value for e in TaintEffect)])),
                         max_size=2).map(tuple),
    node_selector=words, priority=st.integers(-1000, 1_000_000), image=st.sampled_from(["registry.k8s.io/pause:3.9", "example/app:1"]),
    qos=st.sampled_from(["online", "batch"]),
)
policies = st.builds(
    Policy, spread=st.sampled_from(list(Spread)), clusters=st.lists(label, max_size=2).map(tuple),
    regions=st.lists(label, max_size=2).map(tuple), avoid_clusters=st.lists(label, max_size=2).map(tuple),
    cluster_labels=words, movable=st.booleans(), max_per_cluster=st.integers(0, 5), home_region=st.one_of(st.just(""), label),
    failback=st.builds(Failback, mode=st.sampled_from([m for m in FailbackMode if m is not FailbackMode.MAINTENANCE]),
                       window_s=st.floats(1.0, 86_400.0)) | st.builds(Failback, mode=st.just(FailbackMode.MAINTENANCE),
                                                                         maintenance=st.sampled_from(["02:00-04:00", "23:30-00:30"])),
    group=st.one_of(st.just(""), label),
)
workloads = st.builds(Workload, name=label, replicas=st.integers(1, 3), template=templates, policy=policies, stateful=st.booleans())
quick = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(a: Workload, b: Workload) -> None:
    """Equal, the fields dataclass equality leaves out (the dicts) included."""
    assert a == b
    assert a.template.node_selector == b.template.node_selector
    assert a.policy.cluster_labels == b.policy.cluster_labels


def assert_agent_sees(pod: Pod, t: Template) -> None:
    assert (pod.cpu_milli, pod.memory_mib, pod.gpu.count, pod.gpu_model, pod.priority) == (t.cpu_milli, t.memory_mib, t.gpus, t.gpu_model, t.priority)
    assert pod.qos is qos_of(t.qos)
    assert pod.archs == frozenset(Arch(a) for a in t.archs)
    assert pod.node_selector == t.node_selector
    assert sorted((x.key, x.value or "", x.effect.value if x.effect else "") for x in pod.tolerations) == sorted(t.tolerations)


@quick
@given(workloads)
def test_the_store_codec_keeps_every_field(w: Workload) -> None:
    same(Workload.from_dict(json.loads(json.dumps(w.to_dict()))), w)


@quick
@given(workloads)
def test_the_api_codec_keeps_every_field(w: Workload) -> None:
    message = convert.to_workload(w)
    same(convert.workload(type(message).FromString(message.SerializeToString())), w)


@quick
@given(workloads, st.integers(1, 50))
def test_twin_pods_reach_the_agent_over_the_link_with_every_field(w: Workload, epoch: int) -> None:
    twin = TwinCluster("c0", [Node("c0-n0", 8000, 16384, cluster="c0")])
    twin.create_workload(w.spec(w.replicas, epoch, scheduler_name="fedplane"))
    pods = twin.list_pods(w.name)
    assert len(pods) == w.replicas
    for state in pods:
        update = linkcodec.update_from_wire(to_wire(tw.PodEvent(type=tw.EVENT_ADDED, pod=convert.pod(state))))
        assert update.epoch == epoch and update.pod.workload == w.name
        assert_agent_sees(update.pod, w.template)


@pytest.fixture(scope="module")
def kube() -> KubernetesCluster:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    return KubernetesCluster("k", client.ApiClient())


@quick
@given(workloads, st.integers(1, 50))
def test_kubernetes_pods_reach_the_agent_with_every_field(kube: KubernetesCluster, w: Workload, epoch: int) -> None:
    deployment = kube.manifest(w.spec(w.replicas, epoch, scheduler_name=kubeobjects.SCHEDULER_NAME))
    template = deployment["spec"]["template"]
    pod = kubeobjects.read_pod({"metadata": {**template["metadata"], "name": f"{w.name}-0", "namespace": "default", "uid": "u1"},
                                "spec": template["spec"], "status": {"phase": "Pending"}})
    assert (pod.epoch, pod.scheduler_name, pod.workload) == (epoch, kubeobjects.SCHEDULER_NAME, w.name)
    assert_agent_sees(pod.to_pod(), w.template)
    read, sent = kube._workload(deployment).spec, w.spec(w.replicas, epoch, scheduler_name=kubeobjects.SCHEDULER_NAME)
    as_sets = {"archs": tuple(sorted(sent.archs)), "tolerations": tuple(sorted(sent.tolerations))}
    assert dataclasses.replace(read, tolerations=tuple(sorted(read.tolerations))) == dataclasses.replace(sent, **as_sets)
    assert read.node_selector == sent.node_selector
