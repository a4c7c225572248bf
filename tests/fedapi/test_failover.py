"""A client of a replicated plane finds the leader: past a cut member (no answer: it moves on after its connect
deadline, not the call's), past a member whose call runs out of time, to the leader a standby names, never back to a
named leader that already failed, and through an election (members that know no leader are asked again)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from fedapi import controlplane_pb2 as cp, controlplane_pb2_grpc, failover
from fedcore.loopback import free_ports


class Member(controlplane_pb2_grpc.ControlPlaneServicer):
    def __init__(self, name: str, leads: bool = True, names: str = "", slow_s: float = 0.0, leads_after: int = 0) -> None:
        self.name, self.leads, self.names, self.slow_s, self.leads_after = name, leads, names, slow_s, leads_after
        self.calls = 0

    def GetLeader(self, request: cp.GetLeaderRequest, context: grpc.ServicerContext) -> cp.LeaderInfo:
        self.calls += 1
        time.sleep(self.slow_s)
        if self.leads or (self.leads_after and self.calls > self.leads_after):
            return cp.LeaderInfo(is_leader=True, member=self.name)
        context.set_trailing_metadata(((failover.LEADER_KEY, self.names),))
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      f"not the leader: send writes to {self.names}" if self.names else "not the leader, and no leader is elected now: retry shortly")
        raise AssertionError("unreachable")


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[grpc.Server] = []

    def start(member: Member) -> str:
        server = grpc.server(ThreadPoolExecutor(4))
        controlplane_pb2_grpc.add_ControlPlaneServicer_to_server(member, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(0)


@pytest.fixture
def cut() -> Iterator[str]:
    """A host that takes the TCP connection and never says a word (a cut link's half-open peer)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def ask(targets: list[str], timeout: float = 10.0) -> tuple[str, float]:
    started = time.monotonic()
    answer = failover.call(targets, "GetLeader", cp.GetLeaderRequest(), timeout)
    return answer.member, time.monotonic() - started


def test_a_cut_member_costs_its_connect_deadline_not_the_calls(serve, cut: str) -> None:  # type: ignore[no-untyped-def]
    leader = serve(Member("b"))
    standby = serve(Member("c", leads=False, names=leader))
    member, took = ask([cut, standby])
    assert member == "b" and took < failover.CONNECT_S + 2.0


def test_a_member_whose_call_runs_out_of_time_passes_it_on(serve) -> None:  # type: ignore[no-untyped-def]
    slow, leader = serve(Member("a", slow_s=2.0)), serve(Member("b"))
    member, took = ask([slow, leader], timeout=0.5)
    assert member == "b" and took < 2.0


def test_never_back_to_a_named_leader_that_failed(serve) -> None:  # type: ignore[no-untyped-def]
    (dead_port,) = free_ports(1)
    dead = f"127.0.0.1:{dead_port}"
    naming_dead = Member("c", leads=False, names=dead)
    leader = Member("b")
    member, _ = ask([dead, serve(naming_dead), serve(leader)])
    assert member == "b" and naming_dead.calls == 1 and leader.calls == 1


def test_an_election_in_progress_is_waited_out(serve) -> None:  # type: ignore[no-untyped-def]
    electing = Member("a", leads=False, leads_after=3)
    member, took = ask([serve(electing)])
    assert member == "a" and electing.calls == 4 and took >= 3 * failover.RETRY_S


def test_a_cut_member_is_asked_once_while_the_others_elect(serve, cut: str) -> None:  # type: ignore[no-untyped-def]
    electing = Member("b", leads=False, leads_after=3)
    member, took = ask([cut, serve(electing)])
    assert member == "b" and took < failover.CONNECT_S + 3 * failover.RETRY_S + 1.5  # not one connect deadline per round


def test_other_errors_decide_the_call(serve) -> None:  # type: ignore[no-untyped-def]
    class Refusing(Member):
        def GetLeader(self, request: cp.GetLeaderRequest, context: grpc.ServicerContext) -> cp.LeaderInfo:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "role viewer may not")
            raise AssertionError("unreachable")

    with pytest.raises(failover.Refused, match="PERMISSION_DENIED: role viewer may not"):
        ask([serve(Refusing("a")), serve(Member("b"))])
    (dead_port,) = free_ports(1)
    with pytest.raises(failover.NoLeader) as none:
        ask([f"127.0.0.1:{dead_port}"])
    assert "UNAVAILABLE" in none.value.tried[0]
