"""Experience over the agents' link: shipped compressed, acknowledged, each row counted once whichever side restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controlplane.experienceinbox import ExperienceInbox
from controlplane.learninglink import LearningTwin
from edgeagent.experienceshipping import ExperienceShipper
from fedapi.agentlink import LinkChannel, LinkError, Wire
from fedapi.linkserver import LinkServer
from federated.runtime import experience
from federated.runtime.experience import ExperienceLog, Row
from federated.runtime.features import NODE_FEATURES, POD_FEATURES


def rows(start: int, count: int) -> list[Row]:
    rng = np.random.default_rng(start)
    return [Row(float(i), f"p{i}", "m1", 50.0, rng.random(len(POD_FEATURES), np.float32), rng.random(len(NODE_FEATURES), np.float32),
                "bound", 0.1, 0.5, 2000.0, 1000.0) for i in range(start, start + count)]


def held(inbox: ExperienceInbox) -> list[str]:
    return [r.pod for r in inbox.rows("c0", "n0")]


class Plane:
    """A link serving an inbox in ``directory`` (a new one per ``async with``: a restarted plane)."""

    def __init__(self, directory: Path, max_bytes: int = 1 << 20) -> None:
        self.directory, self.max_bytes = directory, max_bytes

    async def __aenter__(self) -> Plane:
        self.inbox = ExperienceInbox(self.directory, self.max_bytes)
        self.server = LinkServer(LearningTwin(None, inbox=self.inbox))  # type: ignore[arg-type]
        self.channel = LinkChannel(f"127.0.0.1:{await self.server.start()}")
        return self

    async def call(self, method: str, request: Wire) -> Wire:
        return await self.channel.call(method, request, 5.0)

    async def __aexit__(self, *_: object) -> None:
        await self.channel.close()
        await self.server.stop()
        self.inbox.close()


def test_rows_arrive_once_across_restarts_of_either_side_and_lost_answers(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    written = ExperienceLog(agent, 1 << 20)

    async def scenario() -> None:
        async with Plane(tmp_path / "plane") as plane:
            written.write(rows(0, 40))
            written.write(rows(40, 40))
            written.flush()
            shipper = ExperienceShipper(plane.call, "c0", "n0", agent)
            assert await shipper.ship() == 2
            assert held(plane.inbox) == [f"p{i}" for i in range(80)]
            per_row = shipper.shipped_bytes / 80
            assert await ExperienceShipper(plane.call, "c0", "n0", agent).ship() == 0  # a restarted agent: nothing twice

            async def answer_lost(method: str, request: Wire) -> Wire:
                await plane.call(method, request)
                raise LinkError("UNAVAILABLE", "connection lost before the answer")

            written.write(rows(80, 10))
            written.flush()
            with pytest.raises(LinkError):
                await ExperienceShipper(answer_lost, "c0", "n0", agent).ship()  # the plane kept it, the agent does not know
            assert await ExperienceShipper(plane.call, "c0", "n0", agent).ship() == 1  # sent again, skipped by the plane
            assert held(plane.inbox) == [f"p{i}" for i in range(90)]
        async with Plane(tmp_path / "plane") as plane:  # the plane restarted: its numbers come back with its rows
            written.write(rows(90, 10))
            written.flush()
            assert await ExperienceShipper(plane.call, "c0", "n0", agent).ship() == 1
            assert held(plane.inbox) == [f"p{i}" for i in range(100)]
        assert per_row < 300, f"{per_row:.0f} compressed bytes a row"
        assert [r.pod for r in experience.newest([tmp_path / "plane" / "c0" / "n0"], 30)] == [f"p{i}" for i in range(70, 100)]  # as a trainer reads

    asyncio.run(scenario())


def test_while_the_plane_is_away_rows_wait_bounded_and_the_oldest_go_first(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    written = ExperienceLog(agent, 16 * 1024)  # rotates every ~40 rows: one older file kept
    for start in range(0, 400, 20):
        written.write(rows(start, 20))
    written.flush()
    on_disk = sum(p.stat().st_size for p in agent.glob("experience*.log"))
    assert on_disk <= 2 * (16 * 1024 + 20 * 400)

    async def scenario() -> list[str]:
        async with Plane(tmp_path / "plane") as plane:
            shipper = ExperienceShipper(plane.call, "c0", "n0", agent)
            await shipper.ship()
            written.write(rows(400, 20))
            written.flush()
            await shipper.ship()
            return held(plane.inbox)

    got = asyncio.run(scenario())
    assert len(got) == len(set(got)) and got == sorted(got, key=lambda p: int(p[1:]))  # once each, in order
    assert got[-1] == "p419" and "p0" not in got


def test_the_plane_refuses_a_shipment_that_is_not_one(tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with Plane(tmp_path / "plane") as plane:
            await plane.call("ShipExperience", {"cluster": "c0", "node": "n0", "first_seq": 0, "frames": 1, "body": b"junk"})

    with pytest.raises(LinkError, match="INVALID_ARGUMENT.*not an experience shipment"):
        asyncio.run(scenario())
