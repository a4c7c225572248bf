"""Small synthetic fleets and openb-like pods for the policy tests (fast, no traces needed).

A module of its own, not conftest: several test folders have a conftest, so importing names from one is ambiguous.
"""

from __future__ import annotations

import numpy as np

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.resources import GpuRequest

SHAPES = (  # (cpu milli, memory MiB, gpu count, milli each) — openb-like mix of sharing, whole and CPU-only pods
    (4000, 16384, 1, 500), (8000, 32768, 1, 250), (2000, 8192, 1, 750), (16000, 65536, 1, 1000),
    (32000, 131072, 2, 1000), (4000, 8192, 0, 0), (8000, 30000, 1, 460), (12000, 40000, 4, 1000),
)


def fleet(n: int = 40, seed: int = 0) -> list[Node]:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([0, 1, 2, 4, 8], size=n, p=[0.15, 0.1, 0.3, 0.15, 0.3])
    return [
        Node(f"n{i}", cpu_milli=int(rng.choice([32000, 64000, 96000])), memory_mib=int(rng.choice([131072, 262144, 524288])),
             gpus=int(g), gpu_model="G2" if g else "")
        for i, g in enumerate(gpus)
    ]


def pods(n: int = 300, seed: int = 0) -> list[Pod]:
    rng = np.random.default_rng(seed)
    out = []
    for i, k in enumerate(rng.choice(len(SHAPES), size=n, p=[0.25, 0.15, 0.1, 0.15, 0.05, 0.15, 0.1, 0.05])):
        cpu, mem, count, milli = SHAPES[int(k)]
        out.append(Pod(f"p{i}", cpu, mem, gpu=GpuRequest(count, milli), priority=int(rng.random() < 0.3), tenant=f"t{i % 2}"))
    return out
