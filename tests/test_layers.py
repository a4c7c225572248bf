"""The import-linter contracts (one-way layers, no scheduling in crdt/gossip, no torch at the edge) hold."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter is not installed (pip install 'fedplane[test]')")
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
