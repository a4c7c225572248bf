"""The policy's choices on recorded inputs: how one machine's scorer is compared with another's.

An int8 model could choose differently on another CPU (other integer kernels, other float
rounding), and an armv7 board scores with the heuristic instead. To show neither changes a
decision, one machine records decision cases — a pod's features and the feature rows of its
candidate nodes, built by the runtime's own feature builder from trace pods on a fleet
partly filled at random — and every machine scores the *same* arrays with its runtime
(:func:`choose`); :func:`compare` counts the cases where both pick the same node (or nodes
they both score as tied).

``python -m federated.runtime.agreement record CASES.npz`` and ``... choose CASES.npz``
(prints JSON) are what ``deploy/arm/check.sh`` runs on the host and under qemu.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

from federated.runtime.scorer import PolicyRuntime, configured_model_dir, default_model_dir

CANDIDATES = 8
"""Candidate nodes per case: a decision among several nodes, as the control plane's or a twin's."""


def record(path: Path, cases: int = 200, seed: int = 0, traces: str | None = None) -> Path:
    """Write ``cases`` decision cases to ``path`` (npz: ``pods`` cases x P, ``nodes`` cases x CANDIDATES x F)."""
    from fedcore.nodes import Node
    from fedcore.nodetable import NodeTable, OvercommitError
    from fedcore.traces import TraceError, locate, openb, synthetic

    try:
        pods = openb.load_pods(locate.trace_file(None, locate.OPENB_PODS, traces))
    except TraceError:
        pods = [i.pod for i in synthetic.generate(2000, seed)]
    rng = random.Random(seed)
    runtime = PolicyRuntime(default_model_dir())
    pod_rows, node_rows = [], []
    for _ in range(cases):
        table = NodeTable([Node(f"n{i}", 96000, 393216, gpus=8, gpu_model="G2") for i in range(CANDIDATES)])
        for row in range(CANDIDATES):
            for prior in rng.sample(pods, rng.randint(0, 6)):
                try:
                    table.allocate(prior, row)
                except (OvercommitError, ValueError):
                    continue
        pod_x, node_x = runtime.inputs(rng.choice(pods), table, np.arange(CANDIDATES))
        pod_rows.append(np.asarray(pod_x, dtype=np.float32).reshape(-1))
        node_rows.append(np.asarray(node_x, dtype=np.float32))
    np.savez(path, pods=np.stack(pod_rows), nodes=np.stack(node_rows))
    return path


def choose(path: Path) -> dict[str, Any]:
    """This machine's scores and chosen node (argmax) for every recorded case, and which scorer gave them."""
    runtime = PolicyRuntime(configured_model_dir() or default_model_dir())
    with np.load(path) as cases:
        pods, nodes = cases["pods"], cases["nodes"]
    scores = [runtime.scorer(pods[i : i + 1], nodes[i]) for i in range(len(pods))]
    return {"scorer": runtime.version, "choices": [int(np.argmax(s)) for s in scores],
            "scores": [[round(float(x), 4) for x in s] for s in scores]}


TIE = 1e-3
"""Scores this close (on the policy's 0-100 scale) are a tie: which tied node is "first" is float
rounding, not the policy's decision (agents break ties by node name)."""


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Agreement: share of cases where each side's chosen node is among the other side's best (within
    :data:`TIE`); also the exact argmax agreement and the largest score difference on any candidate."""
    same = exact = 0
    for a, b, sa, sb in zip(ours["choices"], theirs["choices"], ours["scores"], theirs["scores"]):
        exact += a == b
        same += sb[a] >= max(sb) - TIE and sa[b] >= max(sa) - TIE
    gap = max((abs(x - y) for a, b in zip(ours["scores"], theirs["scores"]) for x, y in zip(a, b)), default=0.0)
    n = max(1, len(ours["choices"]))
    return {"agreement": round(same / n, 4), "exact_argmax_agreement": round(exact / n, 4),
            "max_score_gap": round(gap, 4), "cases": len(ours["choices"])}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "choose"):
        print("usage: python -m federated.runtime.agreement record|choose CASES.npz", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if argv[0] == "record":
        record(path)
        return 0
    try:
        print(json.dumps(choose(path)))
    except (OSError, KeyError, ValueError) as exc:
        print(f"{path}: not a recorded cases file ({exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
