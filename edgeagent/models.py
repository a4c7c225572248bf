"""Hot-swap of policy versions: watch the models directory, verify, load, keep the old one on failure.

Layout, one directory per version (the name sorts by version, e.g. ``v0007``)::

    models/v0007/model.onnx
    models/v0007/manifest.json   {"version": "v0007", "feature_spec": "edge-v1", "sha256": "<hex of model.onnx>"}

A version is used only if its manifest names our feature spec, the file's sha256
matches and a test inference gives a finite score. A version that fails is
remembered (by name and modification time) and not retried until it changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

from edgeagent.onnxpolicy import ModelError, OnnxScorer
from edgeagent.scoring import FEATURE_SPEC

log = logging.getLogger("edgeagent.models")

MODEL_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def verify(directory: Path) -> str:
    """Check a version directory's manifest and checksum; returns its version, raises ModelError."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
        data = (directory / MODEL_FILE).read_bytes()
    except (OSError, ValueError) as exc:
        raise ModelError(f"{directory}: unreadable model or manifest: {exc}") from exc
    if not isinstance(manifest, dict):
        raise ModelError(f"{directory}: manifest is not a JSON object")
    if manifest.get("feature_spec") != FEATURE_SPEC:
        raise ModelError(f"{directory}: feature spec {manifest.get('feature_spec')!r}, this agent needs {FEATURE_SPEC!r}")
    if manifest.get("sha256") != hashlib.sha256(data).hexdigest():
        raise ModelError(f"{directory}: sha256 does not match {MODEL_FILE}")
    return str(manifest.get("version") or directory.name)


class ModelWatcher:
    """Finds the newest usable version; call :meth:`scan` periodically."""

    def __init__(self, directory: Path, threads: int = 1) -> None:
        self.directory = directory
        self.threads = threads
        self.current: str | None = None
        self.failures = 0
        self._failed: dict[str, float] = {}

    def scan(self) -> OnnxScorer | None:
        """A newly loaded scorer when a newer verified version appeared, else None."""
        try:
            versions = sorted((d for d in self.directory.iterdir() if d.is_dir()), key=lambda d: _natural(d.name))
        except OSError:
            return None
        for candidate in reversed(versions):
            if candidate.name == self.current:
                return None
            try:
                stamp = (candidate / MODEL_FILE).stat().st_mtime
            except OSError:
                stamp = -1.0
            if self._failed.get(candidate.name) == stamp:
                continue
            try:
                scorer = OnnxScorer(candidate / MODEL_FILE, verify(candidate), self.threads)
            except ModelError as exc:
                self.failures += 1
                self._failed[candidate.name] = stamp
                log.warning("model %s refused, keeping %s: %s", candidate.name, self.current or "the heuristic", exc)
                continue
            self.current = candidate.name
            log.info("policy model %s loaded", scorer.version)
            return scorer
        return None
