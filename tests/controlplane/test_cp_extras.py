"""The embedded control plane runs on the `full` extra alone: etcd's client belongs to the `ha` extra."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
sys.modules["etcd3gw"] = None  # as if the 'ha' extra were not installed
import controlplane.server, fedplane.lab.demo.planedemo, controlplane.service
from controlplane.etcdstore import EtcdClient
from controlplane.store import StoreError
try:
    EtcdClient(["http://127.0.0.1:2379"])
except StoreError as exc:
    print(exc)
"""


def test_control_plane_imports_without_the_etcd_client_and_says_what_to_install() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'fedplane[ha]'" in out.stdout
