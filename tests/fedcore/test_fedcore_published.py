"""The twin's heuristics against the published FGD simulator (ATC '23 artifact) on the openb default list.

Published means at 100% arrived GPU over the artifact's 10 seeds (its
experiments/analysis/expected_results/analysis_allo_discrete.csv): Random 86.30%, DotProd 90.62%,
BestFit 92.86%, FGD 95.23%. Each heuristic here, on the same protocol, must read within half a
point of its published mean. Fewer seeds than the artifact keep the suite short; the seed-to-seed
spread (0.1-0.4 point; FGD's about 0.1) leaves room inside the tolerance. Measured over 10 seeds (bench schedule,
busy host): Random 86.31%, DotProd 90.78%, BestFit 93.08%, FGD 95.05%.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from fedcore.traces import openb
from fedcore.twin import submission

PUBLISHED = {"random": 0.8630, "dotprod": 0.9062, "bestfit": 0.9286, "fgd": 0.9523}
SEEDS = {"random": 3, "dotprod": 2, "bestfit": 2, "fgd": 3}


@pytest.mark.parametrize("profile", sorted(PUBLISHED))
def test_heuristic_reads_the_published_mean(traces: Path, profile: str) -> None:
    nodes = openb.load_nodes(traces / "alibaba-openb" / "openb_node_list_all_node.csv")
    pods = openb.load_pods(traces / "alibaba-openb" / "openb_pod_list_default.csv")
    ours = statistics.fmean(submission.run(nodes, pods, profile, seed).gpu_alloc_ratio for seed in range(SEEDS[profile]))
    assert abs(ours - PUBLISHED[profile]) <= 0.005, f"{profile}: {ours:.4f} vs published {PUBLISHED[profile]:.4f}"
