"""Misbehaving clients for benches and tests: poisoned weights, a crash mid-round, a hang.

A SuperNode gets a fault through its node config (``fault = "scale:10"``), so the attacker is a
property of the node, as it would be in the field, and the server learns nothing about it.
Kinds: ``scale:S`` sends the trained weights times S; ``random:S`` sends Gaussian noise of
standard deviation S in every weight; ``crash`` kills the ClientApp process after it has started
training; ``hang`` never answers. Pure numpy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

KINDS = ("none", "scale", "random", "crash", "hang")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str = "none"
    strength: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``""``/``none``, ``scale:S``, ``random:S``, ``crash`` or ``hang``; anything else is a ValueError."""
        kind, _, arg = text.strip().partition(":")
        kind = kind or "none"
        if kind not in KINDS:
            raise ValueError(f"fault must be one of {KINDS} (e.g. 'scale:10'), got {text!r}")
        if kind in ("scale", "random"):
            try:
                return cls(kind, float(arg))
            except ValueError:
                raise ValueError(f"fault {text!r}: {kind} needs a number, e.g. '{kind}:10'") from None
        return cls(kind)

    def interrupt(self) -> None:
        """Crash or hang here when the fault says so (called once training has begun)."""
        if self.kind == "crash":
            os._exit(17)
        if self.kind == "hang":
            while True:
                time.sleep(60)

    def tamper(self, weights: Mapping[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
        """The weights this client sends instead of ``weights``."""
        if self.kind == "scale":
            return {k: (v * self.strength).astype(v.dtype) for k, v in weights.items()}
        if self.kind == "random":
            rng = np.random.default_rng(seed)
            return {k: rng.normal(0.0, self.strength, v.shape).astype(v.dtype) for k, v in weights.items()}
        return dict(weights)
