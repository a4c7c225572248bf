"""SWIM membership with Lifeguard and Bloom-digest anti-entropy of versioned records.

Knows nothing of scheduling: it tells who is alive and carries small versioned records
(free resources, load, model version, CRDT claim deltas) between members.

For the edge agent (asyncio, real sockets)::

    from gossip import GossipConfig, Keyring, UdpGossip

    member = UdpGossip("10.0.0.5:7946", seeds=["10.0.0.2:7946"], keyring=Keyring.load("/etc/fedplane/gossip.keys"),
                       config=GossipConfig())
    await member.start()                      # binds UDP + TCP on the same port, joins via the seeds
    member.publish("resources", {"cpu_m": 3500, "mem_mi": 6144})   # versioned, gossiped, repaired
    unsubscribe = member.subscribe(on_event)  # MemberEvent / RecordEvent callbacks, or:
    async for event in member.events(): ...
    member.members()                          # name -> MemberView(name, incarnation, state)
    member.records()                          # owner -> key -> (version, value)
    member.heard()                            # name -> loop time last heard from it (GossipConfig(hearing=True))
    member.keyring.install(new); member.keyring.use(new); member.keyring.remove(old)  # rotation
    await member.leave()                      # graceful: peers see LEFT, not DEAD

Names are addresses (``host:port``). Record values are anything msgpack encodes; ``None``
withdraws a key. Records of a member live and die with it: reaped ``reap_after`` seconds
after it is declared dead or leaves.

Layers: ``node.GossipNode`` is the sans-IO core (``on_packet``, ``on_stream``, ``on_refused``: a
stream the target's host refused, ``tick``, ``next_deadline`` -> effects); ``udp.UdpGossip`` and
the lab's ``memnet.InMemoryNetwork`` drive the same core over sockets or in virtual time. The
node composes one collaborator per
activity: ``probing`` (failure detection), ``membership`` (state changes, suspicions,
reaping), ``publishing`` (records), ``exchanging`` (push-pull anti-entropy),
``dispatching`` (inbound) and ``sending`` (outbound, gossip rounds), over a shared
``timers`` heap. Wire: ``messages`` + ``wire`` (msgpack, versioned envelope), ``keyring``
(XChaCha20-Poly1305), ``replays``, ``envelopes``. Protocol parts: ``members``,
``suspicion``, ``awareness``, ``timeouts``, ``broadcasts``, ``records``, ``digests``,
``antientropy``. ``shared`` lets many in-process nodes start from one state (the
simulator's large warm clusters). ``metrics`` counts drops by reason; ``fedplane bench
gossip`` lives in the lab (``fedplane.lab.benches``).

Unknown senders: a packet from a sender not in the member table may only probe (Ping,
Ack, Nack) or introduce itself with an Alive about itself (every push-pull frame starts
with one, which is how a join works); anything else it sends is dropped and counted as
``unknown_sender``. With a keyring, every packet must authenticate first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossip.config import GossipConfig
from gossip.effects import MemberEvent, RecordEvent
from gossip.keyring import Keyring, KeyringError
from gossip.members import MemberState, MemberView

if TYPE_CHECKING:
    from gossip.udp import UdpGossip


def __getattr__(name: str) -> object:
    """``UdpGossip`` on first use: importing any part of the package must not load asyncio (an edge
    agent decides whether asyncio may load ``ssl`` after reading its config, which imports gossip)."""
    if name == "UdpGossip":
        from gossip.udp import UdpGossip

        return UdpGossip
    raise AttributeError(f"module 'gossip' has no attribute {name!r}")


__all__ = ["GossipConfig", "Keyring", "KeyringError", "MemberEvent", "MemberState", "MemberView", "RecordEvent", "UdpGossip"]
