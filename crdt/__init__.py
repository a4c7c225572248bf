"""Delta-state CRDTs and the placement-claim CRDT. Knows nothing of networks or scheduling policy."""
