"""Which control-plane member an agent's link talks to: the leader, as far as the link has been told.

Replicated control planes serve the agents' link on every member, but only the leader holds the embedded twin
clusters; a standby answers every call with ``not the leader: <the leader's link address>`` (or ``not the leader,
and no leader is elected now``). An agent configured with one address or several (``a:7070,b:7070``) starts at the
first; a member that cannot be reached, that names no leader, or that holds no twin of the agent's cluster (an older
standby's NOT_FOUND) passes it to the next; a member that names the leader sends it there, and a leader named so is
remembered as a member, as is every member a report's ack lists (``AgentAck.members``): an agent told of one member
finds the others when that one dies. Sans-IO: the channel (:class:`fedapi.agentlink.LinkChannel`) asks, this answers.
"""

from __future__ import annotations

NOT_LEADER = "not the leader"
"""How a standby's refusal starts (gRPC's FAILED_PRECONDITION and the link's alike)."""
NO_TWIN = "no embedded twin cluster"
"""A member without the agent's twin cluster: a standby that predates the refusal above, or a leader still starting."""


def split(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` (``[v6]:port`` too); raises ValueError."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


def named_leader(code: str, details: str) -> str | None:
    """The link address a standby's refusal names (``""``: it knows of no leader); None when this is no such refusal."""
    if code != "FAILED_PRECONDITION" or not details.startswith(NOT_LEADER):
        return None
    rest = details[len(NOT_LEADER):]
    if not rest.startswith(":"):
        return ""
    words = rest[1:].split()
    if not words:
        return ""
    try:
        split(words[-1])
    except ValueError:
        return ""
    return words[-1]


class Members:
    """The members a link may use, in the order given, and the one it uses now."""

    def __init__(self, addresses: str) -> None:
        """``addresses``: one ``host:port`` or several, comma-separated; raises ValueError on a malformed one."""
        self.addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not self.addresses:
            raise ValueError(f"expected host:port, got {addresses!r}")
        for a in self.addresses:
            split(a)
        self.at = 0

    @property
    def current(self) -> str:
        return self.addresses[self.at]

    def next(self) -> None:
        """The current member cannot serve us: try the next one (round robin)."""
        self.at = (self.at + 1) % len(self.addresses)

    def learn(self, addresses: object) -> None:
        """Every member the plane says it has (a report's ack): unknown ones join the list, malformed ones are ignored."""
        if not isinstance(addresses, list):
            return
        for a in addresses:
            if isinstance(a, str) and a not in self.addresses:
                try:
                    split(a)
                except ValueError:
                    continue
                self.addresses.append(a)

    def follow(self, code: str, details: str) -> str | None:
        """Move on after an error answer: to the leader it names (returned), or to the next member when it names none,
        holds no twin of ours or did not answer in time (a cut host; ``""`` returned). None: stay."""
        leader = named_leader(code, details)
        if leader:
            if leader not in self.addresses:
                self.addresses.append(leader)
            self.at = self.addresses.index(leader)
            return leader
        others = len(self.addresses) > 1
        if leader == "" or (others and (code == "DEADLINE_EXCEEDED" or (code == "NOT_FOUND" and NO_TWIN in details))):
            self.next()
            return ""
        return None
