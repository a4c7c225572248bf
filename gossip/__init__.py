"""SWIM membership with Lifeguard and Bloom-digest anti-entropy of versioned records. Knows nothing of scheduling."""
