"""The Kubernetes API double the control-plane tests use (it lives in :mod:`fedplane.lab.doubles.kubedouble`)."""

from __future__ import annotations

from fedplane.lab.doubles.kubedouble import DEPLOYMENTS, NODES, PDBS, PODS, FedKube, KubeDouble, kube_double

__all__ = ["DEPLOYMENTS", "NODES", "PDBS", "PODS", "FedKube", "KubeDouble", "kube_double"]
