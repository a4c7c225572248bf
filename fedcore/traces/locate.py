"""Where the traces are: ``--traces DIR``, else ``$FEDPLANE_TRACES``, else ``../shared/traces`` when present."""

from __future__ import annotations

import os
from pathlib import Path

from fedcore.traces.errors import TraceError

OPENB_NODES = "alibaba-openb/openb_node_list_all_node.csv"
OPENB_PODS = "alibaba-openb/openb_pod_list_default.csv"
OPENB_CPU050 = "alibaba-openb/openb_pod_list_cpu050.csv"
DLRM = "alibaba-dlrm/disaggregated_DLRM_trace.csv"


def candidates() -> list[Path]:
    here = Path(__file__).resolve().parents[2]
    found = [Path.cwd() / ".." / "shared" / "traces", here / ".." / "shared" / "traces"]
    env = os.environ.get("FEDPLANE_TRACES")
    return ([Path(env)] if env else []) + found


def traces_dir(explicit: str | Path | None = None) -> Path:
    """The traces folder; raises TraceError saying where it looked when there is none."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise TraceError(f"{path}: no such traces directory")
        return path
    for path in candidates():
        if path.is_dir():
            return path.resolve()
    looked = ", ".join(str(p) for p in candidates())
    raise TraceError(f"no traces directory found (looked in {looked}); pass --traces DIR or set FEDPLANE_TRACES")


def trace_file(explicit: str | Path | None, default: str, traces: str | Path | None = None) -> Path:
    """An explicit file, or ``default`` inside the traces folder."""
    if explicit is not None:
        return Path(explicit)
    return traces_dir(traces) / default
