"""What an agent tells the control plane about itself: ``ControlPlane.ReportAgent``'s message as a wire map.

Sans-IO: built from the placement core and the gossip views the shell passes in; the shell
(:mod:`edgeagent.daemon`) sends it over the twin link with backoff. The control plane judges
clusters from these views (an agent's peers alive, suspect or dead; other clusters' members
it sees in the federation pool), never from a relay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fedapi.agentlink import Wire
from fedapi.workloadcontext import NONE, WorkloadContext
from fedcore.resources import Resources
from gossip.members import MemberState, MemberView

from edgeagent.placing import Placer

PEER_STATES = {MemberState.ALIVE: 1, MemberState.SUSPECT: 2, MemberState.DEAD: 3, MemberState.LEFT: 4}
"""fedplane.v1.PeerState numbers of gossip's member states."""
HEARD_MS_MAX = 2**32 - 1
"""``PeerView.heard_ms`` is a uint32: about 49 days."""
IDENTITY_KEY = "id"
"""The one record each member publishes in the federation pool: ``cluster/node``."""


def identity(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


def report(
    placer: Placer, cluster: str, agent_id: str, sequence: int, lan: Mapping[str, MemberView],
    wan: Mapping[str, MemberView], wan_ids: Mapping[str, str], health: str | None, context: WorkloadContext = NONE,
    held: bool = False, online_used: int | None = None, wan_heard: Mapping[str, float] | None = None,
) -> Wire:
    """The report: our node's summary, our cluster's peers by node name, other clusters' members by ``cluster/node``,
    and the workload context we score with — only once we have one: a control plane that predates the field
    refuses a report carrying it, and it never sends one.

    ``lan`` are our cluster's other gossip members by member name (the placer knows their nodes once their
    state record arrived; until then the member name stands in); ``wan`` the federation pool's
    members, named through ``wan_ids`` (member -> ``cluster/node``, from their identity records). ``held``: the
    plane's last ack asked for the pods we run and their epochs (a rebuilt twin adopts them); never sent unasked, so
    a plane that predates the field never sees it. ``wan_heard``: seconds since we last heard from each federation pool
    member (:meth:`gossip.node.GossipNode.heard`), sent as ``heard_ms``: what tells the plane a member its view holds
    ALIVE is alive now, not only not yet found dead; only once the plane's ack said it takes them (``takes_heard``): a plane
    that predates the field refuses a report carrying it.
    """
    node = placer.node
    capacity = node.capacity
    allocated = bound_here(placer)
    nodes = placer.peer_nodes()
    peers = [{"node": nodes.get(name, name), "cluster": cluster, "state": PEER_STATES[view.state],
              "incarnation": view.incarnation} for name, view in sorted(lan.items())]
    for name, view in sorted(wan.items()):
        peer_cluster, _, peer_node = wan_ids.get(name, "").partition("/")
        if peer_cluster and peer_node and peer_cluster != cluster:
            peer = {"node": peer_node, "cluster": peer_cluster, "state": PEER_STATES[view.state], "incarnation": view.incarnation}
            heard = (wan_heard or {}).get(name)
            if heard is not None:
                peer["heard_ms"] = heard_ms(heard)
            peers.append(peer)
    message: Wire = {
        "cluster": cluster, "node": node.name, "agent_id": agent_id, "sequence": sequence,
        "summary": {
            "node": node.name, "arch": node.arch.value, "ready": True, "pods": len(placer.running),
            "model_version": placer.scorer.version, "load": round(float(placer.load), 4),
            "capacity": _vector(capacity.cpu_milli, capacity.memory_mib, capacity.disk_mib, capacity.gpu_milli),
            "allocated": _vector(allocated.cpu_milli, allocated.memory_mib, allocated.disk_mib, allocated.gpu_milli),
        },
        "peers": peers, "healthy": health is None, "health_reason": health or "",
    }
    if context.known:
        message["context"] = context.to_wire(profile=False)  # its version names the profile
    if online_used is not None:  # measured (isolation on): the plane reclaims what online pods reserve and leave unused
        message["summary"] |= {"online_used_milli": online_used, "online_measured": True}
    if held:
        message["held"] = [{"pod": pod, "epoch": epoch} for pod, epoch in sorted(placer.running.items())]
    return message


def heard_ms(seconds: float) -> int:
    """Seconds since a member was heard as the wire's ``heard_ms``: rounded up (never younger than it is), at least 1
    (0 means no record), at most the field's range."""
    return min(HEARD_MS_MAX, max(1, math.ceil(seconds * 1000)))


def bound_here(placer: Placer) -> Resources:
    """Requests of the pods bound to our node: its load as the control plane judges it.

    Not capacity minus escrow: escrow also holds every claim still racing (a burst of pending pods
    reserves room on each candidate until the losers release), which would read as load and
    trigger rebalances of a cluster that is not busy.
    """
    replica, total = placer.ledger.replica, Resources()
    for uid in replica.pods_on(placer.node.name):
        winner = replica.winner(uid)
        if winner is not None and winner.bound:
            total = total + winner.resources
    return total


def _vector(cpu_milli: int, memory_mib: int, disk_mib: int, gpu_milli: int) -> Wire:
    return {"cpu_milli": cpu_milli, "memory_mib": memory_mib, "disk_mib": disk_mib, "gpu_milli": gpu_milli}
