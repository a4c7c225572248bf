"""Models over the agents' link: ask the plane what this node should run, download only what is missing, verify, cache.

Each poll is one ``FetchModel`` call (a few hundred bytes each way). A version the models directory lacks is
downloaded in chunks, checked against the plane's signature and sha256 (:mod:`federated.runtime.modelbundles`)
and unpacked into the models directory, where :class:`edgeagent.policy.ModelWatcher` swaps it in as if it had
been copied there; a canary goes into the ``canary`` subdirectory with its weight. A bundle that fails its
checks is remembered (by version and digest) and never fetched again, so a bad model costs one download, and the
model already loaded keeps scoring. When the plane's current model is older than versions on disk (a rollback),
the newer ones are removed, and old versions beyond :data:`KEEP` are pruned: the directory stays bounded.

Which key signs: ``models.signer`` (hex) pins the plane's public key; without it the first key the plane shows
over the authenticated link is pinned in ``<models>/signer`` and any other key is refused afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from fedapi.agentlink import Wire
from federated.runtime import modelbundles
from federated.runtime.canary import DIRECTORY as CANARY_DIR
from federated.runtime.canary import WEIGHT as CANARY_WEIGHT
from federated.runtime.modelbundles import BundleError, Signed

log = logging.getLogger("edgeagent.models")

SIGNER = "signer"
"""The pinned public key's file in the models directory (hex)."""
KEEP = 2
"""Versions kept on disk: the current one and the one before it (the watcher falls back to it if the current breaks)."""

Call = Callable[[str, Wire], Awaitable[Wire]]
"""One unary call on the agents' link (method, request) -> reply."""


class ModelFetcher:
    """Keeps ``directory`` holding what the plane offers this node; call :meth:`sync` periodically."""

    def __init__(self, call: Call, cluster: str, node: str, directory: Path, signer: str = "") -> None:
        self.call, self.cluster, self.node, self.directory = call, cluster, node, directory
        self.pinned = bytes.fromhex(signer) if signer else None
        """The plane's public key; None until the first offer when not configured."""
        self.fetched_bytes = 0
        self.refused = 0
        self._refused: set[tuple[str, str]] = set()

    async def sync(self) -> bool:
        """One poll; True when the models directory changed (the watcher should scan now). Link errors propagate as
        :class:`LinkError`; a model that fails verification is logged and skipped."""
        offer = await self.call("FetchModel", {"cluster": self.cluster, "node": self.node, "want": "", "offset": 0})
        current, canary = _signed(offer.get("current")), _signed(offer.get("canary"))
        if current is None and canary is None:
            return False
        signer = self._signer(offer.get("signer"))
        if signer is None:
            return False
        changed = False
        if current is not None and not (self.directory / current.version).is_dir():
            changed = await self._install(signer, current, self.directory / current.version)
        if current is not None and (self.directory / current.version).is_dir():
            changed = self._prune(current.version) or changed
        weight = offer.get("canary_weight")
        return await self._trial(signer, canary, weight if isinstance(weight, float) else 0.0) or changed

    def _signer(self, shown: object) -> bytes | None:
        """The key models must be signed with; None (nothing is loaded) when the plane shows another one than we pinned."""
        if self.pinned is None:
            pin = self.directory / SIGNER
            try:
                self.pinned = bytes.fromhex(pin.read_text().strip())
            except (OSError, ValueError):
                if not isinstance(shown, bytes) or len(shown) != modelbundles.PUBLIC_KEY_BYTES:
                    return None
                self.directory.mkdir(parents=True, exist_ok=True)
                pin.write_text(shown.hex() + "\n")
                self.pinned = shown
                log.info("pinned the plane's model signing key %s", shown.hex()[:16])
        if shown != self.pinned:
            log.warning("the plane shows model signing key %s, this agent trusts %s: no model is fetched",
                        shown.hex()[:16] if isinstance(shown, bytes) else "none", self.pinned.hex()[:16])
            return None
        return self.pinned

    async def _install(self, signer: bytes, model: Signed, target: Path) -> bool:
        """Download, check and unpack ``model`` into ``target``; False (logged) when it fails its checks."""
        if (model.version, model.sha256) in self._refused:
            return False
        if model.size > modelbundles.MAX_BUNDLE:
            return self._refuse(model, f"{model.size} bytes is over the {modelbundles.MAX_BUNDLE}-byte limit")
        bundle = await self._download(model)
        try:
            modelbundles.check(signer, model, bundle)
            target.parent.mkdir(parents=True, exist_ok=True)
            modelbundles.unpack(bundle, target)
        except BundleError as exc:
            return self._refuse(model, str(exc))
        log.info("model %s fetched from the plane (%d bytes, signature and sha256 verified)", model.version, len(bundle))
        return True

    async def _download(self, model: Signed) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < model.size:
            reply = await self.call("FetchModel", {"cluster": self.cluster, "node": self.node, "want": model.version, "offset": got})
            chunk = reply.get("chunk")
            if not isinstance(chunk, bytes) or not chunk:
                break  # short: the check below says so
            parts.append(chunk)
            got += len(chunk)
            self.fetched_bytes += len(chunk)
        return b"".join(parts)

    def _refuse(self, model: Signed, why: str) -> bool:
        self.refused += 1
        self._refused.add((model.version, model.sha256))
        log.warning("model %s refused, keeping the model this agent runs: %s", model.version, why)
        return False

    async def _trial(self, signer: bytes, canary: Signed | None, weight: float) -> bool:
        """Make the canary subdirectory hold ``canary`` at ``weight`` (or nothing); True when it changed."""
        trial = self.directory / CANARY_DIR
        if canary is None or not 0 < weight <= 1:
            if not trial.exists():
                return False
            _remove(trial)
            return True
        try:
            same = (trial / canary.version).is_dir() and float((trial / CANARY_WEIGHT).read_text()) == weight
        except (OSError, ValueError):
            same = False
        if same:
            return False
        staging = self.directory / f".incoming-{CANARY_DIR}"
        _remove(staging)
        if not await self._install(signer, canary, staging / canary.version):
            _remove(staging)
            return False
        (staging / CANARY_WEIGHT).write_text(f"{weight}\n")
        _remove(trial)
        os.replace(staging, trial)
        return True

    def _prune(self, current: str) -> bool:
        """Drop versions newer than ``current`` (rolled back) and all but :data:`KEEP` up to it; True when any went."""
        versions = sorted(d.name for d in self.directory.iterdir() if d.is_dir() and not d.name.startswith(".") and d.name != CANARY_DIR)
        newer = [v for v in versions if v > current]
        older = [v for v in versions if v < current]
        stale = older[: max(0, len(older) - (KEEP - 1))]
        for name in newer + stale:
            _remove(self.directory / name)
        return bool(newer or stale)


def _signed(wire: object) -> Signed | None:
    """A SignedModel map from the link (None: empty or malformed)."""
    if not isinstance(wire, dict) or not wire.get("version"):
        return None
    version, digest, size, signature = (wire.get(k) for k in ("version", "sha256", "size", "signature"))
    if not (isinstance(version, str) and isinstance(digest, str) and isinstance(size, int) and isinstance(signature, bytes)):
        return None
    if "/" in version or version.startswith(".") or version == CANARY_DIR:
        return None  # a version names a directory under ours, nothing else
    return Signed(version, digest, size, signature)


def _remove(path: Path) -> None:
    """Take ``path`` out of the directory in one rename, then delete it (the watcher never sees half of it)."""
    if not path.exists():
        return
    trash = path.with_name(f".removed-{path.name}-{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)

