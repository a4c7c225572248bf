"""Simulators: many placement cores or claim replicas in one process, on a deterministic network."""
