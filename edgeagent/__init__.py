"""The edge daemon: decentralized placement over gossip and claims, offline autonomy, local learning."""
