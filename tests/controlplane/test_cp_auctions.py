"""The quota auction and the reclaim estimate: online outbids batch, one winner per pod, a bounded eviction rate."""

from __future__ import annotations

import pytest

from controlplane.auctions import Auction, Bid, BidError, Grant
from controlplane.reclaiming import NodeReclaim


def running(*pods: tuple[str, float], node: str = "n0", milli: int = 1000) -> list[Grant]:
    return [Grant(p, node, milli, price, milli) for p, price in pods]


def test_batch_fills_the_supply_in_bid_order_and_the_rest_waits() -> None:
    out = Auction().clear(0.0, {"n0": 2000}, [], [Bid("low", 1000, 0.1, ("n0",)), Bid("high", 1000, 0.9, ("n0",)),
                                                  Bid("mid", 1000, 0.5, ("n0",))])
    assert {g.pod for g in out.grants} == {"high", "mid"}
    assert out.unplaced == ("low",)
    assert out.quota("n0") == 2000


def test_online_demand_takes_capacity_back_lowest_bid_suppressed_then_evicted() -> None:
    auction = Auction(rate=1.0, burst=5, min_share=0.1)
    held = running(("a", 0.9), ("b", 0.5), ("c", 0.1))
    # online's forecast rose: batch supply 2,500m for 3,000m of batch -> suppression, no eviction (floors fit)
    out = auction.clear(0.0, {"n0": 2500}, held, [])
    assert out.evictions == ()
    by = {g.pod: g for g in out.grants}
    assert by["a"].cpu_milli == 1000 and by["b"].cpu_milli == 1000 and by["c"].cpu_milli == 500
    assert by["c"].suppressed and out.quota("n0") == 2500
    # supply below the floors: evict, lowest bid first, until the floors fit
    out = auction.clear(1.0, {"n0": 150}, held, [])
    assert [e.pod for e in out.evictions] == ["c", "b"]
    assert [(g.pod, g.cpu_milli) for g in out.grants] == [("a", 150)]


def test_evictions_are_rate_bound_on_the_injected_clock() -> None:
    auction = Auction(rate=1 / 60, burst=2)
    held = running(*((f"p{i}", i / 10) for i in range(6)))
    first = auction.clear(0.0, {"n0": 0}, held, [])
    assert len(first.evictions) == 2  # the burst
    left = [g for g in held if g.pod not in {e.pod for e in first.evictions}]
    assert auction.clear(30.0, {"n0": 0}, left, []).evictions == ()  # half a token
    again = auction.clear(60.0, {"n0": 0}, left, [])
    assert len(again.evictions) == 1
    assert {g.pod for g in again.grants} | {e.pod for e in again.evictions} == {g.pod for g in left}  # kept at floor


def test_suppress_only_never_evicts() -> None:
    out = Auction(evict=False).clear(0.0, {"n0": 0}, running(("a", 0.0), ("b", 0.0)), [])
    assert out.evictions == () and {g.cpu_milli for g in out.grants} == {100}


def test_a_pod_wins_on_one_node_and_a_running_pod_does_not_win_again() -> None:
    out = Auction().clear(0.0, {"n0": 5000, "n1": 3000}, running(("r", 0.5)), [Bid("x", 1000, 0.7, ("n0", "n1")), Bid("r", 1000, 0.9, ("n1",))])
    assert sorted(g.pod for g in out.grants) == ["r", "x"]
    assert [g.node for g in out.grants if g.pod == "x"] == ["n0"]  # the node with the most supply left
    assert [g.node for g in out.grants if g.pod == "r"] == ["n0"]


@pytest.mark.parametrize("bid", [
    dict(pod="", cpu_milli=1000, price=1.0, nodes=("n0",)), dict(pod="p", cpu_milli=0, price=1.0, nodes=("n0",)),
    dict(pod="p", cpu_milli=1, price=float("nan"), nodes=("n0",)), dict(pod="p", cpu_milli=1, price=-1.0, nodes=("n0",)),
    dict(pod="p", cpu_milli=1, price=1.0, nodes=()),
])
def test_bad_bids_are_clear_errors(bid: dict) -> None:
    with pytest.raises(BidError):
        Bid(**bid)


def test_unknown_nodes_and_negative_supply_are_clear_errors() -> None:
    with pytest.raises(BidError, match="unknown node"):
        Auction().clear(0.0, {"n0": 1}, [], [Bid("p", 1, 1.0, ("n9",))])
    with pytest.raises(BidError, match="negative"):
        Auction().clear(0.0, {"n0": -1}, [], [])


def test_reclaim_waits_for_calibration_then_offers_what_online_will_not_use() -> None:
    node = NodeReclaim.on(32_000, horizon=4, headroom_milli=1_000)
    node.observe(10_000)
    assert node.reclaimed(30_000) == 0 and node.batch_supply(30_000) == 1_000  # unrequested capacity only
    for i in range(200):
        node.observe(10_000 + (i % 5) * 100)
    peak = node.online_peak(30_000)
    assert 10_400 <= peak <= 11_000
    assert node.reclaimed(30_000) == 30_000 - peak
    assert node.batch_supply(30_000) == 32_000 - 1_000 - peak
    with pytest.raises(ValueError):
        node.observe(float("nan"))
