"""Which parts of each trace training may see, and which are held out for evaluation and benchmarks.

* openb: imitation uses only the first 80% of the pod list (file order) and submission seeds
  from ``TRAIN_SEED_BASE`` upwards. Validation (choosing between imitation and RL weights, and the
  score's temperature and preferences) runs the full list with seeds from ``VALIDATION_SEED_BASE``:
  the last 20% of the list holds a different mix (more 0.81-GPU pods), and settings chosen on the
  first 80% alone lost a third of their gain on the full list. Benchmarks run the published
  protocol on the full list with seeds 0..N-1, permutations neither training nor validation uses.
* DLRM: instances created in the last 20% of the trace's time span are ``dlrm_holdout``; training
  may only replay the first 80%.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedcore.pods import Pod
from fedcore.traces.dlrm import Instance

TRAIN_FRACTION = 0.8
TRAIN_SEED_BASE = 1000
VALIDATION_SEED_BASE = 4000
BENCH_SEEDS_BELOW = TRAIN_SEED_BASE
"""Benchmark seeds must stay below this (they are never trained on)."""


def openb_train_pods(pods: Sequence[Pod]) -> list[Pod]:
    """The first 80% of the pod list, in file order."""
    return list(pods[: int(len(pods) * TRAIN_FRACTION)])


def train_seeds(n: int) -> list[int]:
    return [TRAIN_SEED_BASE + k for k in range(n)]


def validation_seeds(n: int) -> list[int]:
    return [VALIDATION_SEED_BASE + k for k in range(n)]


def dlrm_cut(instances: Sequence[Instance]) -> float:
    """The time (s) from which DLRM instances are held out: 80% of the way through the trace."""
    end = max(inst.deleted or inst.created for inst in instances)
    return TRAIN_FRACTION * end


def dlrm_train(instances: Sequence[Instance]) -> list[Instance]:
    """Instances created before the cut (the only part of DLRM training may replay)."""
    cut = dlrm_cut(instances)
    return [inst for inst in instances if inst.created < cut]
