"""RL fine-tuning on the twin with stable-baselines3 PPO, starting from the imitation weights.

The actor *is* the placement scorer: its logits over the shortlist are the scorer's scores of
each candidate divided by a temperature, with padding masked by a large negative logit, so what
PPO improves is exactly what gets exported. The critic is a small MLP over the pod's features
and the mean of its candidates'. After training, the fine-tuned scorer is returned; the caller
keeps it only if it beats the imitation weights on validation seeds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from fedcore.nodes import Node
from fedcore.pods import Pod
from federated.envs import PlacementEnv, layout
from federated.model import PlacementScorer
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

TEMPERATURE = 2.0
"""Score points per logit unit: candidates within a few points of the best are explored."""


class ShortlistHeads(nn.Module):
    """SB3 "mlp_extractor": actor latent = masked candidate logits from the scorer; critic latent = pooled MLP."""

    def __init__(self, scorer: PlacementScorer, k: int, value_hidden: int = 64) -> None:
        super().__init__()
        self.scorer = scorer
        self.k = k
        self.latent_dim_pi = k
        self.latent_dim_vf = value_hidden
        self.value = nn.Sequential(nn.Linear(len(POD_FEATURES) + len(NODE_FEATURES), value_hidden), nn.Tanh())

    def _split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        start, mask, _ = layout(self.k)
        nodes = obs[:, start:mask].reshape(-1, self.k, len(NODE_FEATURES))
        return obs[:, :start], nodes, obs[:, mask:] > 0.5

    def forward_actor(self, obs: torch.Tensor) -> torch.Tensor:
        pods, nodes, mask = self._split(obs)
        return (self.scorer.batched(pods, nodes) / TEMPERATURE).masked_fill(~mask, -1e8)

    def forward_critic(self, obs: torch.Tensor) -> torch.Tensor:
        pods, nodes, mask = self._split(obs)
        weights = mask.float().unsqueeze(-1)
        pooled = (nodes * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.value(torch.cat([pods, pooled], dim=1))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(obs), self.forward_critic(obs)


class ScorerPolicy(ActorCriticPolicy):
    """ActorCriticPolicy whose action logits come straight from :class:`ShortlistHeads` (no extra action layer)."""

    def __init__(self, *args: Any, scorer: PlacementScorer, k: int, **kwargs: Any) -> None:
        self._heads_args = (scorer, k)  # a tuple: torch forbids assigning modules before Module.__init__
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = ShortlistHeads(*self._heads_args)  # type: ignore[assignment]

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class _Progress(BaseCallback):
    def __init__(self, on_steps: Callable[[int], None] | None) -> None:
        super().__init__()
        self.on_steps = on_steps
        self.allocs: list[float] = []

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if "gpu_alloc" in info:
                self.allocs.append(float(info["gpu_alloc"]))
        if self.on_steps is not None:
            self.on_steps(1)
        return True


def finetune(
    scorer: PlacementScorer,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    seeds: Sequence[int],
    steps: int,
    seed: int = 0,
    k: int = 16,
    on_steps: Callable[[int], None] | None = None,
) -> tuple[PlacementScorer, dict[str, Any]]:
    """PPO on openb training episodes; returns a fine-tuned copy of ``scorer`` and training stats."""
    torch.manual_seed(seed)
    tuned = copy.deepcopy(scorer)

    def score(pod_x: np.ndarray, node_x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return tuned(torch.from_numpy(pod_x), torch.from_numpy(node_x).T).numpy()

    env = PlacementEnv(nodes, pods, seeds, score, k)
    agent = PPO(
        ScorerPolicy, env, n_steps=512, batch_size=128, n_epochs=4, learning_rate=1e-4, gamma=0.9,
        ent_coef=0.0, clip_range=0.1, seed=seed, device="cpu", verbose=0,
        policy_kwargs={"scorer": tuned, "k": k, "ortho_init": False},
    )
    progress = _Progress(on_steps)
    agent.learn(total_timesteps=steps, callback=progress)
    return tuned, {"steps": steps, "episodes_finished": len(progress.allocs), "episode_gpu_alloc": progress.allocs}
