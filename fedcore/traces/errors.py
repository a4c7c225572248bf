"""The one error trace readers raise, with enough context to fix the file."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

FIELD_LIMIT = 128 * 1024
"""Longest field a trace may hold (the csv module's default limit): no real trace field comes near it."""


class TraceError(ValueError):
    """A trace file is missing, unreadable or malformed; the message names the file and line."""


def _lines(handle: Iterator[bytes], path: Path, at: list[int]) -> Iterator[str]:
    """Decode line by line, so an undecodable byte is reported with its line and column; ``at[0]`` is the line read.

    A UTF-8 byte-order mark opening the file (as spreadsheets save CSV) is dropped, never read into the first column's name."""
    for number, raw in enumerate(handle, start=1):
        at[0] = number
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(
                f"{path}:{number}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8"
            ) from None



def rows(path: Path | str, required: set[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) from a CSV with a header, checking the header has ``required`` columns."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    with handle:
        at = [0]
        reader = csv.DictReader(_lines(iter(handle), path, at))
        try:
            fieldnames = reader.fieldnames
            missing = required - set(fieldnames or [])
            if missing:
                raise TraceError(f"{path}:1: header lacks column(s) {', '.join(sorted(missing))}")
            for row in reader:
                if None in row or any(v is None for v in row.values()):
                    raise TraceError(f"{path}:{reader.line_num}: wrong number of fields")
                yield reader.line_num, row
        except csv.Error as exc:
            line = at[0] or 1
            if "field larger than field limit" in str(exc):
                raise TraceError(f"{path}:{line}: a field is longer than {FIELD_LIMIT} characters") from None
            raise TraceError(f"{path}:{line}: not valid CSV: {exc}") from None
        except OSError as exc:
            raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc


def number(path: Path | str, line: int, row: dict[str, str], column: str, default: float | None = None) -> float:
    """Parse a finite, non-negative numeric field; an empty field gives ``default`` (an error when there is none)."""
    raw = row[column].strip()
    if raw == "" and default is not None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column!r} is not a number: {raw[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{path}:{line}: column {column!r} must be a non-negative, finite number, got {raw[:40]!r}")
    return value
