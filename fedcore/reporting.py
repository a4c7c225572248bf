"""Output for people and for machines: JSON on stdout, rich tables and progress bars on stderr, PNG plots.

Progress goes to stderr so ``--json`` output on stdout stays one parseable object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

stderr = Console(stderr=True)
stdout = Console()


def error(message: str) -> None:
    """One error line on stderr, never hard-wrapped and never read as markup: scripts and tests match it whole,
    and a path or a value in it may be longer than the terminal or hold brackets."""
    stderr.print("[red]error:[/red]", Text(message), soft_wrap=True)


def emit_json(obj: Mapping[str, Any]) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=float))


def progress() -> Progress:
    """A progress bar on stderr (silent when stderr is not a terminal and CI wants quiet logs)."""
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(),
        console=stderr, transient=True,
    )


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(title: str, rows: Sequence[Mapping[str, Any]], first: str = "", empty: str = "") -> None:
    """Print rows (dicts sharing keys) as a table on stdout: boxed on a terminal; piped, plain aligned columns that
    are never truncated (``grep``/``awk`` read whole values, as from kubectl). No rows: ``empty``, if given, on stderr."""
    if not rows:
        if empty:
            stderr.print(Text(empty))
        return
    if not stdout.is_terminal:
        keys = list(rows[0])
        cells = [[k or first for k in keys]] + [[fmt(row[k]) for k in keys] for row in rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(keys))]
        for line in cells:
            print("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        return
    out = Table(title=title)
    keys = list(rows[0])
    for key in keys:
        out.add_column(key or first, justify="left" if key == keys[0] else "right")
    for row in rows:
        out.add_row(*(fmt(row[k]) for k in keys))
    stdout.print(out)


def plot_series(
    path: str | Path,
    title: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
) -> Path:
    """Line plots over ``x`` written as PNG; ``right`` series go on a second y axis (matplotlib, ``full`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("plots need matplotlib: pip install 'fedplane[full]'") from exc
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, ys in series.items():
        ax.plot(x, ys, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for name, ys in right.items():
            ax2.plot(x, ys, label=name, linestyle="--")
        ax2.set_ylabel(right_label)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
