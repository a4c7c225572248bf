"""After a long outage of its back end the agent still tries again every couple of seconds: a host partition that
heals after 20 s must not find the pod watch asleep for 10 s (an old copy would keep running that long unfenced)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from edgeagent import clustercalls
from edgeagent.clustercalls import RECONNECT_MAX, ClusterCalls
from edgeagent.clusters import ClusterUnavailable
from edgeagent.config import BackendSection


class Unreachable:
    """A back end whose watch fails every time (a cut link)."""

    async def watch(self) -> AsyncIterator[object]:
        raise ClusterUnavailable("connection timed out")
        yield  # pragma: no cover (an async generator)


def waits(monkeypatch: pytest.MonkeyPatch, calls: ClusterCalls, attempts: int) -> list[float]:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        if len(slept) >= attempts:
            raise asyncio.CancelledError

    monkeypatch.setattr(clustercalls.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(calls.watch())
    return slept


def test_the_watch_retries_a_cut_back_end_at_most_reconnect_max_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = ClusterCalls(Unreachable(), BackendSection(), lambda: None, lambda effects: None)  # type: ignore[arg-type, return-value]
    slept = waits(monkeypatch, calls, 12)
    assert slept[0] < 0.2 and slept[1] > slept[0]  # backs off from a fast first retry
    assert max(slept) <= RECONNECT_MAX * 1.2  # never the old 10 s, whatever the outage's length
    assert calls.error is not None and "connection timed out" in calls.error


def test_a_fleet_paced_slower_reconnects_no_faster_than_its_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = ClusterCalls(Unreachable(), BackendSection(), lambda: None, lambda effects: None)  # type: ignore[arg-type, return-value]
    calls.reconnect_max = 10.0  # the plane asked 10,000 agents to report every 10 s
    slept = waits(monkeypatch, calls, 12)
    assert max(slept) > RECONNECT_MAX * 1.2
