"""Shared fixtures: where the real traces are (tests that need them skip with a clear reason when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def traces() -> Path:
    from fedcore.traces import TraceError, locate

    try:
        return locate.traces_dir()
    except TraceError as exc:
        pytest.skip(f"real traces not available: {exc}")
