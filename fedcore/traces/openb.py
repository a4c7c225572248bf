"""The openb GPU cluster trace (cluster-trace-gpu-v2023): node list and pod list."""

from __future__ import annotations

from pathlib import Path

from fedcore.nodes import Node
from fedcore.pods import Pod, QoS
from fedcore.resources import MILLI, GpuRequest
from fedcore.traces.errors import TraceError, number, rows

NODE_COLUMNS = {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
POD_COLUMNS = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}
"""What the protocol needs; some official lists carry only these five (``qos`` then reads as best-effort)."""
QOS = {q.value: q for q in QoS}
MAX_GPUS = 64
"""Most GPUs a node may hold or a pod ask for (the largest openb node has 8; the twin's nodes hold at most 64): the
node table keeps a free-milli cell per device of the largest node for every node, so one node claiming a million
GPUs would allocate gigabytes and resample millions of pods."""


def _gpus(path: Path | str, line: int, row: dict[str, str], column: str) -> int:
    """A whole number of GPUs, at most :data:`MAX_GPUS`."""
    gpus = number(path, line, row, column)
    if gpus != int(gpus):
        raise TraceError(f"{path}:{line}: column {column!r} must be a whole number of GPUs")
    if gpus > MAX_GPUS:
        raise TraceError(f"{path}:{line}: column {column!r} is over {MAX_GPUS} GPUs (the most a node holds here)")
    return int(gpus)


def load_nodes(path: Path | str, scale: int = 1, clusters: int = 1, regions: int = 1) -> list[Node]:
    """Read the node list, replicated ``scale`` times and dealt round-robin over clusters and regions.

    Disk is not in the trace, so it is left untracked (capacity 0 means "not enforced").
    """
    if scale < 1 or clusters < 1 or regions < 1:
        raise ValueError("node scale, clusters and regions must be at least 1")
    base: list[tuple[str, int, int, int, str]] = []
    for line, row in rows(path, NODE_COLUMNS):
        base.append(
            (row["sn"], int(number(path, line, row, "cpu_milli")), int(number(path, line, row, "memory_mib")), _gpus(path, line, row, "gpu"),
             row["model"])
        )
    if not base:
        raise TraceError(f"{path}: no nodes")
    nodes: list[Node] = []
    for copy in range(scale):
        for name, cpu, mem, gpus, model in base:
            i = len(nodes)
            cluster = i % clusters
            nodes.append(
                Node(
                    name=name if scale == 1 else f"{name}-x{copy}",
                    cpu_milli=cpu,
                    memory_mib=mem,
                    gpus=gpus,
                    gpu_model=model,
                    cluster=f"c{cluster}",
                    region=f"r{cluster % regions}",
                    zone=f"r{cluster % regions}-z{(i // clusters) % 2}",
                )
            )
    return nodes


def load_pods(path: Path | str) -> list[Pod]:
    """Read the pod list in file order; ``gpu_milli`` is clamped to one GPU as the published protocol does.

    Both official shapes are read: the full one (``gpu_spec``, ``qos``, times) and the five-column one.
    """
    pods = []
    for line, row in rows(path, POD_COLUMNS):
        num_gpu = _gpus(path, line, row, "num_gpu")
        milli = min(MILLI, int(number(path, line, row, "gpu_milli")))
        if num_gpu > 1:
            milli = MILLI
        qos = QOS.get(row.get("qos", QoS.BEST_EFFORT.value).strip())
        if qos is None:
            raise TraceError(f"{path}:{line}: unknown qos {row['qos']!r}")
        try:
            gpu = GpuRequest(num_gpu, milli if num_gpu else 0)
        except ValueError as exc:
            raise TraceError(f"{path}:{line}: {exc}") from None
        pods.append(
            Pod(
                uid=row["name"],
                cpu_milli=int(number(path, line, row, "cpu_milli")),
                memory_mib=int(number(path, line, row, "memory_mib")),
                gpu=gpu,
                gpu_model=row.get("gpu_spec", "") or "",
                qos=qos,
                priority=1 if qos in (QoS.LATENCY_SENSITIVE, QoS.GUARANTEED) else 0,
                tenant=qos.value,
            )
        )
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


POD_LIST_PREFIX = "openb_pod_list_"
"""The official pod lists are named ``openb_pod_list_<name>.csv``."""


def list_name(path: Path) -> str:
    """``openb_pod_list_gpushare40.csv`` -> ``gpushare40`` (other files: their stem)."""
    stem = path.stem
    return stem[len(POD_LIST_PREFIX):] if stem.startswith(POD_LIST_PREFIX) and len(stem) > len(POD_LIST_PREFIX) else stem
