"""The ARM proof's cluster run (what ``deploy/arm/check.sh`` runs under qemu), here with native agents.

The emulated run itself is the opt-in CI stage (``FEDPLANE_ARM=1``); this exercises the same path —
control plane on the host, agents placing a submitted workload with a gossip keyring, the audit
against the twin, the policy's choices on recorded cases — in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedplane.lab.drills import archcheck
from federated.runtime import agreement


@pytest.mark.integration
def test_native_agents_place_every_pod_once_and_choose_as_the_reference(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    cases = agreement.record(tmp_path / "cases.npz", cases=40)
    reference = agreement.choose(cases)
    report = archcheck.run(archcheck.Guest(), agents=3, pods=8, timeout=120, cases=str(cases),
                           run_dir=str(tmp_path / "run"))
    assert report.check_ok, report.check
    assert (report.pods, report.placed, report.double_binds) == (8, 8, 0)
    assert report.scorer == "onnx-int8" and len(report.scorer_versions) == 3
    assert report.choices is not None
    compared = agreement.compare(report.choices, reference)
    assert compared["agreement"] == compared["exact_argmax_agreement"] == 1.0 and compared["max_score_gap"] == 0.0
    summary = archcheck.summarize({"arm64": json.loads(json.dumps(report.as_dict()))}, reference, 1.0)
    assert summary["arm64"]["agreement_with_amd64"] == 1.0 and summary["wall_s"] == 1.0


def test_agreement_counts_tied_choices_as_agreeing_and_reports_the_gap() -> None:
    ours = {"choices": [0, 1, 2], "scores": [[5.0, 5.0, 1.0], [1.0, 9.0, 0.0], [3.0, 2.0, 4.0]]}
    theirs = {"choices": [1, 1, 0], "scores": [[5.0, 5.0005, 1.0], [1.0, 9.0, 0.0], [4.5, 2.0, 4.0]]}
    assert agreement.compare(ours, theirs) == {"agreement": 0.6667, "exact_argmax_agreement": 0.3333,
                                              "max_score_gap": 1.5, "cases": 3}


def test_scorer_labels() -> None:
    assert archcheck.scorer_label("d4c6c6755bea-int8") == "onnx-int8"
    assert archcheck.scorer_label("heuristic-fgd") == archcheck.scorer_label("heuristic") == "heuristic"


def test_summarize_reports_a_failed_or_missing_run_without_inventing_figures(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ref.json").write_text(json.dumps({"scorer": "v-int8", "choices": [0], "scores": [[1.0]]}))
    (tmp_path / "armv7.json").write_text(json.dumps({"check_ok": False, "pods": 0, "placed": 0, "double_binds": None,
                                                     "scorer": "none", "error": "boom"}))
    assert archcheck.main(["summarize", "--reference", str(tmp_path / "ref.json"), "--wall", "2", "--json",
                           f"armv7={tmp_path / 'armv7.json'}", f"arm64={tmp_path / 'absent.json'}"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["armv7"]["check_ok"] is False and report["armv7"]["agreement_with_amd64"] == 0.0
    assert report["armv7"]["error"] == "boom" and report["arm64"]["check_ok"] is False and report["wall_s"] == 2.0


@pytest.mark.parametrize(("args", "says"), [(["--arch", "x86"], "--arch must be arm64 or armv7"),
                                            (["--bogus"], "unknown argument '--bogus'")])
def test_check_sh_refuses_bad_arguments_by_name(args: list[str], says: str) -> None:
    import subprocess

    script = Path(__file__).resolve().parents[2] / "deploy" / "arm" / "check.sh"
    done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
    helped = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--image" in helped.stdout
