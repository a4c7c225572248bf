"""The learned policy as a :class:`edgeagent.scoring.Scorer`: one int8 ONNX model run by onnxruntime.

This is the agent's only onnxruntime import, and it happens when the first model
loads, so a node without a model (or an armv7 board, which has no onnxruntime wheel)
never pays for it. Sessions run single-threaded with the memory arena off: a batch of
one is microseconds either way, and the arena would hold megabytes per agent.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edgeagent.scoring import FEATURES


class ModelError(Exception):
    """The model cannot be used (missing, corrupt, wrong shape, non-finite output): keep the previous one."""


class OnnxScorer:
    def __init__(self, path: Path, version: str, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ModelError(f"onnxruntime is not installed: {exc}") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception zoo for bad files
            raise ModelError(f"{path}: cannot load: {exc}") from exc
        self._input = self._session.get_inputs()[0].name
        self.version = version
        probe = self.score(np.zeros(len(FEATURES), dtype=np.float32))
        if not math.isfinite(probe):
            raise ModelError(f"{path}: non-finite score on a zero input")

    def score(self, features: np.ndarray) -> float:
        try:
            out = self._session.run(None, {self._input: features.reshape(1, -1).astype(np.float32)})
            return float(np.asarray(out[0]).reshape(-1)[0])
        except Exception as exc:
            raise ModelError(f"model {self.version}: inference failed: {exc}") from exc
