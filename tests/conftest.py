"""Shared fixtures: where the real traces are (tests that need them skip with a clear reason when absent).

Hypothesis explores fresh random examples on every local run; with ``CI`` set it runs the ``ci``
profile instead: the same examples every run (``derandomize``), so a CI verdict depends on the
commit, not on the draw. What a local run finds is then pinned with ``@example`` or a fixed seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

ROOT = Path(__file__).resolve().parents[1]

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def traces() -> Path:
    from fedcore.traces import TraceError, locate

    try:
        return locate.traces_dir()
    except TraceError as exc:
        pytest.skip(f"real traces not available: {exc}")
