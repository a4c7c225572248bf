"""Agent-side class fit: online pods are judged on the escrow alone, batch pods may borrow reclaimed CPU."""

from __future__ import annotations

from edgeagent.classfit import Reclaimed
from fedcore.pods import Pod, QoS
from fedcore.resources import Resources

FREE = Resources(1000, 8192, 0, 0)


def test_online_is_never_placed_on_reclaimed_capacity() -> None:
    offer = Reclaimed(offered_milli=10_000)
    assert offer.fitted(Pod("on", 3000, 512, qos=QoS.LATENCY_SENSITIVE), FREE) is None
    assert offer.fitted(Pod("on", 800, 512, qos=QoS.LATENCY_SENSITIVE), FREE) is not None


def test_batch_borrows_what_the_escrow_lacks_and_gives_it_back() -> None:
    offer = Reclaimed(offered_milli=4000)
    pod = offer.fitted(Pod("b", 3000, 512, qos=QoS.BEST_EFFORT), FREE)
    assert pod is not None and pod.cpu_milli == 1000  # claimed in escrow: what is really reserved
    offer.take("b", 2000)
    assert offer.free() == 2000
    assert offer.fitted(Pod("b2", 4000, 512, qos=QoS.BEST_EFFORT), FREE) is None  # 3,000 lacking > 2,000 offered
    assert offer.fitted(Pod("b3", 1000, 9000, qos=QoS.BEST_EFFORT), FREE) is None  # memory is never reclaimed
    offer.keep({"other"})
    assert offer.free() == 4000
