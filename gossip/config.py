"""Tuning knobs of one gossip node, in one frozen value shared by the core and its drivers.

These are the only gossip defaults: the edge agent's ``gossip:`` section takes its
defaults from here, and ``fedplane bench gossip`` measures them (changing only the probe
interval it is asked for, which it reports). They follow memberlist's LAN profile except
where a comment says why they differ. Every duration is in seconds of the driver's clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GossipConfig:
    """How often and how hard a node probes, gossips and repairs state."""

    probe_interval: float = 1.0
    """Period of one probe round (memberlist ProbeInterval, its LAN value), before awareness scaling.
    Each probe wakes an idle edge agent (its idle-CPU budget); a 200 ms probe detects faster."""
    probe_timeout: float = 0.5
    """How long to wait for a direct ack before asking others to probe indirectly (half the interval)."""
    indirect_checks: int = 3
    """k members asked to probe a silent target on our behalf (memberlist IndirectChecks)."""
    suspicion_mult: float = 2.5
    """Minimum suspicion timeout = mult * max(1, log10 N) * probe_interval.
    memberlist's LAN value is 4; 2.5 keeps detection under 2 s at N = 1,000 with a 200 ms probe
    and no false death at 10% loss (``fedplane bench gossip``)."""
    suspicion_max_mult: float = 6.0
    """Maximum suspicion timeout as a multiple of the minimum (memberlist SuspicionMaxTimeoutMult)."""
    suspicion_confirmations: int = 3
    """Independent suspicions that shrink the timeout down to the minimum (Lifeguard's K)."""
    stream_fallback_ping: bool = True
    """Also ping a silent target over a stream (memberlist's TCP fallback): survives datagram loss."""
    refused_suspicion: float = 0.5
    """A target whose host refused our fallback stream ping (its kernel answered: no process listens on the
    port) is suspected at once, its probe round ended, and declared dead this long after, not after
    Lifeguard's timeout: the timeout gives a live, slow member time to refute, and there is no process left to
    refute (a restarted one has a new incarnation). Long enough that others watch the suspicion
    (edgeagent's ``WATCHED_S``, 0.25 s). A host that is down or cut off refuses nothing and takes the full
    timeout; a firewall that rejects only shortens a death that could not be refuted across it anyway."""
    awareness_max: int = 8
    """Lifeguard local health: probe timeout and interval are multiplied by (score + 1) < this."""
    gossip_interval: float = 0.04
    """Period of one gossip round while broadcasts are queued (memberlist GossipInterval is 200 ms;
    an idle member runs none, so a shorter round costs nothing idle and spreads a claim sooner).
    Rounds start on this grid of the shared (wall) clock and relayed news waits for the next one,
    so news moves one hop per round as in the epidemic model (:func:`gossip.timeouts.next_round`)."""
    fanout: int = 3
    """Members sent to per gossip round (memberlist GossipNodes)."""
    retransmit_mult: int = 4
    """Each broadcast is sent retransmit_mult * ceil(log10(N + 1)) times (memberlist RetransmitMult).
    Agents once ran 2: at 10% loss that let 7 false deaths through at N = 300 where 4 lets none
    (a refutation must outrun the suspicion timeout; push-pull comes too late for that)."""
    pushpull_interval: float = 10.0
    """Period of one anti-entropy exchange with one random member (memberlist PushPullInterval is 30 s;
    digests keep each exchange small, so it runs more often)."""
    full_state_pushpull: bool = False
    """Baseline mode: send every member and record each exchange, as memberlist does, instead of a digest."""
    count_full_state: bool = False
    """Benchmarks only: in digest mode, also count (``Counters.full_state_bytes_counted``) the bytes
    each exchange leg would have sent as a full-state frame at that moment, so one run yields both
    modes' bytes where running the baseline itself is too slow (N = 10,000 in Python)."""
    digest_error_rate: float = 0.01
    """Bloom digest false-positive rate; part of the digest's header, so peers need not agree in advance."""
    digest_salt_exchanges: int = 4
    """The digest's hash salt changes every this many push-pull intervals, so a false positive
    that hides an entry from one peer is redrawn independently later and cannot hide it forever."""
    rejoin_every: int = 4
    """Every this many push-pull rounds, contact a seed we do not see alive (heals partitions)."""
    reap_after: float = 60.0
    """Dead or left members, and their records, are forgotten this long after they died."""
    tombstone_ttl: float = 30.0
    """A withdrawn record's tombstone is forgotten this long (at most one push-pull interval more)
    after it arrived: by then broadcast and anti-entropy have carried it to every holder."""
    hearing: bool = False
    """Keep when each member was last heard from (a packet it sealed, or an ack for it relayed by another): evidence
    a dead member cannot produce, where its ALIVE row stays until a probe of it fails. The edge agent's federation
    pool turns it on for the control plane's verdicts; off by default: an entry per member heard, which each of
    10,000 simulated nodes would hold."""
    mtu: int = 1400
    """Largest UDP payload; anything larger goes over a stream."""
    max_stream_bytes: int = 16 * 1024 * 1024
    """Largest stream frame accepted; bigger frames are dropped as oversized."""
    max_digest_capacity: int = 1 << 20
    """Largest Bloom capacity accepted from a peer (bounds the work a digest can cause)."""

    def replace(self, **changes: object) -> GossipConfig:
        """A copy with some fields changed (drivers and benches tune one knob at a time)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.probe_timeout <= 0 or self.probe_interval < self.probe_timeout:
            raise ValueError("need 0 < probe_timeout <= probe_interval")
        if self.fanout < 1 or self.indirect_checks < 0 or self.awareness_max < 1:
            raise ValueError("fanout and awareness_max must be >= 1, indirect_checks >= 0")
        if not 0 < self.digest_error_rate < 0.5:
            raise ValueError("digest_error_rate must be in (0, 0.5)")
        if self.tombstone_ttl <= 0:
            raise ValueError("tombstone_ttl must be > 0")
        if self.mtu < 256:
            raise ValueError("mtu below 256 bytes leaves no room for piggybacked broadcasts")


def split_addr(addr: str) -> tuple[str, int]:
    """``host:port`` to a socket address; raises ValueError for anything else."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {addr!r}")
    if int(port) > 65535:
        raise ValueError(f"port {port} of {addr!r} is outside 0-65535")
    return host.strip("[]"), int(port)
