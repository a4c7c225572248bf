"""``fedplane agent``'s start: the plain forms skip click, everything else gets click's usage and help."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeagent import entry
from fedcore.agentcmd import agent_argv, precompile


def _config(tmp_path: Path, body: str = "node: edge-a\n") -> Path:
    """Ports 0 and an address nobody serves: ``--check`` binds and dials what a start would, on a shared host."""
    path = tmp_path / "agent.yaml"
    path.write_text(body + f"data_dir: {tmp_path / 'data'}\n" + 'gossip: {bind: "127.0.0.1:0"}\nhttp: {bind: "127.0.0.1:0"}\n')
    if "backend:" not in body:
        path.write_text(path.read_text() + 'backend: {address: "127.0.0.1:1"}\n')
    return path


_PROBE = ("import sys; sys.argv = ['fedplane', 'agent', '--config', sys.argv[1], '--check']; "
          "from fedplane.entry import main; main(); "
          "print(sorted(m for m in ('click', 'numpy', 'edgeagent.daemon', 'ssl', 'hashlib') if sys.modules.get(m))); "
          "print(sorted({l.split('/')[-1].split('.')[0] for l in open('/proc/self/maps') if 'libssl' in l or 'libcrypto' in l}))")


def test_the_daemon_path_loads_the_policy_without_click_or_openssl(tmp_path: Path) -> None:
    """``--check`` goes the daemon's way: configuration, daemon modules, model; click never loads, nor (twin
    back end) OpenSSL, while hashlib still imports (on CPython's own hashes)."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(_config(tmp_path))], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert ": ok; no usable model in " + str(tmp_path / "data" / "models") + ": heuristic scoring; back end" in out[0]
    assert out[1] == "['edgeagent.daemon', 'hashlib', 'numpy']"
    assert out[2] == "[]"


def test_the_kubernetes_back_end_keeps_openssl(tmp_path: Path) -> None:
    config = _config(tmp_path, "node: edge-a\nbackend:\n  kind: kubernetes\n")
    out = subprocess.run([sys.executable, "-c", _PROBE, str(config)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[1] == "['edgeagent.daemon', 'hashlib', 'numpy', 'ssl']"
    assert out[2] == "['libcrypto', 'libssl']"


def test_check_names_the_loaded_model_under_the_agents_own_interpreter_flags(tmp_path: Path) -> None:
    from federated.runtime.scorer import default_model_dir

    models = tmp_path / "models"
    (models / "v0001").mkdir(parents=True)
    for f in default_model_dir().iterdir():
        (models / "v0001" / f.name).write_bytes(f.read_bytes())
    config = _config(tmp_path, f"node: edge-a\nmodels:\n  dir: {models}\n")
    done = subprocess.run(agent_argv(config, check=True), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    sha = json.loads((models / "v0001" / "manifest.json").read_text())["files"]["model.int8.onnx"]["sha256"]
    assert done.stdout.startswith(f"{config}: ok; policy model {sha[:12]}-int8; back end 127.0.0.1:1 unreachable")
    precompile(config)  # the same run, as the bench and the fleets do it first: no error


def test_precompile_writes_the_optimised_bytecode_even_where_bytecode_writing_is_off(tmp_path: Path) -> None:
    """Agents read ``.opt-2.pyc`` files; ``PYTHONDONTWRITEBYTECODE`` (set on many CI hosts) must not stop the install step."""
    cache = tmp_path / "pyc"
    precompile(_config(tmp_path), {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(cache)})
    written = {p.name.split(".")[0] for p in cache.rglob("*.opt-2.pyc") if p.parent.name in ("edgeagent", "gossip")}
    assert {"daemon", "placing", "entry", "udp", "node"} <= written


def test_bad_configuration_and_help_go_through_click(tmp_path: Path) -> None:
    bad = _config(tmp_path, "placement:\n  claim_window: -1\n")
    done = subprocess.run([sys.executable, "-m", "fedplane", "agent", "--config", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2 and "placement.claim_window" in done.stderr and "Usage:" in done.stderr
    with pytest.raises(RuntimeError, match="placement.claim_window"):
        precompile(bad)
    shown = subprocess.run([sys.executable, "-m", "fedplane", "agent", "--config", str(bad), "--help"],
                           capture_output=True, text=True, check=True).stdout
    assert "--check" in shown and "gossip.seeds" in shown


@pytest.mark.parametrize("args", [[], ["--check"], ["--config"], ["--config="], ["--verbose", "--config", "x"],
                                  ["--config", "x", "extra"], ["--help", "--config", "x"]])
def test_anything_but_the_plain_forms_is_left_to_click(args: list[str]) -> None:
    assert entry.run_from_argv(args) is False


def test_an_invalid_configuration_is_left_to_click_untouched(tmp_path: Path) -> None:
    bad = _config(tmp_path, "nodes: typo\n")
    assert entry.run_from_argv(["--config=" + str(bad), "--check"]) is False
    assert not (tmp_path / "data").exists()


STARTER = """
import subprocess, sys, time
from fedcore.agentcmd import dies_with_starter
child = subprocess.Popen(dies_with_starter([sys.executable, "-c", "import time; time.sleep(60)"]), start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_agents_started_for_a_fleet_stop_when_their_starter_is_killed_outright() -> None:
    # atexit and the SIGTERM handler cannot run on SIGKILL; the agents live in sessions of their own
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        # the child may be a zombie reaped by init shortly: /proc says so
        state = Path(f"/proc/{child}/stat").read_text().split(") ")[-1][:1] if Path(f"/proc/{child}/stat").exists() else "X"
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the agent outlived its killed starter")
