"""The lab: benches, drills, API doubles, simulators and the demo — beside the product, never inside it.

Nothing in the runtime packages (controlplane, edgeagent, gossip, crdt, federated, fedcore, fedapi) imports
this package (an import-linter contract keeps it so); only the ``fedplane`` command composer reaches it.
"""
