"""Cluster back ends: one ``ClusterBackend`` contract, an embedded twin and a Kubernetes adapter.

The control plane talks to every cluster through :class:`fedcore.backends.contract.ClusterBackend`;
``twin`` runs clusters in-process (deterministic, injected clock), ``kubernetes`` drives a real API
server through the official client (imported lazily: it is an optional dependency).
"""
