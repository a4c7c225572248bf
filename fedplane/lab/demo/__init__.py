"""The demo: the control plane, twin clusters, real agents, a drill and an autoscaled workload in one command."""
