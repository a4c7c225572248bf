"""``bench policy``'s decision-time section: learned and BestFit timed on the same decisions, by wall clock and by CPU."""

from __future__ import annotations

import pytest
from policy_data import fleet, pods

pytest.importorskip("onnxruntime")

from fedplane.lab.benches import policybench  # noqa: E402
from federated.evaluating import Traces  # noqa: E402
from federated.runtime.scorer import default_model_dir  # noqa: E402


def test_section_reports_both_clocks_for_every_profile_over_the_same_decisions() -> None:
    if not (default_model_dir() / "manifest.json").is_file():
        pytest.skip("federated ships no default policy artifact in this checkout")
    traces = Traces(fleet(50, seed=2), pods(400, seed=2), [], [], [])
    out = policybench.decision_times(default_model_dir(), traces, seed=0, pods=120)
    assert out["decision_nodes"] == 50 and out["decision_pods"] == 120
    for profile in ("", "fp32_", "bestfit_"):
        for clock in ("us", "cpu_us"):
            p50, p99 = out[f"{profile}decision_{clock}_p50"], out[f"{profile}decision_{clock}_p99"]
            assert 0 < p50 <= p99, (profile, clock)
