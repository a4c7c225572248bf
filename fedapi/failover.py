"""One call to a replicated control plane: find the member that leads and ask it.

Members are tried in the order given. One that cannot be reached within :data:`CONNECT_S` (a dead host refuses at
once, a cut one never answers) or whose call runs out of time passes the call to the next; a standby's answer
"not the leader" (FAILED_PRECONDITION with the leader's address in the ``fedplane-leader`` trailing metadata) sends
it to the leader it names, unless that member already failed us in this round: a member names the leader only while
it sees the leader's lease refreshed, but a leader can die between that and our call. While the members answer
that no leader is elected (a take-over in progress, ~5 s after a leader's death), the round is tried again, for up
to :data:`ELECTION_WAIT_S`, without the members that did not answer in an earlier round (unless none is left). Every
other error is the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from fedapi import client
from fedapi.tls import TlsFiles

LEADER_KEY = "fedplane-leader"
CONNECT_S = 2.0
"""Seconds a member may take to accept the connection before the next one is tried."""
ELECTION_WAIT_S = 15.0
"""Seconds to keep asking while members answer that no leader is elected (the election's TTL and a take-over)."""
RETRY_S = 0.3
PASS_ON = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Refused(Exception):
    """A member's error answer, which decides the call (bad input, unknown names, a credential refused...)."""

    def __init__(self, member: str, error: grpc.RpcError) -> None:
        super().__init__(f"{member}: {error.code().name}: {error.details()}")
        self.member, self.code, self.details = member, error.code(), error.details()


class NoLeader(Exception):
    """No member answered as the leader; ``tried`` says what each one answered."""

    def __init__(self, tried: list[str]) -> None:
        super().__init__("; ".join(tried))
        self.tried = tried


def call(targets: Sequence[str], method: str, request: Any, timeout: float, tls: TlsFiles | None = None, token: str = "",
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Any:
    """``method``'s answer from the leader among ``targets``; raises :class:`Refused` or :class:`NoLeader`."""
    deadline = clock() + ELECTION_WAIT_S
    tried: list[str] = []
    members = list(dict.fromkeys(targets))
    gone: set[str] = set()
    """Members that did not answer: later rounds ask the others (a cut one would cost its connect deadline each round)."""
    while True:
        electing = False
        failed: set[str] = set()
        queue = [m for m in members if m not in gone] or members
        while queue:
            here = queue.pop(0)
            try:
                return _ask(here, method, request, timeout, tls, token)
            except grpc.RpcError as exc:
                code = exc.code()
                if code in PASS_ON:
                    failed.add(here)
                    tried.append(f"{here}: {code.name}: {exc.details()}")
                    continue
                if code is not grpc.StatusCode.FAILED_PRECONDITION or not (exc.details() or "").startswith("not the leader"):
                    raise Refused(here, exc) from None
                tried.append(f"{here}: {exc.details()}")
                leader = dict(exc.trailing_metadata() or ()).get(LEADER_KEY, "")  # type: ignore[attr-defined]
                electing = True
                if leader and leader not in failed and leader != here:
                    queue = [leader, *(q for q in queue if q != leader)]
        if not electing or clock() >= deadline:
            raise NoLeader(tried)
        gone |= failed
        sleep(RETRY_S)


def _ask(target: str, method: str, request: Any, timeout: float, tls: TlsFiles | None, token: str) -> Any:
    conn = client.connect(target, tls, token)
    try:
        try:
            grpc.channel_ready_future(conn.channel).result(timeout=CONNECT_S)
        except grpc.FutureTimeoutError:
            raise _Unreachable(target) from None
        return getattr(conn.control, method)(request, timeout=timeout)
    finally:
        conn.close()


class _Unreachable(grpc.RpcError):  # type: ignore[misc]
    """A member that did not accept the connection in time, shaped as the RpcError a call would raise."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return f"no connection within {CONNECT_S:g}s"

    def trailing_metadata(self) -> tuple[()]:
        return ()
