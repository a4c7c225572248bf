"""Node objects shaped like real clusters' (shared by the object-model and the control-plane tests)."""

from __future__ import annotations

from typing import Any


def node(name: str, labels: dict[str, str], allocatable: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


REAL_NODES = [  # shaped like what EKS, GKE, k3s on a Raspberry Pi, AKS Windows pools and GPU pools report
    node("ip-10-0-1-7.ec2.internal", {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"},
         {"cpu": "3920m", "memory": "15076868Ki", "pods": "58", "ephemeral-storage": "95491281146"}),
    node("gke-arm-pool-1", {"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux"}, {"cpu": "3920m", "memory": "13Gi"},
         taints=[{"key": "kubernetes.io/arch", "value": "arm64", "effect": "NoSchedule"}]),
    node("pi-4", {"kubernetes.io/arch": "arm", "kubernetes.io/os": "linux"}, {"cpu": "4", "memory": "3880Mi"}),
    node("akswin000000", {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "windows"}, {"cpu": "3860m", "memory": "12Gi"}),
    node("gpu-a100-0", {"kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "A100"},
         {"cpu": "95", "memory": "1.5Ti", "nvidia.com/gpu": "8", "amd.com/gpu": "0"}),
    node("mainframe", {"kubernetes.io/arch": "s390x"}, {"cpu": "8", "memory": "32Gi"}),
    node("fresh", {"kubernetes.io/arch": "amd64"}, None),
    node("typo", {"kubernetes.io/arch": "amd64"}, {"cpu": "four", "memory": "8Gi"}),
]
