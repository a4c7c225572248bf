"""The lab's credentials for the planes it starts: a served plane writes its admin credential (``serve
--admin-credentials``), the lab reads it and issues what its agents and clients need, as an operator would."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from fedapi import client, credentials
from fedapi import controlplane_pb2 as cp


def admin_token(path: Path, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> str:
    """The token of the admin credential a starting plane writes to ``path``, once it is there; raises RuntimeError
    when it is not within ``timeout_s`` or the plane died (``alive``) first."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if not alive():
            raise RuntimeError(f"the control plane exited before writing its admin credential {path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no admin credential at {path} within {timeout_s:.0f}s")
        time.sleep(0.05)
    return credentials.read(path).token


def issue(target: str, admin: str, out: Path, role: str, cluster: str = "") -> Path:
    """Ask the plane at ``target`` (as admin) for a credential of ``role`` (an agent's: for ``cluster``), written to ``out``."""
    conn = client.connect(target, token=admin)
    try:
        issued = conn.control.IssueCredential(cp.IssueCredentialRequest(role=role, cluster=cluster), timeout=10)
    finally:
        conn.close()
    credentials.write(out, credentials.Credential(issued.token, issued.role, issued.cluster, issued.node, target))
    return out
