"""The wire API shared by the control plane, edge agents and the CLI (protobuf/gRPC only).

Services: ``fedplane.v1.ControlPlane`` (registry, agent evidence, workloads, placements,
migrations, drills) and ``fedplane.v1.TwinCluster`` (the twin's API server for agents).
Protos live in ``fedapi/protos``; generated modules are committed (``python -m fedapi.generate``).
"""
