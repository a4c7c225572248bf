"""The torch scorer: one shared per-candidate MLP, modulated by the pod, with a linear skip from the features.

Permutation-invariant by construction: each candidate node's score depends only on its own
features and the pod's, never on the other candidates, so an edge agent scoring its own node
alone gets exactly the score the control plane would compute for it across the whole fleet
(claims are compared across agents, so that matters).

The cost split is deliberate: the pod context network (most of the parameters) runs once per
decision; the per-candidate path is narrow and plain (Gemm + ReLU), because it runs over
up to thousands of nodes within a sub-millisecond budget. The context shifts the candidate
layers' pre-activations per pod (the shift half of FiLM: a per-pod bias, so it costs nothing
per candidate — full FiLM's per-candidate scaling doubled inference time), so one model behaves
differently for sharing, whole-GPU and CPU-only pods. The wide part is linear in the node features with weights that depend linearly
on the pod (a bilinear form), so imitation can copy a heuristic's score exactly — FGD's score is
a feature, LeastAllocated is linear in two — while the MLP learns corrections. Its weights are
computed per pod, not from a layer's weight matrix, so int8 quantization (of the layers' weight
matrices) leaves it fp32: its precision decides which nodes tie at the framework's integer scores.
"""

from __future__ import annotations

import torch
from torch import nn

from federated.runtime.features import NODE_FEATURES, POD_FEATURES

class PlacementScorer(nn.Module):
    """Scores every candidate node of one pod: ``forward(pod (1, P), nodes (F, N)) -> (N,)`` in score units.

    ``nodes`` is feature-major (one row per feature), the layout the runtime's feature builder
    produces, so a decision hands onnxruntime its buffer without a transposing copy; each layer is
    one Gemm whose bias input carries the pod's shift (onnxruntime fuses the ReLU into it).
    """

    def __init__(self, hidden: int = 16, context: int = 128) -> None:
        super().__init__()
        self.hidden = hidden
        self.context = nn.Sequential(
            nn.Linear(len(POD_FEATURES), context), nn.ReLU(),
            nn.Linear(context, context), nn.ReLU(),
            nn.Linear(context, 2 * hidden),
        )
        self.layer1 = nn.Linear(len(NODE_FEATURES), hidden)
        self.layer2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 1)
        self.wide = nn.Parameter(torch.zeros(len(POD_FEATURES) + 1, len(NODE_FEATURES)))

    def forward(self, pod: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        shift1, shift2 = torch.split(self.context(pod), self.hidden, dim=-1)
        rows = nodes.t()
        h = torch.relu(torch.addmm(self.layer1.bias + shift1, rows, self.layer1.weight.t()))
        h = torch.relu(torch.addmm(self.layer2.bias + shift2, h, self.layer2.weight.t()))
        wide = torch.matmul(self.wide_weights(pod), nodes)  # (1, N): a row-major GEMV over the feature-major input
        return self.head(h).squeeze(-1) + wide.squeeze(0)

    def wide_weights(self, pod: torch.Tensor) -> torch.Tensor:
        """Per-pod weights of the linear part: row 0 of ``wide`` plus the pod features times the rest."""
        return self.wide[0] + (pod[..., :, None] * self.wide[1:]).sum(dim=-2)

    def batched(self, pods: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """Training form: pods (B, P), nodes (B, K, F) -> scores (B, K); same maths as :meth:`forward`."""
        shift1, shift2 = torch.split(self.context(pods[:, None, :]), self.hidden, dim=-1)
        h = torch.relu(self.layer1(nodes) + shift1)
        h = torch.relu(self.layer2(h) + shift2)
        wide = torch.matmul(nodes, self.wide_weights(pods[:, None, :]).transpose(-1, -2))
        return (self.head(h) + wide).squeeze(-1)
