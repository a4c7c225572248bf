"""A small cluster of edge agents started through a root filesystem (an ARM one, under qemu-user): the ARM proof.

``deploy/arm/check.sh`` builds an arm64 or armv7 Debian root filesystem with fedplane installed
in it, then runs this module on the host, once per architecture: a real control plane
(``fedplane controlplane serve`` with one twin cluster whose pods wait for agents to bind them)
on the host, ``agents`` real ``fedplane agent`` processes chrooted into the root filesystem
(binfmt_misc hands their ARM binaries to qemu-user; they share the host's loopback), a gossip
keyring on, and ``pods`` replicas submitted through ``fedplane controlplane submit``.

It reports what the acceptance needs: whether ``fedplane agent --check`` passes in the root
filesystem, how many pods the agents bound, double bindings (a pod, at one epoch, that an
agent says it runs while the twin holds it on another node, or that two agents both run),
which scorer the agents run (from their ``/metrics``), and, with ``--cases``, the runtime's
choices on recorded decision cases (:mod:`federated.runtime.agreement`) for the caller to
compare with amd64's. Without ``--root`` the agents run natively: the same path, for tests.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.loopback import free_ports

CLUSTER = "c0"
WORKLOAD = "arm-proof"
AGENT_SETTINGS: dict[str, Any] = {
    "log_level": "info",
    "gossip": {"probe_interval": 1.0, "suspicion_mult": 8.0},  # emulated agents are slow: no false deaths
    "backend": {"timeout": 10.0, "status_interval": 10.0},
    "placement": {"fallback_after": 5.0},
    "probe": {"kind": "twin"},
}


class CheckError(RuntimeError):
    """The cluster could not be brought up or did not settle in time; the message says which step."""


@dataclass(frozen=True, slots=True)
class Guest:
    """How agents are started: natively (``root`` None) or chrooted into a root filesystem."""

    root: Path | None = None
    python: str = sys.executable
    pythonpath: str = ""
    nice: int = 5

    def path(self, inside: str) -> Path:
        """The host path of a path as the agent sees it."""
        return Path(inside) if self.root is None else self.root / inside.lstrip("/")

    def argv(self, *args: str) -> list[str]:
        prefix = ["nice", "-n", str(self.nice)]
        if self.root is not None:
            env = ["PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", f"PYTHONPATH={self.pythonpath}"]
            prefix += ["chroot", str(self.root), "/usr/bin/env", "-i", *env]
        return [*prefix, self.python, "-OO", *args]


@dataclass(slots=True)
class Report:
    check_ok: bool = False
    check: str = ""
    pods: int = 0
    placed: int = 0
    double_binds: int = 0
    refused_duplicate_binds: int = 0
    scorer: str = ""
    scorer_versions: list[str] = field(default_factory=list)
    place_s: float | None = None
    choices: dict[str, Any] | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def scorer_label(version: str) -> str:
    """``onnx-int8`` / ``onnx-fp32`` for a model version, ``heuristic`` for either heuristic."""
    if version.startswith("heuristic"):
        return "heuristic"
    return "onnx-" + version.rsplit("-", 1)[-1] if "-" in version else version


def _get(port: int, path: str, timeout: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as reply:  # noqa: S310 - loopback
            data: bytes = reply.read()
            return data
    except OSError:
        return None


def _metric(body: bytes | None, name: str) -> str | None:
    for line in (body or b"").decode().splitlines():
        if line.startswith(name):
            return line
    return None


class Cluster:
    """The control plane on the host and the agents in the guest; :meth:`close` ends every process it started."""

    def __init__(self, guest: Guest, agents: int, run_dir: str, host_python: str = sys.executable) -> None:
        self.guest, self.agents, self.run_dir = guest, agents, run_dir
        self.host_python = host_python
        self.work = guest.path(run_dir)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.http: list[int] = []
        self.grpc_port, self.link_port, *self.ports = free_ports(2 + 2 * agents)
        self.admin = self.work / "admin.cred"
        """The plane's admin credential (serve --admin-credentials): this check's own calls, and the agents' credential."""

    def _host(self, *args: str) -> list[str]:
        return ["nice", "-n", str(self.guest.nice), self.host_python, "-m", "fedplane", *args]

    def start_control_plane(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.work / "controlplane.log", "ab")  # noqa: SIM115 - the process owns it
        self.procs.append(subprocess.Popen(self._host(
            "controlplane", "serve", "--db", str(self.work / "cp.db"), "--port", str(self.grpc_port),
            "--agent-port", str(self.link_port), "--metrics-port", "-1", "--twin-clusters", "1", "--regions", "1",
            "--twin-nodes", str(self.agents), "--agents-bind", "--ready-delay", "0.2", "--admin-credentials", str(self.admin)),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        self._wait(lambda: bool(self.nodes()), 60, "the control plane did not answer")

    def _connect(self) -> Any:
        """A gRPC connection to the plane as its admin (ValueError until the plane has written the credential)."""
        from fedapi import client, credentials

        return client.connect(f"127.0.0.1:{self.grpc_port}", token=credentials.token_in(str(self.admin)))

    def nodes(self) -> list[str]:
        from fedapi import twincluster_pb2 as tw

        try:
            conn = self._connect()
        except ValueError:  # no credential yet: the plane is starting
            return []
        try:
            return [n.name for n in conn.twin.ListNodes(tw.ListNodesRequest(cluster=CLUSTER), timeout=2).nodes]
        except Exception:  # noqa: BLE001 - not up yet: any gRPC error means "ask again"
            return []
        finally:
            conn.close()

    def write_configs(self, model_dir: Path) -> list[str]:
        """One YAML (as JSON) per node under the run dir, with a shared gossip key and the policy artifact."""
        from fedapi import credentials
        from fedplane.lab import credentialing

        key = self.work / "gossip.key"
        key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
        key.chmod(0o600)
        credentialing.issue(f"127.0.0.1:{self.grpc_port}", credentials.token_in(str(self.admin)), self.work / "agent.cred", "agent", CLUSTER)
        names = self.nodes()
        gossip, self.http = self.ports[: self.agents], self.ports[self.agents :]
        configs = []
        for i, node in enumerate(names):
            data = f"{self.run_dir}/{node}"
            shutil.copytree(model_dir, self.guest.path(data) / "models" / "v0001", dirs_exist_ok=True)
            raw = {**AGENT_SETTINGS, "node": node, "cluster": CLUSTER, "data_dir": data,
                   "gossip": {**AGENT_SETTINGS["gossip"], "bind": f"127.0.0.1:{gossip[i]}",
                              "seeds": [f"127.0.0.1:{p}" for p in gossip[:2] if p != gossip[i]],
                              "key_file": f"{self.run_dir}/gossip.key"},
                   "backend": {**AGENT_SETTINGS["backend"], "kind": "twin", "address": f"127.0.0.1:{self.link_port}",
                               "credentials": f"{self.run_dir}/agent.cred"},
                   "http": {"bind": f"127.0.0.1:{self.http[i]}"}}
            self.guest.path(f"{data}/agent.yaml").write_text(json.dumps(raw, indent=1))  # JSON is YAML
            configs.append(f"{data}/agent.yaml")
        return configs

    def check(self, config: str) -> tuple[bool, str]:
        """``fedplane agent --check`` in the guest (it also writes the .opt-2.pyc files the agents load)."""
        done = subprocess.run(self.guest.argv("-m", "fedplane", "agent", "--config", config, "--check"),
                              capture_output=True, text=True, timeout=900)
        said = [line for line in done.stdout.splitlines() if ": ok;" in line]
        if done.returncode == 0 and said:
            return True, said[-1]
        out = (done.stdout + done.stderr).strip().splitlines()
        return False, out[-1] if out else f"exit status {done.returncode}"

    def start_agents(self, configs: list[str], timeout: float) -> None:
        for config in configs:
            log = open(self.guest.path(config).parent / "agent.log", "ab")  # noqa: SIM115 - the process owns it
            self.procs.append(subprocess.Popen(self.guest.argv("-m", "fedplane", "agent", "--config", config),
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

        def converged() -> bool:
            for proc in self.procs[1:]:
                if proc.poll() is not None:
                    tail = b"".join(open(p, "rb").read()[-400:] for p in sorted(self.work.glob("*/agent.log")))
                    raise CheckError(f"an agent exited early ({self.work}/*/agent.log): {tail.decode(errors='replace')}")
            seen = [_metric(_get(port, "/metrics"), "fedplane_agent_peers_alive ") for port in self.http]
            return all(s is not None and float(s.split()[1]) >= self.agents - 1 for s in seen)

        self._wait(converged, timeout, "agents did not see each other")

    def submit(self, pods: int) -> None:
        done = subprocess.run(self._host("controlplane", "submit", WORKLOAD, "--replicas", str(pods), "--cpu", "250m",
                                         "--memory", "256Mi", "--cluster", CLUSTER, "--target", f"127.0.0.1:{self.grpc_port}",
                                         "--credentials", str(self.admin)),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise CheckError(f"submit failed: {done.stdout}{done.stderr}")

    def twin_pods(self) -> dict[str, tuple[str, int]]:
        """The twin's truth: pod uid -> (node, epoch) for the workload's pods ("" while pending)."""
        import grpc

        from fedapi import twincluster_pb2 as tw

        conn = self._connect()
        pods: dict[str, tuple[str, int]] = {}
        try:
            for event in conn.twin.WatchPods(tw.WatchPodsRequest(cluster=CLUSTER), timeout=2.0):
                if event.type == tw.EVENT_DELETED:
                    pods.pop(event.pod.name, None)
                elif event.pod.workload == WORKLOAD or event.pod.name.startswith(WORKLOAD):
                    running = event.pod.phase == tw.POD_RUNNING
                    pods[event.pod.name] = (event.pod.node if running else "", event.pod.epoch)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # the snapshot has been read by then
                raise CheckError(f"cannot watch the twin's pods: {exc.details()}") from exc
        finally:
            conn.close()
        return pods

    def audit(self, report: Report) -> None:
        """Double bindings from what every agent says it runs against the twin, and the scorers in use."""
        truth = self.twin_pods()
        report.pods, report.placed = len(truth), sum(1 for node, _ in truth.values() if node)
        names = self.nodes()
        runners: dict[tuple[str, int], str] = {}
        for node, port in zip(names, self.http):
            for uid, epoch in json.loads(_get(port, "/pods") or b"{}").items():
                held = truth.get(uid)
                if (uid, epoch) in runners or (held is not None and held[1] == epoch and held[0] not in ("", node)):
                    report.double_binds += 1
                runners[(uid, epoch)] = node
            line = _metric(_get(port, "/metrics"), "fedplane_agent_model_info{")
            if line:
                report.scorer_versions.append(line.split('"')[1])
        labels = sorted({scorer_label(v) for v in report.scorer_versions})
        report.scorer = labels[0] if len(labels) == 1 else ",".join(labels) or "unknown"

    def refused_duplicates(self) -> int:
        from fedapi import twincluster_pb2 as tw

        conn = self._connect()
        try:
            return int(conn.twin.GetSafety(tw.GetSafetyRequest(cluster=CLUSTER), timeout=5).duplicate_binds)
        finally:
            conn.close()

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    @staticmethod
    def _wait(ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise CheckError(f"{what} within {timeout:.0f} s")
            time.sleep(1.0)


def run(guest: Guest, agents: int = 3, pods: int = 20, timeout: float = 900.0, cases: str = "",
        run_dir: str = "/srv/fedplane-archcheck", host_python: str = sys.executable) -> Report:
    """Bring the cluster up, place ``pods`` pods, audit, tear down; a step that fails ends the run with its
    reason in ``error`` and what was measured until then."""
    report = Report()
    shutil.rmtree(guest.path(run_dir), ignore_errors=True)
    cluster = Cluster(guest, agents, run_dir, host_python)
    try:
        _run(cluster, report, pods, timeout, cases)
    except CheckError as exc:
        report.error = str(exc)  # what was measured before the failing step stays in the report
    finally:
        cluster.close()
    return report


def _run(cluster: Cluster, report: Report, pods: int, timeout: float, cases: str) -> None:
    from federated.runtime.scorer import default_model_dir

    guest = cluster.guest
    cluster.start_control_plane()
    configs = cluster.write_configs(default_model_dir())
    report.check_ok, report.check = cluster.check(configs[0])
    if cases:
        done = subprocess.run(guest.argv("-m", "federated.runtime.agreement", "choose", cases),
                              capture_output=True, text=True, timeout=900)
        report.choices = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-300:]}
    cluster.start_agents(configs, timeout)
    started = time.monotonic()
    cluster.submit(pods)
    try:
        cluster._wait(lambda: sum(1 for n, _ in cluster.twin_pods().values() if n) >= pods, timeout,
                      f"{pods} pods were not all bound")
        report.place_s = round(time.monotonic() - started, 1)
    except CheckError:
        pass  # the audit reports how many were placed
    time.sleep(3.0)  # a bind's record reaches every agent: /pods then agrees with the twin
    cluster.audit(report)
    report.refused_duplicate_binds = cluster.refused_duplicates()


def summarize(runs: dict[str, dict[str, Any]], reference: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """check.sh's report: per architecture the acceptance's fields, then the evidence behind them."""
    from federated.runtime import agreement

    report: dict[str, Any] = {}
    for arch, run in runs.items():
        entry = {k: run.get(k) for k in ("check_ok", "pods", "placed", "double_binds", "scorer")}
        choices = run.get("choices") or {}
        compared = agreement.compare(choices, reference) if "choices" in choices else None
        entry["agreement_with_amd64"] = compared["agreement"] if compared else 0.0
        entry.update({k: run.get(k) for k in ("check", "scorer_versions", "place_s", "refused_duplicate_binds", "error")
                      if run.get(k) is not None})
        entry["policy_vs_amd64"] = ({**compared, "scorer": choices["scorer"], "amd64_scorer": reference["scorer"]}
                                    if compared else choices)
        report[arch] = entry
    report["wall_s"] = round(wall_s, 1)
    return report


def _summarize_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedplane.lab.drills.archcheck summarize")
    parser.add_argument("--reference", type=Path, required=True, help="amd64's `agreement choose` output")
    parser.add_argument("--wall", type=float, required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("runs", nargs="+", help="ARCH=FILE: a run's JSON output")
    args = parser.parse_args(argv)
    runs = {}
    for item in args.runs:
        arch, _, path = item.partition("=")
        try:
            runs[arch] = json.loads(Path(path).read_text() or "{}")
        except (OSError, ValueError) as exc:
            runs[arch] = {"check_ok": False, "pods": 0, "placed": 0, "double_binds": None, "scorer": "none", "error": str(exc)}
    report = summarize(runs, json.loads(args.reference.read_text()), args.wall)
    if args.json:
        print(json.dumps(report))
        return 0
    for arch, e in report.items():
        if arch != "wall_s":
            print(f"{arch}: check {'ok' if e['check_ok'] else 'FAILED'}; placed {e['placed']}/{e['pods']}, double binds "
                  f"{e['double_binds']}, scorer {e['scorer']}, agreement with amd64 {e['agreement_with_amd64']}")
    print(f"wall {report['wall_s']} s")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["summarize"]:
        return _summarize_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m fedplane.lab.drills.archcheck", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="root filesystem to chroot the agents into (default: run natively)")
    parser.add_argument("--python", default="/usr/bin/python3", help="the guest's interpreter (with --root)")
    parser.add_argument("--pythonpath", default="/opt/fedplane:/opt/fedplane-deps", help="the guest's PYTHONPATH (with --root)")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for each wait (emulation is slow)")
    parser.add_argument("--cases", default="", help="recorded decision cases (guest path) to score in the guest")
    args = parser.parse_args(argv)
    guest = Guest(args.root, args.python, args.pythonpath) if args.root else Guest()
    try:
        report = run(guest, args.agents, args.pods, args.timeout, args.cases,
                     run_dir="/srv/fedplane-archcheck" if args.root else "/tmp/fedplane-archcheck")
    except (OSError, subprocess.SubprocessError) as exc:
        report = Report(error=str(exc))
    print(json.dumps(report.as_dict()))
    if report.error:
        print(f"archcheck: {report.error}", file=sys.stderr)
    return 1 if report.error else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
