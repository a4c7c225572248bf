"""Drills: faults injected into a running system (real processes, network namespaces, etcd), judged from the back end."""
