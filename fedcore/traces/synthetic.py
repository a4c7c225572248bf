"""A seeded synthetic workload: Poisson arrivals, exponential lifetimes, a few tenants and pod shapes."""

from __future__ import annotations

import numpy as np

from fedcore.pods import Pod, QoS
from fedcore.resources import MILLI, GpuRequest
from fedcore.traces.dlrm import Instance

SHAPES = (  # (cpu milli, memory MiB, gpu count, gpu milli each)
    (1000, 2048, 0, 0),
    (4000, 8192, 0, 0),
    (8000, 32768, 0, 0),
    (4000, 16384, 1, 500),
    (8000, 32768, 1, MILLI),
    (16000, 65536, 2, MILLI),
)


def generate(pods: int, seed: int = 0, rate_per_s: float = 1.0, mean_life_s: float = 600.0, tenants: int = 4) -> list[Instance]:
    """``pods`` instances arriving at ``rate_per_s`` with exponential lifetimes of mean ``mean_life_s``."""
    if pods < 1 or rate_per_s <= 0 or mean_life_s <= 0 or tenants < 1:
        raise ValueError("synthetic workload needs pods >= 1, a positive rate and lifetime, and tenants >= 1")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, size=pods))
    lives = rng.exponential(mean_life_s, size=pods)
    shapes = rng.integers(len(SHAPES), size=pods)
    owners = rng.integers(tenants, size=pods)
    out = []
    for i in range(pods):
        cpu, mem, count, milli = SHAPES[int(shapes[i])]
        tenant = f"tenant-{int(owners[i])}"
        pod = Pod(
            uid=f"syn-{i}", cpu_milli=cpu, memory_mib=mem, gpu=GpuRequest(count, milli),
            qos=QoS.BURSTABLE, workload=tenant, tenant=tenant,
        )
        out.append(Instance(pod, float(arrivals[i]), float(arrivals[i] + lives[i])))
    return out
