"""Which decisions a canary model makes: one rule for the agents and for the fleet metric that judges them.

A weighted canary (as in a Kubernetes progressive rollout's traffic weight) gives the candidate
model a share of an agent's decisions instead of all of them, so one agent of a small fleet can
trial a model while the fleet's placements barely move. The share is picked by the pod's uid, not
at random: the agent scores a pod with the same model every time it looks at it, and the fleet
metric's twin replay routes exactly the decisions the agents would.
"""

from __future__ import annotations

import zlib

DIRECTORY = "canary"
"""In an agent's models directory: the canary's artifact directory and its :data:`WEIGHT` file."""
WEIGHT = "weight"


def takes_canary(uid: str, weight: float) -> bool:
    """True when the decision for pod ``uid`` is the candidate's under canary ``weight`` (0..1)."""
    return zlib.crc32(uid.encode()) < weight * 2**32
