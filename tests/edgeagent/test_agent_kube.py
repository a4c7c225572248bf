"""The agent's Kubernetes back end through the real client over HTTP against the API double
(kmock plus binding, eviction with PodDisruptionBudgets: :mod:`fedplane.lab.doubles.kubedouble`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

kmock = pytest.importorskip("kmock")
kubernetes = pytest.importorskip("kubernetes")

from edgeagent.clusters import BindOutcome, EvictOutcome, Phase, PodUpdate  # noqa: E402
from edgeagent.kube import KubeCluster  # noqa: E402
from fedplane.lab.doubles.kubedouble import NODES, PDBS, PODS, KubeDouble, kube_double  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture()
def kube() -> Iterator[KubeDouble]:
    with kube_double() as double:
        yield double


def pod(scheduler: str, epoch: int = 2, uid: str = "u-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": uid, "annotations": {"fedplane.io/epoch": str(epoch)}, "labels": {"app": "web"}},
            "spec": {"schedulerName": scheduler,
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}]}}},
                     "initContainers": [{"name": "setup", "image": "pause", "resources": {"requests": {"cpu": "2"}}}],
                     "containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_watch_binding_and_fencing_against_the_api(kube: KubeDouble) -> None:
    kube.put(NODES, None, "edge-1", {"apiVersion": "v1", "kind": "Node", "metadata": {"labels": {"kubernetes.io/arch": "arm64"}},
                                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})
    kube.put(PODS, "default", "ours", pod("fedplane"))
    kube.put(PODS, "default", "theirs", pod("default-scheduler"))

    async def scenario() -> tuple[list[PodUpdate], Any, list[BindOutcome]]:
        cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client("fedplane-agent/edge-1"))
        node = await cluster.describe_node("edge-1")
        seen: list[PodUpdate] = []

        async def collect() -> None:
            async for update in cluster.watch():
                seen.append(update)

        watcher = asyncio.create_task(collect())
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.05)
        key = seen[0].pod.uid
        outcomes = [(await cluster.bind(key, "edge-1", 2)).outcome,
                    (await cluster.bind(key, "edge-1", 2)).outcome,
                    (await cluster.bind(key, "edge-2", 2)).outcome,
                    (await cluster.bind(key, "edge-1", 1)).outcome,
                    (await cluster.bind(key, "edge-1", 3)).outcome,
                    (await cluster.bind("default/gone", "edge-1", 2)).outcome]
        watcher.cancel()
        return seen, node, outcomes

    seen, node, outcomes = asyncio.run(scenario())
    assert node.capacity.cpu_milli == 4000 and node.gpus == 1 and node.arch.value == "arm64"
    assert all(u.pod.uid == "default/ours~u-1" for u in seen), "only pods with our schedulerName; name and incarnation"
    first = seen[0]
    assert first.phase is Phase.PENDING and first.epoch == 2 and first.pod.gpu.count == 1
    assert first.pod.cpu_milli == 2000, "the init container's 2 CPUs are the effective request"
    assert {a.value for a in first.pod.archs} == {"arm64"}, "arch from required node affinity"
    assert outcomes == [BindOutcome.BOUND, BindOutcome.ALREADY_BOUND, BindOutcome.DUPLICATE, BindOutcome.STALE_EPOCH,
                        BindOutcome.STALE_EPOCH, BindOutcome.REJECTED]
    stored = kube.get(PODS, "default", "ours")
    assert stored is not None and stored["spec"]["nodeName"] == "edge-1"
    assert kube.handler is not None and kube.handler.binders[("default", "ours")] == "fedplane-agent/edge-1"


def test_eviction_respects_disruption_budgets_and_is_fenced_and_idempotent(kube: KubeDouble) -> None:
    kube.put(NODES, None, "edge-1", {"metadata": {"labels": {"kubernetes.io/arch": "arm64"}},
                                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})
    kube.put(PODS, "default", "web-1", pod("fedplane", epoch=3))
    kube.put(PDBS, "default", "web", {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                      "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client())

    async def bound() -> None:
        assert (await cluster.bind("default/web-1", "edge-1", 3)).ok

    asyncio.run(bound())
    assert asyncio.run(cluster.evict("default/web-1", 2)).outcome is EvictOutcome.STALE_EPOCH, "never stops a newer copy"
    blocked = asyncio.run(cluster.evict("default/web-1", 3))
    assert blocked.outcome is EvictOutcome.BLOCKED and not blocked.final, "minAvailable 1 of 1 ready: blocked (429)"
    assert kube.get(PODS, "default", "web-1") is not None
    budget = kube.get(PDBS, "default", "web")
    assert budget is not None
    budget["spec"] = {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}
    kube.put(PDBS, "default", "web", budget)
    assert asyncio.run(cluster.evict("default/web-1", 3)).outcome is EvictOutcome.EVICTED
    assert kube.get(PODS, "default", "web-1") is None
    assert asyncio.run(cluster.evict("default/web-1", 3)).outcome is EvictOutcome.GONE, "a retried eviction is harmless"


def test_a_pod_recreated_under_its_name_is_a_new_pod_and_the_old_claim_cannot_bind_it(kube: KubeDouble) -> None:
    """A StatefulSet re-creates web-0 under its name: agents' claims are keyed by the uid the watch gives, and a
    claim that completed is over for good, so the new incarnation must carry a new uid (or it is never placed)."""
    from edgeagent.kube import pod_update

    kube.put(NODES, None, "edge-1", {"metadata": {"labels": {"kubernetes.io/arch": "arm64"}},
                                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})
    first, second = pod("fedplane", uid="0f1e2d3c-aaaa"), pod("fedplane", uid="9a8b7c6d-bbbb")
    kube.put(PODS, "default", "web-0", first)
    old = pod_update(first).pod.uid
    kube.put(PODS, "default", "web-0", second)  # deleted and re-created under its name
    new = pod_update(second).pod.uid
    cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client())

    async def binds() -> list[BindOutcome]:
        return [(await cluster.bind(old, "edge-1", 2)).outcome, (await cluster.bind(new, "edge-1", 2)).outcome]

    assert (old, new) == ("default/web-0~0f1e2d3c", "default/web-0~9a8b7c6d")
    assert asyncio.run(binds()) == [BindOutcome.REJECTED, BindOutcome.BOUND]
    assert asyncio.run(cluster.evict(old, 2)).outcome is EvictOutcome.GONE, "never evicts another incarnation"


def batch_pod(name: str, cpu_milli: int, uid: str) -> dict[str, Any]:
    asked = {"kubernetes.io/batch-cpu": str(cpu_milli), "kubernetes.io/batch-memory": str(2**30)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": uid, "labels": {"fedplane.io/qos": "batch"}},
            "spec": {"schedulerName": "fedplane", "priorityClassName": "fedplane-batch",
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": asked, "limits": asked}}]},
            "status": {"phase": "Pending"}}


def test_the_agent_advertises_batch_capacity_and_its_room_check_counts_batch_cpu(kube: KubeDouble) -> None:
    """batch-cpu = allocatable CPU + the reclaimed offer, patched at start and when the offer moves; the room
    check holds a batch pod's batch-cpu against it, as the kubelet admits it."""
    from edgeagent.batchadvertising import BatchAdvertiser

    kube.put(NODES, None, "edge-1", {"apiVersion": "v1", "kind": "Node", "metadata": {"labels": {"kubernetes.io/arch": "amd64"}},
                                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}})
    kube.put(PODS, "default", "b1", batch_pod("b1", 3000, "u-b1"))
    kube.put(PODS, "default", "b2", batch_pod("b2", 2000, "u-b2"))
    cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client())
    patches: list[int] = []

    class Counting:
        async def advertise_batch(self, node: str, reclaimed_milli: int) -> tuple[int, int]:
            patches.append(reclaimed_milli)
            return await cluster.advertise_batch(node, reclaimed_milli)

    def batch_status() -> tuple[str, str]:
        node = kube.get(NODES, None, "edge-1")
        assert node is not None
        alloc = node["status"]["allocatable"]
        return alloc.get("kubernetes.io/batch-cpu", ""), alloc.get("kubernetes.io/batch-memory", "")

    async def patched(count: int) -> None:
        for _ in range(250):
            if len(patches) >= count and advertiser.advertised is not None and advertiser.wanted == patches[-1]:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # and nothing more follows

    advertiser = BatchAdvertiser(Counting(), "edge-1")

    async def scenario() -> list[Any]:
        seen: list[Any] = []
        seen.append((await cluster.bind("default/b1~u-b1", "edge-1", 1)).outcome)  # nothing advertised yet: refused
        task = asyncio.create_task(advertiser.run())
        await patched(1)
        seen.append(batch_status())
        seen.append((await cluster.bind("default/b1~u-b1", "edge-1", 1)).outcome)
        seen.append((await cluster.bind("default/b2~u-b2", "edge-1", 1)).outcome)  # 3000m + 2000m > 4000m
        advertiser.offer(1500)
        advertiser.offer(1500)
        await patched(2)
        advertiser.offer(1500)  # the same offer at the next report: no patch
        await patched(2)
        seen.append(batch_status())
        seen.append((await cluster.bind("default/b2~u-b2", "edge-1", 1)).outcome)
        task.cancel()
        return seen

    seen = asyncio.run(scenario())
    assert seen == [BindOutcome.REJECTED, ("4000", str(8 * 2**30)), BindOutcome.BOUND, BindOutcome.REJECTED,
                    ("5500", str(8 * 2**30)), BindOutcome.BOUND]
    assert patches == [0, 1500], "patched at start and once per change, not per report"
    node = kube.get(NODES, None, "edge-1")
    assert node is not None and node["status"]["capacity"]["kubernetes.io/batch-cpu"] == "5500"


