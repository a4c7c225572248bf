"""The multi-objective reward for RL on the twin, and the controller that re-weights it under contention.

Per decision the reward combines (each term roughly in GPUs so the weights are comparable):

* allocation — the milli-GPU (or, for CPU-only pods, the CPU share of a node) the placement adds;
* fragmentation — the drop in the chosen node's expected GPU fragmentation (FGD's quantity);
* SLA — minus what was dropped since the last decision because nothing could host it, with
  latency-sensitive (priority) pods counting double;
* fairness — the change in Jain's index of the served share across tenants.

Contention: when low-priority work is being dropped clearly more often than high-priority
work (it starves), the fairness weight rises; it decays back once the gap closes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fedcore.pods import Pod
from fedcore.resources import MILLI
from fedcore.stats import jain


@dataclass(slots=True)
class RewardWeights:
    allocation: float = 1.0
    fragmentation: float = 0.5
    sla: float = 1.0
    fairness: float = 1.0


@dataclass
class AdaptiveReward:
    """Stateful reward over one episode; call :meth:`dropped` for each unplaceable pod and :meth:`placed` per decision."""

    base: RewardWeights = field(default_factory=RewardWeights)
    fairness_max: float = 8.0
    starvation_gap: float = 0.1
    """Drop-rate gap (low minus high priority, EWMA) above which low-priority work counts as starving."""
    decay: float = 0.98
    weights: RewardWeights = field(init=False)
    submitted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    served: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    drop_rate: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    pending_penalty: float = 0.0
    last_jain: float = 1.0

    def __post_init__(self) -> None:
        self.weights = RewardWeights(**{k: getattr(self.base, k) for k in self.base.__dataclass_fields__})

    def _observe(self, pod: Pod, dropped: bool) -> None:
        self.submitted[pod.tenant] += 1
        self.served[pod.tenant] += not dropped
        high = pod.priority > 0
        self.drop_rate[high] = self.decay * self.drop_rate[high] + (1 - self.decay) * float(dropped)
        starving = self.drop_rate[False] - self.drop_rate[True] > self.starvation_gap
        target = self.fairness_max if starving else self.base.fairness
        self.weights.fairness += 0.05 * (target - self.weights.fairness)

    def dropped(self, pod: Pod) -> None:
        self._observe(pod, dropped=True)
        self.pending_penalty += size(pod) * (2.0 if pod.priority > 0 else 1.0)

    def placed(self, pod: Pod, frag_drop_milli: float) -> float:
        """The reward for placing ``pod`` (plus penalties for drops since the previous decision)."""
        self._observe(pod, dropped=False)
        fairness = jain([self.served[t] / self.submitted[t] for t in self.submitted])
        w = self.weights
        reward = (
            w.allocation * size(pod)
            + w.fragmentation * frag_drop_milli / MILLI
            - w.sla * self.pending_penalty
            + w.fairness * (fairness - self.last_jain) * 100.0
        )
        self.pending_penalty = 0.0
        self.last_jain = fairness
        return float(reward)


def size(pod: Pod) -> float:
    """A pod's size in GPUs; CPU-only pods count their cores as a share of a 64-core node."""
    return pod.gpu.total_milli / MILLI if pod.gpu.count else pod.cpu_milli / (64.0 * MILLI)
