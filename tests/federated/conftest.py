"""Policy tests run torch and onnxruntime on one thread, as the benchmarks do."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


@pytest.fixture(autouse=True)
def one_thread() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)
