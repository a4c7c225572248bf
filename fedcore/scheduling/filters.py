"""Filter plugins: hard rules a node must pass. Each is also exposed as a pure predicate over the table.

Names follow kube-scheduler's plugins so that reasons read the same
("0/1523 nodes are available: 1200 NodeResourcesFit").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedcore.nodes import Arch, TaintEffect
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI

ARCH_ORDER = list(Arch)


def gpu_fits(pod: Pod, table: NodeTable) -> np.ndarray:
    """Per-device GPU fit: a share needs one device with that much free; k whole GPUs need k free devices."""
    if pod.gpu.count == 0:
        return np.ones(len(table), dtype=bool)
    if pod.gpu.milli_each < MILLI:
        return (table.gpu_free >= pod.gpu.milli_each).any(axis=1)
    return (table.gpu_free == MILLI).sum(axis=1) >= pod.gpu.count


def resources_fit(pod: Pod, table: NodeTable) -> np.ndarray:
    """CPU, memory and disk fit as in Kubernetes, plus per-device GPU fit and GPU model match."""
    mask = (
        (table.cpu_free >= pod.cpu_milli)
        & (table.mem_free >= pod.memory_mib)
        & (table.disk_free >= pod.disk_mib)
        & gpu_fits(pod, table)
    )
    if pod.gpu.count and pod.gpu_model:
        # A spec may list several acceptable models ("V100M16|V100M32").
        codes = [table.model_codes[m] for m in pod.gpu_model.split("|") if m in table.model_codes]
        mask &= np.isin(table.gpu_model, codes)
    return mask


class NodeResourcesFit:
    name = "NodeResourcesFit"

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        return resources_fit(pod, table)


class TaintToleration:
    """Rejects nodes with a NoSchedule/NoExecute taint the pod does not tolerate."""

    name = "TaintToleration"

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        mask = np.ones(len(table), dtype=bool)
        for row in table.tainted:
            for taint in table.nodes[row].taints:
                if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
                    continue
                if not any(t.tolerates(taint) for t in pod.tolerations):
                    mask[row] = False
                    break
        return mask


class NodeAffinity:
    """Required node selector: every selector label must match the node's label."""

    name = "NodeAffinity"

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        if not pod.node_selector:
            return np.ones(len(table), dtype=bool)
        items = pod.node_selector.items()
        return np.array([all(n.labels.get(k) == v for k, v in items) for n in table.nodes], dtype=bool)


class NodeArch:
    """The pod's architecture constraint (any arch when the pod names none)."""

    name = "NodeArch"

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        if not pod.archs:
            return np.ones(len(table), dtype=bool)
        return np.isin(table.arch, [ARCH_ORDER.index(a) for a in pod.archs])


class MaxPerNode:
    """At most ``pod.max_per_node`` replicas of the pod's workload on one node (DLRM's max_instance_per_node)."""

    name = "MaxPerNode"

    def filter(self, pod: Pod, table: NodeTable) -> np.ndarray:
        if pod.max_per_node < 0 or not pod.workload:
            return np.ones(len(table), dtype=bool)
        return table.workload_count(pod.workload) < pod.max_per_node


def default_filters() -> Sequence[NodeResourcesFit | TaintToleration | NodeAffinity | NodeArch | MaxPerNode]:
    """The hard rules every profile applies (rules always apply; scores only rank feasible nodes)."""
    return (NodeResourcesFit(), TaintToleration(), NodeAffinity(), NodeArch(), MaxPerNode())
