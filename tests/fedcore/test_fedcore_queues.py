"""Queue orders (QueueSort plugins): which waiting pod the room a departure frees goes to."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling import queues
from fedcore.scheduling.framework import OldestFirst, Waiting
from fedcore.traces.dlrm import Instance
from fedcore.twin.pending import PendingQueue
from fedcore.twin.replay import Replay


def waiting(cpu: list[int], mem: list[int], waited: list[float], gpus: list[int] | None = None) -> Waiting:
    n = len(cpu)
    return Waiting(np.array(cpu), np.array(mem), np.array(gpus or [0] * n), np.zeros(n, dtype=np.int64), np.array(waited, dtype=float))


def test_features_read_the_pod_against_the_node_room_as_it_is_now() -> None:
    table = NodeTable([Node("a", 8000, 16384)])
    table.allocate(Pod("busy", 4000, 8192), 0)
    x = queues.queue_features(waiting([4000, 1000], [2048, 8192], [3600.0, 0.0], [1, 0]), table, 0)
    names = dict(zip(queues.QUEUE_FEATURES, x))
    assert names["cpu_fill"].tolist() == [1.0, 0.25] and names["mem_fill"].tolist() == [0.25, 1.0]
    assert names["waited_log_h"] == pytest.approx([np.log(2.0), 0.0])
    assert names["gpu"].tolist() == [1.0, 0.0] and names["fills"].tolist() == [1.0, 1.0]
    assert names["big_waited"] == pytest.approx(names["cpu_per_96"] * names["waited_log_h"])


def test_named_orders_are_fixed_points_of_the_linear_form() -> None:
    table = NodeTable([Node("a", 8000, 16384)])
    w = waiting([4000, 1000, 2000], [4096, 1024, 2048], [10.0, 20.0, 30.0])
    assert np.argsort(-queues.named("smallest-first").priority(w, table, 0), kind="stable").tolist() == [1, 2, 0]
    assert np.argsort(-queues.named("youngest-first").priority(w, table, 0), kind="stable").tolist() == [0, 1, 2]
    assert not OldestFirst().priority(w, table, 0).any()
    with pytest.raises(queues.UnknownQueueError, match="choose from"):
        queues.named("fastest-first")
    with pytest.raises(ValueError, match="unknown feature"):
        queues.LinearQueue.of("x", {"colour": 1.0})
    with pytest.raises(ValueError, match="weights for"):
        queues.LinearQueue("x", (1.0,))
    assert queues.LinearQueue.of("x", {"gpu": 2.0}).as_dict()["gpu"] == 2.0


def test_a_learned_order_ranks_only_pods_that_waited_long_enough_the_young_keep_arrival_order_behind() -> None:
    table = NodeTable([Node("a", 8000, 16384)])
    order = queues.LinearQueue.learned({"cpu_fill": -1.0})  # smallest first, among the pods it ranks
    after = queues.LEARNED_AFTER_S
    old_big, old_small, young_small, young_tiny = after + 30.0, after + 20.0, after - 1.0, 0.5
    w = waiting([4000, 1000, 500, 250], [1024] * 4, [old_big, old_small, young_small, young_tiny])
    assert np.argsort(-order.priority(w, table, 0), kind="stable").tolist() == [1, 0, 2, 3]
    young = waiting([4000, 250], [1024] * 2, [after - 1.0, 0.0])
    assert not order.priority(young, table, 0).any()  # none ranked: arrival order
    assert order.as_dict() == queues.LinearQueue.learned((-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)).as_dict()


def test_pending_queue_orders_the_pods_that_fit_by_priority_ties_oldest_first() -> None:
    table = NodeTable([Node("a", 8000, 16384)])
    pending = PendingQueue()
    for ref, (cpu, at) in enumerate([(4000, 0.0), (1000, 5.0), (1000, 6.0), (9000, 1.0)]):
        pending.add(ref, Pod(f"p{ref}", cpu, 1024), at)
    assert pending.fitting(table, 0) == [0, 1, 2]  # 3 does not fit; oldest first
    assert pending.fitting(table, 0, OldestFirst(), now=10.0) == [0, 1, 2]
    assert pending.fitting(table, 0, queues.SMALLEST_FIRST, now=10.0) == [1, 2, 0]  # equal sizes keep the oldest first


def test_a_replay_gives_freed_room_in_the_profile_queue_order() -> None:
    """One node; a big pod leaves at 100; a 6-core pod waiting since 10 and two 3-core pods since 20 and 30 want its room."""
    instances = [
        Instance(Pod("runner", 8000, 1024), 0.0, 100.0),
        Instance(Pod("big", 6000, 1024), 10.0, None),
        Instance(Pod("s1", 3000, 1024), 20.0, None),
        Instance(Pod("s2", 3000, 1024), 30.0, None),
    ]
    nodes = [Node("a", 8000, 16384)]
    oldest = Replay(nodes, instances, "bestfit")
    oldest.run()
    assert 1 in oldest.placed and 2 not in oldest.placed and 3 not in oldest.placed
    small = Replay(nodes, instances, "bestfit")
    small.scheduler.profile.queue = queues.SMALLEST_FIRST
    small.run()
    assert 2 in small.placed and 3 in small.placed and 1 not in small.placed
