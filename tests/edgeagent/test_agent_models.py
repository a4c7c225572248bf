"""Models over the agents' link: the plane's shelf signs, the agent fetches what it lacks, verifies, caches, swaps."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from controlplane.auth import Authenticator
from controlplane.learninglink import LearningTwin
from federated.flower.shelf import ModelShelf
from controlplane.sqlitestore import SqliteStore
from edgeagent.modelfetching import ModelFetcher
from edgeagent.policy import CanaryScorer, ModelWatcher
from fedapi.agentlink import LinkChannel, LinkError
from fedapi.linkserver import LinkServer
from federated.runtime import modelbundles
from federated.runtime.modelbundles import BundleError

SHIPPED = Path(__file__).resolve().parents[2] / "federated" / "models" / "default"


def version(root: Path, name: str) -> Path:
    """A distinct registry version: the shipped artifact with its manifest's training note changed."""
    target = root / name
    shutil.copytree(SHIPPED, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["training"]["note"] = name
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def test_a_bundle_is_bound_to_its_signer_version_and_bytes(tmp_path: Path) -> None:
    seed, other = b"\x01" * 32, b"\x02" * 32
    bundle = modelbundles.pack(version(tmp_path, "v000001"))
    signed = modelbundles.sign(seed, "v000001", bundle)
    modelbundles.check(modelbundles.public_key(seed), signed, bundle)
    with pytest.raises(BundleError, match="bad signature"):
        modelbundles.check(modelbundles.public_key(other), signed, bundle)
    with pytest.raises(BundleError, match="bad signature"):  # a signed bundle replayed under a newer name
        modelbundles.check(modelbundles.public_key(seed), modelbundles.Signed("v000009", signed.sha256, signed.size, signed.signature), bundle)
    flipped = bytearray(bundle)
    flipped[-10] ^= 1
    with pytest.raises(BundleError, match="sha256"):
        modelbundles.check(modelbundles.public_key(seed), signed, bytes(flipped))
    with pytest.raises(BundleError, match="bytes"):
        modelbundles.check(modelbundles.public_key(seed), signed, bundle[:-1])
    with pytest.raises(BundleError, match="not a model bundle"):
        modelbundles.unpack(b"\xc1garbage", tmp_path / "out")
    modelbundles.unpack(bundle, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(modelbundles.FILES)


class Link:
    """A plane's link serving ``shelf`` and a channel to it, for one test."""

    def __init__(self, shelf: ModelShelf, gate: Any = None, token: str = "") -> None:
        self.server = LinkServer(LearningTwin(None, shelf=shelf), gate=gate)  # type: ignore[arg-type]
        self.token = token

    async def __aenter__(self) -> LinkChannel:
        port = await self.server.start()
        self.channel = LinkChannel(f"127.0.0.1:{port}", token=self.token)
        return self.channel

    async def __aexit__(self, *_: object) -> None:
        await self.channel.close()
        await self.server.stop()


def fetcher(channel: LinkChannel, models: Path, node: str = "n0", signer: str = "") -> ModelFetcher:
    return ModelFetcher(lambda method, request: channel.call(method, request, 5.0), "c0", node, models, signer)


def test_agents_fetch_only_what_changed_verify_and_swap(tmp_path: Path) -> None:
    registry, models = tmp_path / "registry", tmp_path / "agent" / "models"
    shelf = ModelShelf(tmp_path / "plane")
    v1, v2, v3 = (version(registry, f"v00000{i}") for i in (1, 2, 3))

    async def scenario() -> None:
        async with Link(shelf) as channel:
            agent = fetcher(channel, models)
            watcher = ModelWatcher(models)
            assert not await agent.sync()  # nothing promoted yet: nothing fetched
            shelf.promote(v1)
            assert await agent.sync()
            assert watcher.scan() is not None and watcher.current == "v000001"
            once = agent.fetched_bytes
            assert once == shelf.signed("v000001").size  # type: ignore[union-attr]
            assert not await agent.sync() and agent.fetched_bytes == once  # once per agent
            shelf.start_canary(v2, 0.25, ["c0/n0"])
            assert await agent.sync()
            assert isinstance(watcher.scan(), CanaryScorer)
            other = fetcher(channel, tmp_path / "other" / "models", node="n1")
            assert await other.sync() and not (tmp_path / "other" / "models" / "canary").exists()  # not a canary node
            shelf.promote(v2)  # the trial ends in a promotion
            assert await agent.sync()
            assert not (models / "canary").exists()
            assert watcher.scan() is not None and watcher.current == "v000002"
            shelf.promote(v3)
            assert await agent.sync()
            assert sorted(p.name for p in models.iterdir() if p.is_dir()) == ["v000002", "v000003"]  # bounded: current + previous

    asyncio.run(scenario())


def test_a_tampered_or_foreign_model_is_refused_once_and_the_old_one_stays(tmp_path: Path) -> None:
    registry, models = tmp_path / "registry", tmp_path / "agent" / "models"
    shelf = ModelShelf(tmp_path / "plane")
    v1, v2 = version(registry, "v000001"), version(registry, "v000002")

    async def scenario() -> None:
        async with Link(shelf) as channel:
            agent = fetcher(channel, models)
            watcher = ModelWatcher(models)
            shelf.promote(v1)
            assert await agent.sync() and watcher.scan() is not None
            signed = shelf.promote(v2)
            bundle = tmp_path / "plane" / "bundles" / "v000002.bundle"
            data = bytearray(bundle.read_bytes())
            data[len(data) // 2] ^= 0xFF
            bundle.write_bytes(bytes(data))  # tampered on the plane's disk (or on the way)
            assert not await agent.sync()
            assert agent.refused == 1 and not (models / "v000002").exists()
            fetched = agent.fetched_bytes
            assert not await agent.sync() and agent.fetched_bytes == fetched  # refused once, never downloaded again
            assert watcher.scan() is None and watcher.current == "v000001"  # the old model keeps scoring
            assert signed.version == "v000002"
        impostor = ModelShelf(tmp_path / "impostor")
        impostor.promote(v2)
        async with Link(impostor) as channel:
            pinned = fetcher(channel, models)  # pinned the first plane's key on its first fetch (models/signer)
            assert not await pinned.sync() and not (models / "v000002").exists()

    asyncio.run(scenario())


def test_the_link_serves_models_to_agents_of_their_own_cluster_only(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "auth.db"))
    auth = Authenticator(store)
    token = auth.issue("agent", "c1", "n0")
    shelf = ModelShelf(tmp_path / "plane")
    shelf.promote(version(tmp_path / "registry", "v000001"))

    async def scenario() -> None:
        async with Link(shelf, auth, token) as channel:
            with pytest.raises(LinkError, match="PERMISSION_DENIED"):
                await fetcher(channel, tmp_path / "models").sync()  # its credential is for c1, it asks as c0
            reply = await channel.call("FetchModel", {"cluster": "c1", "node": "n0", "want": "v000009", "offset": 0}, 5.0)
        raise AssertionError(f"an unoffered version was served: {reply}")

    with pytest.raises(LinkError, match="NOT_FOUND"):
        asyncio.run(scenario())


def test_the_plane_keeps_its_key_and_assignment_across_restarts(tmp_path: Path) -> None:
    shelf = ModelShelf(tmp_path / "plane")
    shelf.start_canary(version(tmp_path / "registry", "v000001"), 0.5)
    again = ModelShelf(tmp_path / "plane")
    assert again.signer == shelf.signer
    assert again.offer("c0", "n0").canary == shelf.signed("v000001")
    assert (tmp_path / "plane" / "signing.key").stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="weight"):
        again.start_canary(tmp_path / "registry" / "v000001", 1.5)


def test_a_decision_taken_beside_the_plane_reaches_its_offers(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    plane = ModelShelf(tmp_path / "plane")  # the running plane's
    v1, v2 = version(tmp_path / "registry", "v000001"), version(tmp_path / "registry", "v000002")
    models = ["--models", str(tmp_path / "plane")]
    done = CliRunner().invoke(main, ["controlplane", "models", "promote", str(v1), *models, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["current"] == "v000001" and json.loads(done.output)["signer"] == plane.signer.hex()
    assert plane.offer("c0", "n0").current == plane.signed("v000001")
    done = CliRunner().invoke(main, ["controlplane", "models", "canary", str(v2), *models, "--weight", "0.3", "--node", "c0/n1"])
    assert done.exit_code == 0, done.output
    assert plane.offer("c0", "n0").canary is None and plane.offer("c0", "n1").weight == 0.3
    assert CliRunner().invoke(main, ["controlplane", "models", "end-canary", *models]).exit_code == 0
    assert plane.offer("c0", "n1").canary is None
    broken = version(tmp_path / "registry", "v000003")
    (broken / "model.int8.onnx").write_bytes(b"broken")
    refused = CliRunner().invoke(main, ["controlplane", "models", "promote", str(broken), *models])
    assert refused.exit_code == 2 and "cannot promote" in refused.output and "Traceback" not in refused.output


def test_every_change_of_what_agents_run_is_one_decision(tmp_path: Path) -> None:
    from controlplane.learninglink import recorder
    from controlplane.registry import DecisionRecord

    class Plane:
        recorded: list[DecisionRecord] = []

        def clock(self) -> float:
            return 1.0

        def _record(self, d: DecisionRecord) -> None:
            self.recorded.append(d)

    plane = Plane()
    shelf = ModelShelf(tmp_path / "plane", recorder(plane))  # type: ignore[arg-type]
    companion = ModelShelf(tmp_path / "plane")  # the rounds, beside the plane
    v1, v2, v3 = (version(tmp_path / "registry", f"v00000{i}") for i in (1, 2, 3))
    shelf.promote(v1)
    companion.start_canary(v2, 0.2, ["c0/n0"])
    shelf.offer("c0", "n0")  # the plane notices the companion's decision when an agent asks
    companion.promote(v2)
    shelf.offer("c0", "n0")
    companion.start_canary(v3, 0.2)
    companion.end_canary()
    shelf.offer("c0", "n0")
    shelf.offer("c0", "n0")
    assert [(d.kind, d.target) for d in plane.recorded] == [
        ("model-promote", "v000001"), ("model-canary", "v000002"), ("model-promote", "v000002"), ("model-canary-end", "v000002")]
    assert plane.recorded[-1].reasons == ("trial of v000002 ended: promoted",)


def test_the_loop_decides_through_the_plane_shelf_as_through_agents_directories(tmp_path: Path) -> None:
    from federated.flower import rollout
    from federated.flower.loopconfig import Agent

    fleet = [Agent(f"n{i}", "region-0", str(tmp_path / f"m{i}"), str(tmp_path / f"d{i}"), 0) for i in range(3)]
    v1, v2 = version(tmp_path / "registry", "v000001"), version(tmp_path / "registry", "v000002")
    deliver = rollout.make(tmp_path / "plane")
    assert isinstance(deliver, rollout.Signed) and isinstance(rollout.make(None), rollout.Files)
    plane = ModelShelf(tmp_path / "plane")  # the plane's, in another process
    deliver.start(fleet, v1)
    deliver.canary(fleet[:1], v2, 0.2)
    assert plane.offer("region-0", "n0").canary is not None and plane.offer("region-0", "n1").canary is None
    deliver.roll_back(fleet[:1])
    assert plane.offer("region-0", "n0").canary is None and plane.assignment.current == "v000001"
    deliver.canary(fleet[:1], v2, 0.2)
    deliver.promote(fleet, fleet[:1], v2)
    assert plane.assignment == type(plane.assignment)(current="v000002")