def test_a_failed_batch_advertisement_is_retried_and_never_raises(kube: KubeDouble) -> None:
    from edgeagent.batchadvertising import BatchAdvertiser

    kube.put(NODES, None, "edge-1", {"apiVersion": "v1", "kind": "Node", "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}})
    cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client())
    kube.fail(2, 403, method="PATCH")  # RBAC without nodes/status patch, then granted

    async def scenario() -> tuple[int, int] | None:
        advertiser = BatchAdvertiser(cluster, "edge-1", retry_s=0.05)
        task = asyncio.create_task(advertiser.run())
        for _ in range(100):
            if advertiser.advertised is not None:
                break
            await asyncio.sleep(0.05)
        assert not task.done(), "a failure never ends the task"
        task.cancel()
        return advertiser.advertised

    assert asyncio.run(scenario()) == (2000, 2**30)
    node = kube.get(NODES, None, "edge-1")
    assert node is not None and node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "2000"


def test_only_an_agent_on_kubernetes_advertises_batch_capacity(kube: KubeDouble, tmp_path: Any) -> None:
    from edgeagent import config as agent_config
    from edgeagent.daemon import Agent

    def agent(kind: str, cluster: Any) -> Agent:
        backend = {"kind": kind, "scheduler_name": "fedplane"} if kind == "kubernetes" else {"kind": kind}
        cfg = agent_config.parse({"node": "edge-1", "cluster": "c", "data_dir": str(tmp_path / kind), "backend": backend,
                                  "gossip": {"bind": "127.0.0.1:0"}, "probe": {"kind": "twin"}, "http": {"bind": ""}})
        return Agent(cfg, cluster=cluster, handle_signals=False)

    cluster = KubeCluster("", "fedplane", timeout=5.0, api_client=kube.client())
    kubernetes_agent = agent("kubernetes", cluster)
    assert kubernetes_agent.batch is not None and kubernetes_agent.batch.node == "edge-1"
    assert agent("twin", cluster).batch is None, "the configured kind decides, not the client at hand"
