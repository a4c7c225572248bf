"""The learning loop on one machine: regions of real agents, Flower SuperNodes, rollout (the lab form)."""
