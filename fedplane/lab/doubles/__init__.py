"""API doubles and in-memory stand-ins: a Kubernetes API, an in-memory cluster behind the agent link, a lossy gossip network."""
