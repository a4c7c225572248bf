"""Train the learned residual with PPO (stable-baselines3, ``train`` extra) on training parts only.

An episode is a random day of one series' training part (after a first day that calibrates the
forecast quantile, before the last ``VALIDATION_DAYS`` that judge the result), at one start-up time.
One step is one HPA period (15 s = 3 ticks). Reward per
step: -(replicas ÷ base + late_weight × late demand ÷ base) — replica cost against demand served
late, both relative to the workload's size so series of every scale weigh the same. LATE_WEIGHT
prices late demand far above idle replicas: late at HPA's share (~4e-5 of demand) would cost
about eight times what running at 90% instead of 70% saves. The policy starts at the floor rule
(its action 0) on every start-up and moves from it only where the reward says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from controlplane.autoscaling.feeds import feed_at, tick_demand
from controlplane.autoscaling.controllers import TARGET
from controlplane.autoscaling.learned import FEATURES, MlpPolicy, Residual, from_sb3
from controlplane.autoscaling.series import Series
from controlplane.autoscaling.replicas import ReplicaSet, Sim

LATE_WEIGHT = 20_000.0  # a replica-unit of demand late for one tick costs as much as 20,000 replicas for one period
EPISODE_DAYS = 1.0
VALIDATION_DAYS = 2.0   # the training part's last days: never trained on, they judge the policy against the rule
STEPS_PER_DECISION = 3


Feeds = dict[tuple[str, float], np.ndarray]


def make_env(series: Sequence[Series], startups: Sequence[float], feeds: Feeds, targets: dict[float, float],
             ceilings: dict[float, float], seed: int, late_weight: float = LATE_WEIGHT) -> Any:
    """The residual's environment; ``feeds`` holds :func:`peak_feed` per (series, start-up), ``targets`` the forecast
    target and ``ceilings`` the floor's utilization per start-up."""
    import gymnasium as gym

    class ResidualEnv(gym.Env[np.ndarray, np.ndarray]):
        observation_space = gym.spaces.Box(-10.0, 10.0, (FEATURES,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

        def __init__(self) -> None:
            self.rng = random.Random(seed)
            self.action = 0.0

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
            s = self.rng.choice(list(series))
            startup = self.rng.choice(list(startups))
            day = s.season
            start = self.rng.randrange(day, max(day + 1, s.split - int((EPISODE_DAYS + VALIDATION_DAYS) * day)))
            demand = tick_demand(s, start, EPISODE_DAYS)
            self.ctl = Residual(lambda x: self.action, targets[startup], ceilings[startup])
            initial = math.ceil(float(demand[0]) / TARGET)
            self.sim = Sim(self.ctl, demand, ReplicaSet(startup, [0.0] * initial), feed_at(s, start, feeds[(s.name, startup)]))
            self.scale = max(float(np.mean(demand)) / TARGET, 1.0)
            return self._features(), {}

        def _features(self) -> np.ndarray:
            return np.clip(self.ctl.features(self.sim.observe()), -10, 10)

        def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
            self.action = float(action[0])
            n0 = len(self.sim.late)
            for _ in range(STEPS_PER_DECISION):
                if self.sim.done:
                    break
                self.sim.tick()
            reps = float(np.mean(self.sim.replicas[n0:])) if len(self.sim.replicas) > n0 else 0.0
            late = float(np.sum(self.sim.late[n0:]))
            reward = -(reps + late_weight * late) / self.scale
            done = self.sim.i + STEPS_PER_DECISION > len(self.sim.demand)
            return (np.zeros(FEATURES, np.float32) if done else self._features()), reward, done, False, {}

    return ResidualEnv()


def train(series: Sequence[Series], startups: Sequence[float], feeds: Feeds, targets: dict[float, float],
          ceilings: dict[float, float], steps: int, seed: int = 0, late_weight: float = LATE_WEIGHT) -> MlpPolicy:
    """A PPO residual policy trained for ``steps`` decisions; its numpy copy."""
    import tempfile

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    torch.set_num_threads(1)
    env = make_env(series, startups, feeds, targets, ceilings, seed, late_weight)
    with tempfile.TemporaryDirectory() as logs:  # SB3 would leave a folder per learn() otherwise
        model = PPO("MlpPolicy", env, seed=seed, n_steps=2048, batch_size=256, gamma=0.98, learning_rate=3e-4,
                    ent_coef=0.0, verbose=0, device="cpu")
        model.set_logger(configure(logs, []))
        model.learn(total_timesteps=steps)
    return from_sb3(model)
