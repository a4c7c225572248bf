"""Polling a served control plane from tests: a gRPC error while it starts or restarts reads as 'not yet'."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Return ``check()``'s first truthy answer within ``timeout`` seconds, else fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except grpc.RpcError:
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s")
