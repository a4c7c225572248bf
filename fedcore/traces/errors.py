"""The one error trace readers raise, with enough context to fix the file."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path


class TraceError(ValueError):
    """A trace file is missing, unreadable or malformed; the message names the file and line."""


def rows(path: Path | str, required: set[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) from a CSV with a header, checking the header has ``required`` columns."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = required - set(reader.fieldnames or [])
        if missing:
            raise TraceError(f"{path}:1: header lacks column(s) {', '.join(sorted(missing))}")
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise TraceError(f"{path}:{reader.line_num}: wrong number of fields")
            yield reader.line_num, row


def number(path: Path | str, line: int, row: dict[str, str], column: str, default: float | None = None) -> float:
    """Parse a numeric field; an empty field gives ``default`` (an error when there is none)."""
    raw = row[column].strip()
    if raw == "" and default is not None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column!r} is not a number: {raw!r}") from None
    if value != value or value < 0:
        raise TraceError(f"{path}:{line}: column {column!r} must be a non-negative number, got {raw!r}")
    return value
