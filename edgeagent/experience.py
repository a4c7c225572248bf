"""The local experience log: (state, action, outcome) rows the federated learner trains on.

Rows stay on the node (the data never leaves; only model updates do). The log is a
:class:`edgeagent.journals.FrameLog` that rotates at a size limit, keeping one older
file, so an edge board's disk use is bounded by twice the limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgeagent.journals import FrameLog

CURRENT = "experience.log"
OLDER = "experience.1.log"


class ExperienceLog:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._log = FrameLog(directory / CURRENT)

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append a batch (handed to the OS with the next journal commit; a crash loses at most that)."""
        if not rows:
            return
        self._log.append(rows)
        if self._log.size() > self.max_bytes:
            self._log.rotate(self.directory / OLDER)

    def flush(self) -> None:
        self._log.flush()

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every row kept, oldest first (what a training round reads)."""
        older = self.directory / OLDER
        if older.exists():
            log = FrameLog(older)
            try:
                yield from _rows(log)
            finally:
                log.close()
        self._log.flush()
        yield from _rows(self._log)

    def close(self) -> None:
        self._log.close()


def _rows(log: FrameLog) -> Iterator[dict[str, Any]]:
    for batch in log.read():
        yield from batch
