"""Dropping onnxruntime's start-up code from the resident set: only never-written code, and decisions unchanged."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgeagent import residency

SMAPS = """\
7f0000000000-7f0000100000 r--p 00000000 08:01 11 /x/onnxruntime_pybind11_state.so
Anonymous:             0 kB
7f0000100000-7f0000900000 r-xp 00100000 08:01 11 /x/onnxruntime_pybind11_state.so
Size:               8192 kB
Anonymous:             0 kB
7f0000900000-7f0000a00000 r-xp 00900000 08:01 11 /x/onnxruntime_pybind11_state.so
Anonymous:             4 kB
7f0001000000-7f0001100000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6
Anonymous:             0 kB
7f0002000000-7f0002100000 rw-p 00000000 00:00 0
Anonymous:          1024 kB
"""


def test_only_never_written_code_of_the_named_libraries_is_chosen() -> None:
    assert residency.code_mappings(SMAPS) == [(0x7F0000100000, 0x7F0000900000)]
    assert residency.code_mappings(SMAPS, ("libc.so",)) == [(0x7F0001000000, 0x7F0001100000)]


def test_dropping_the_start_up_code_shrinks_rss_and_changes_no_score() -> None:
    pytest.importorskip("onnxruntime")
    probe = """
import numpy as np
from edgeagent import residency
from fedcore.nodes import Node
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from federated.runtime.scorer import PolicyRuntime, default_model_dir
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
runtime = PolicyRuntime(default_model_dir())
table = NodeTable([Node('a', 96000, 393216, gpus=8, gpu_model='G2')])
pods = [Pod(f'p{i}', 500 * (i + 1), 1024 * (i + 1)) for i in range(20)]
before = [float(runtime.scores(p, table, np.array([0]))[0]) for p in pods]
warm = rss()
advised = residency.drop_cold_code()
dropped = rss()
after = [float(runtime.scores(p, table, np.array([0]))[0]) for p in pods]
print(advised > 0, after == before, (warm - dropped) >> 20, (warm - rss()) >> 20)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["True", "True"], "the same scores after the code was dropped and faulted back"
    assert int(out[2]) >= 5, f"only {out[2]} MiB left the resident set"
    assert int(out[3]) >= 3, f"decisions faulted back all but {out[3]} MiB"
