"""One fence, one contract: every back end answers a bind (and an eviction) the same way.

Back ends: the twin (control plane side), the in-memory cluster (agent tests' cluster), the
twin-link client through the control plane's TwinCluster service (what agents use on the twin),
and both Kubernetes adapters (control plane's and agent's) over HTTP on the API double.
Rules (:class:`fedcore.backends.model.BindOutcome`): the current epoch binds; the same node again
is ALREADY_BOUND, another node DUPLICATE naming the holder; an epoch behind *or* ahead is
STALE_EPOCH naming the pod's epoch and changes nothing; a finished or deleted pod, and a node
without room, are REJECTED. Evictions: another epoch is STALE_EPOCH, then EVICTED, then GONE.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Coroutine, Iterator
from types import SimpleNamespace
from typing import Any, Protocol, TypeVar

import pytest

from fedplane.lab.doubles.memcluster import InMemoryCluster
from edgeagent.planeclient import PlaneClient
from fedcore.backends.model import BindOutcome, BindResult, EvictOutcome, EvictResult, WorkloadSpec
from fedcore.backends.twin import Binder, TwinCluster, make_nodes
from fedcore.kubeobjects import EPOCH_ANNOTATION
from fedcore.nodes import Node
from fedcore.pods import Pod

T = TypeVar("T")
CPU, MEM = 4000, 8192
serial = itertools.count()


class Fence(Protocol):
    nodes: tuple[str, str]

    def pending(self, epoch: int, cpu_milli: int = 500) -> str: ...

    def bind(self, pod: str, node: str, epoch: int) -> BindResult: ...

    def complete(self, pod: str, epoch: int) -> None: ...

    def evict(self, pod: str, epoch: int) -> EvictResult: ...


class Loop:
    """One event loop in a thread, for the async back ends (their calls look synchronous here)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def __call__(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(20)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class TwinFence:
    def __init__(self) -> None:
        self.twin = TwinCluster("t", make_nodes("t", "r0", 2, CPU, MEM), lambda: 0.0, 0.0, Binder.EXTERNAL)
        self.nodes = ("t-n0", "t-n1")

    def pending(self, epoch: int, cpu_milli: int = 500) -> str:
        name = f"p{next(serial)}"
        self.twin.create_workload(WorkloadSpec(name, 1, cpu_milli, 256, epoch=epoch))
        return f"{name}-0"

    def bind(self, pod: str, node: str, epoch: int) -> BindResult:
        return self.twin.bind_pod(pod, node, epoch)

    def complete(self, pod: str, epoch: int) -> None:
        assert self.twin.complete_pod(pod, epoch, True).ok

    def evict(self, pod: str, epoch: int) -> EvictResult:
        return self.twin.evict_pod(pod, epoch)


class LinkFence(TwinFence):
    """The agent's PlaneClient through the control plane's TwinCluster service on the twin link."""

    def __init__(self) -> None:
        from controlplane.service import TwinClusterService
        from fedapi.linkserver import LinkServer

        super().__init__()
        self.run = Loop()
        plane = SimpleNamespace(backends=SimpleNamespace(twins=lambda: {"t": self.twin}),
                                colocation=SimpleNamespace(refusal=lambda cluster, node, reclaimed_milli: ""))  # no batch here
        self.server = LinkServer(TwinClusterService(plane))  # type: ignore[arg-type]
        port = self.run(self.server.start())
        self.client = PlaneClient(f"127.0.0.1:{port}", "t", 5.0)

    def bind(self, pod: str, node: str, epoch: int) -> BindResult:
        return self.run(self.client.bind(pod, node, epoch))

    def evict(self, pod: str, epoch: int) -> EvictResult:
        return self.run(self.client.evict(pod, epoch))

    def close(self) -> None:
        self.run(self.client.close())
        self.run(self.server.stop())
        self.run.close()


class MemFence:
    def __init__(self) -> None:
        self.cluster = InMemoryCluster([Node("a", CPU, MEM), Node("b", CPU, MEM)])
        self.nodes = ("a", "b")
        self.run = Loop()

    def pending(self, epoch: int, cpu_milli: int = 500) -> str:
        uid = f"p{next(serial)}"
        self.cluster.submit(Pod(uid, cpu_milli, 256))
        self.cluster.pods[uid].epoch = epoch  # the back end's hand: the pod was re-placed this often
        return uid

    def bind(self, pod: str, node: str, epoch: int) -> BindResult:
        return self.run(self.cluster.bind(pod, node, epoch))

    def complete(self, pod: str, epoch: int) -> None:
        assert self.run(self.cluster.complete(pod, epoch, True)).ok

    def evict(self, pod: str, epoch: int) -> EvictResult:
        return self.run(self.cluster.evict(pod, epoch))

    def close(self) -> None:
        self.run.close()


class KubeFence:
    """Pods and nodes on the API double; ``agent`` picks the agent's adapter, else the control plane's."""

    def __init__(self, double: Any, agent: bool) -> None:
        from fedplane.lab.doubles.kubedouble import NODES

        self.double, self.agent = double, agent
        self.nodes = (f"k{next(serial)}-a", f"k{next(serial)}-b")
        for n in self.nodes:
            double.put(NODES, None, n, {"metadata": {"labels": {"kubernetes.io/arch": "amd64"}},
                                        "status": {"allocatable": {"cpu": f"{CPU}m", "memory": f"{MEM}Mi"},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}})
        if agent:
            from edgeagent.kube import KubeCluster

            self.run = Loop()
            self.kube = KubeCluster("", "fedplane", 5.0, api_client=double.client())
        else:
            from fedcore.backends.kubernetes import KubernetesCluster

            self.backend = KubernetesCluster("kube", double.client())

    def pending(self, epoch: int, cpu_milli: int = 500) -> str:
        from fedplane.lab.doubles.kubedouble import PODS

        name = f"p{next(serial)}"
        self.double.put(PODS, "default", name, {
            "metadata": {"uid": name, "labels": {"fedplane.io/workload": "w"}, "annotations": {EPOCH_ANNOTATION: str(epoch)}},
            "spec": {"schedulerName": "fedplane", "containers": [
                {"name": "c", "image": "pause", "resources": {"requests": {"cpu": f"{cpu_milli}m", "memory": "256Mi"}}}]},
            "status": {"phase": "Pending"}})
        return name

    def bind(self, pod: str, node: str, epoch: int) -> BindResult:
        if self.agent:
            return self.run(self.kube.bind(f"default/{pod}", node, epoch))
        return self.backend.bind_pod(pod, node, epoch)

    def complete(self, pod: str, epoch: int) -> None:
        from fedplane.lab.doubles.kubedouble import PODS

        obj = self.double.get(PODS, "default", pod)
        obj["status"] = {"phase": "Succeeded"}  # the kubelet's report
        self.double.put(PODS, "default", pod, obj)

    def evict(self, pod: str, epoch: int) -> EvictResult:
        if self.agent:
            return self.run(self.kube.evict(f"default/{pod}", epoch))
        return self.backend.evict_pod(pod, epoch)

    def close(self) -> None:
        if self.agent:
            self.run.close()


@pytest.fixture(scope="module")
def double() -> Iterator[Any]:
    pytest.importorskip("kmock")
    from fedplane.lab.doubles.kubedouble import kube_double

    with kube_double() as d:
        yield d


@pytest.fixture(params=["twin", "in-memory", "twin-link", "kube-controlplane", "kube-agent"])
def fence(request: pytest.FixtureRequest) -> Iterator[Any]:
    kind = request.param
    f: Any
    if kind == "twin":
        f = TwinFence()
    elif kind == "in-memory":
        f = MemFence()
    elif kind == "twin-link":
        f = LinkFence()
    else:
        f = KubeFence(request.getfixturevalue("double"), agent=kind == "kube-agent")
    yield f
    if hasattr(f, "close"):
        f.close()


def test_bind_at_the_current_epoch_and_again(fence: Fence) -> None:
    a, b = fence.nodes
    pod = fence.pending(epoch=2)
    first = fence.bind(pod, a, 2)
    assert (first.outcome, first.node) == (BindOutcome.BOUND, a)
    assert fence.bind(pod, a, 2).outcome is BindOutcome.ALREADY_BOUND
    dup = fence.bind(pod, b, 2)
    assert (dup.outcome, dup.node) == (BindOutcome.DUPLICATE, a), "the answer names the holder"


@pytest.mark.parametrize("named", [2, 4], ids=["behind", "ahead"])
def test_an_epoch_behind_or_ahead_is_stale_and_changes_nothing(fence: Fence, named: int) -> None:
    a, _ = fence.nodes
    pod = fence.pending(epoch=3)
    stale = fence.bind(pod, a, named)
    assert (stale.outcome, stale.epoch) == (BindOutcome.STALE_EPOCH, 3), "it names the pod's epoch"
    assert fence.bind(pod, a, 3).outcome is BindOutcome.BOUND, "nothing was bound by the refused call"


def test_a_completed_pod_is_never_bound_again(fence: Fence) -> None:
    a, b = fence.nodes
    pod = fence.pending(epoch=1)
    assert fence.bind(pod, a, 1).ok
    fence.complete(pod, 1)
    assert fence.bind(pod, a, 1).outcome is BindOutcome.REJECTED
    assert fence.bind(pod, b, 1).outcome is BindOutcome.REJECTED


def test_a_deleted_pod_is_rejected(fence: Fence) -> None:
    a, _ = fence.nodes
    pod = fence.pending(epoch=1)
    assert fence.evict(pod, 1).outcome is EvictOutcome.EVICTED
    assert fence.bind(pod, a, 1).outcome is BindOutcome.REJECTED


def test_a_node_that_no_longer_fits_is_rejected(fence: Fence) -> None:
    a, b = fence.nodes
    big, other = fence.pending(epoch=1, cpu_milli=3000), fence.pending(epoch=1, cpu_milli=3000)
    assert fence.bind(other, a, 1).outcome is BindOutcome.BOUND
    refused = fence.bind(big, a, 1)
    assert refused.outcome is BindOutcome.REJECTED and refused.reason
    assert fence.bind(big, b, 1).outcome is BindOutcome.BOUND


def test_eviction_is_fenced_and_idempotent(fence: Fence) -> None:
    a, _ = fence.nodes
    pod = fence.pending(epoch=2)
    assert fence.bind(pod, a, 2).ok
    assert fence.evict(pod, 1).outcome is EvictOutcome.STALE_EPOCH, "never stops another epoch's copy"
    assert fence.evict(pod, 2).outcome is EvictOutcome.EVICTED
    assert fence.evict(pod, 2).outcome is EvictOutcome.GONE, "a retried eviction is harmless"
