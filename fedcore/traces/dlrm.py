"""The DLRM inference trace (cluster-trace-gpu-v2025): a time replay of creations and deletions.

CPU is in vCPU and memory/disk in GiB; RDMA shares are read but not modelled (the openb
nodes it is paired with carry no NIC data). An empty creation time means the instance
exists from the start; an empty deletion time means it lives to the end of the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedcore.pods import Pod, QoS
from fedcore.resources import MILLI, GpuRequest
from fedcore.traces.errors import TraceError, number, rows

COLUMNS = {
    "instance_sn", "role", "app_name", "cpu_request", "gpu_request", "memory_request",
    "disk_request", "max_instance_per_node", "creation_time", "deletion_time",
}
GIB = 1024


@dataclass(frozen=True, slots=True)
class Instance:
    """One trace row: a pod with its arrival and (optional) departure time in seconds."""

    pod: Pod
    created: float
    deleted: float | None


def load(path: Path | str) -> list[Instance]:
    """Read the trace, sorted by creation time (stable on file order)."""
    out = []
    for line, row in rows(path, COLUMNS):
        gpus = number(path, line, row, "gpu_request")
        if gpus != int(gpus):
            raise TraceError(f"{path}:{line}: gpu_request must be whole GPUs, got {gpus}")
        if row["role"] not in ("CN", "HN"):
            raise TraceError(f"{path}:{line}: role must be CN or HN, got {row['role']!r}")
        per_node_raw = row["max_instance_per_node"].strip()
        try:
            per_node = int(per_node_raw)
        except ValueError:
            raise TraceError(f"{path}:{line}: max_instance_per_node is not an integer: {per_node_raw!r}") from None
        created = number(path, line, row, "creation_time", default=0.0)
        deleted_raw = row["deletion_time"].strip()
        deleted = number(path, line, row, "deletion_time") if deleted_raw else None
        if deleted is not None and deleted < created:
            raise TraceError(f"{path}:{line}: deleted ({deleted}) before created ({created})")
        app = row["app_name"]
        pod = Pod(
            uid=row["instance_sn"],
            cpu_milli=int(round(number(path, line, row, "cpu_request") * MILLI)),
            memory_mib=int(round(number(path, line, row, "memory_request") * GIB)),
            disk_mib=int(round(number(path, line, row, "disk_request") * GIB)),
            gpu=GpuRequest(int(gpus), MILLI if gpus else 0),
            qos=QoS.LATENCY_SENSITIVE,
            priority=1,
            workload=app,
            tenant=app,
            max_per_node=per_node if per_node > 0 else -1,
        )
        out.append(Instance(pod, created, deleted))
    if not out:
        raise TraceError(f"{path}: no instances")
    out.sort(key=lambda inst: inst.created)
    return out
