"""The twin as a gymnasium environment for PPO: one step places one openb pod among a shortlist of candidates.

The shortlist is the current scorer's top ``K`` feasible nodes in the scheduler's own order
(integer score, then the run's fixed tie order), so candidate 0 is what the deployed policy
would pick and the agent learns when to deviate from it. Observations are flat:
``[pod (P), candidates (K x F), mask (K)]``; padding candidates are masked out of the policy.
Hard filters decide feasibility, so no action can place a pod where the rules forbid it.
Pods nothing can host are dropped (the protocol never retries) and cost SLA reward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.framework import Profile, Scheduler
from fedcore.twin import submission
from federated.rewards import AdaptiveReward
from federated.runtime.features import NODE_FEATURES, POD_FEATURES, FeatureBuilder

ScoreFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(pod features (1, P), node features (N, F)) -> scores (N,): the policy being trained, in numpy."""


def layout(k: int) -> tuple[int, int, int]:
    """Offsets of the candidate block and the mask in a flat observation, and its total length."""
    start = len(POD_FEATURES)
    mask = start + k * len(NODE_FEATURES)
    return start, mask, mask + k


class PlacementEnv(gym.Env[np.ndarray, np.int64]):
    """openb protocol episodes (to 100% arrived GPU) over training pods, cycling through training seeds."""

    def __init__(self, nodes: Sequence[Node], pods: Sequence[Pod], seeds: Sequence[int], score: ScoreFn, k: int = 16) -> None:
        self.fleet = submission.gpu_nodes(nodes)
        self.pods = list(pods)
        self.seeds = list(seeds)
        self.score = score
        self.k = k
        self.types = PodTypes.from_pods(self.pods)
        size = layout(k)[2]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(k)
        self.episode = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        run_seed = self.seeds[self.episode % len(self.seeds)]
        self.episode += 1
        self.table = NodeTable(self.fleet)
        self.cluster_gpu = int(self.table.gpu_count.sum()) * MILLI
        self.scheduler = Scheduler(Profile("rl", default_filters(), []), self.table, run_seed)
        self.builder = FeatureBuilder(self.types)
        self.reward = AdaptiveReward()
        self.queue = iter(submission.workload(self.pods, run_seed, self.cluster_gpu))
        self.arrived = 0
        obs = self._advance()
        assert obs is not None, "an episode needs at least one placeable pod"
        return obs, {}

    def _advance(self) -> np.ndarray | None:
        """Move to the next pod some node can host (dropping the others); None when the episode is over."""
        while self.arrived < self.cluster_gpu:
            pod = next(self.queue, None)
            if pod is None:
                return None
            self.arrived += pod.gpu.total_milli
            rows = np.flatnonzero(self.scheduler.feasible(pod))
            if rows.size == 0:
                self.reward.dropped(pod)
                continue
            return self._observe(pod, rows)
        return None

    def _observe(self, pod: Pod, rows: np.ndarray) -> np.ndarray:
        pod_x = self.builder.pod(pod)
        node_x = self.builder(pod, self.table, rows)
        scores = np.floor(np.clip(self.score(pod_x, node_x), 0.0, 100.0))
        order = np.lexsort((self.scheduler.tie_rank[rows], -scores))[: self.k]
        self.pod, self.rows, self.drops = pod, rows[order], node_x[order, NODE_FEATURES.index("frag_drop")]
        start, mask, _ = layout(self.k)
        obs = np.zeros(layout(self.k)[2], dtype=np.float32)
        obs[:start] = pod_x[0]
        block = np.zeros((self.k, len(NODE_FEATURES)), dtype=np.float32)
        block[: order.size] = node_x[order]
        obs[start:mask] = block.ravel()
        obs[mask : mask + order.size] = 1.0
        return obs

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        index = int(action) if int(action) < self.rows.size else 0  # a masked choice never happens; stay safe
        node = int(self.rows[index])
        pod = self.pod
        devices = (self.builder.drops.best_device(pod, self.table, node),) if pod.gpu.is_sharing else None
        self.table.allocate(pod, node, devices)
        reward = self.reward.placed(pod, float(self.drops[index]) * MILLI)
        obs = self._advance()
        if obs is None:
            return np.zeros(self.observation_space.shape, dtype=np.float32), reward, True, False, {"gpu_alloc": self.table.alloc_ratios()["gpu"]}
        return obs, reward, False, False, {}
