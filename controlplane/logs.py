"""The plane's log: one line per event an operator follows, on the wall clock, as text or JSON.

Every decision the plane records (verdicts, placements, migrations and their steps, evictions, clean-ups, autoscaling
changes, scorer selections) goes through :func:`decision`, so the log and ``controlplane decisions`` never disagree.
``serve --log-format json`` writes one JSON object per line (``time``, ``level``, ``logger``, ``message`` and the
decision's fields) for a log shipper; ``text`` is for a person at a terminal.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

FORMATS = ("text", "json")
_OURS = "_fedplane_logs"
log = logging.getLogger("controlplane.decisions")


class JsonLines(logging.Formatter):
    """One JSON object per record: UTC time, level, logger, message, and the record's ``fields`` if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
        }
        out.update(getattr(record, "fields", {}))
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(fmt: str, level: str = "INFO") -> None:
    """Log to stderr in ``fmt`` (text: UTC ISO times; json: :class:`JsonLines`) — in a process whose logging nobody set
    up yet (``serve`` as a command); an embedding that configured its own (a test run, an application) keeps it."""
    root = logging.getLogger()
    if any(not getattr(h, _OURS, False) for h in root.handlers):
        return
    handler = logging.StreamHandler()
    setattr(handler, _OURS, True)
    if fmt == "json":
        handler.setFormatter(JsonLines())
    else:
        text = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
        text.converter = time.gmtime
        handler.setFormatter(text)
    root.handlers[:] = [handler]
    root.setLevel(level)


def decision(kind: str, workload: str, source: str, target: str, reasons: tuple[str, ...]) -> None:
    """One line for one recorded decision (its wall-clock time is the line's)."""
    where = " ".join(f"{k}={v}" for k, v in (("workload", workload), ("from", source), ("to", target)) if v)
    log.info("%s %s: %s", kind, where, "; ".join(reasons),
             extra={"fields": {"kind": kind, "workload": workload, "source": source, "target": target, "reasons": list(reasons)}})
