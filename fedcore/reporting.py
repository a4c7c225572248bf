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
    """Print rows (dicts sharing keys) as a table on stdout: boxed on a terminal; piped, the title on a line of its own
    and plain aligned columns that are never truncated (``grep``/``awk`` read whole values, as from kubectl). No rows:
    ``empty``, if given, on stderr."""
    if not rows:
        if empty:
            stderr.print(Text(empty))
        return
    if not stdout.is_terminal:
        if title:
            print(title)
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
    ylabel: str = "",
    marks: Sequence[tuple[float, str]] = (),
) -> Path:
    """Line plots over ``x`` written as PNG (matplotlib, ``full`` extra): ``right`` series on a second y axis,
    ``marks`` as labelled vertical lines (a fault, a heal), and the legend below the axes, never over the data."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("plots need matplotlib: pip install 'fedplane[full]'") from exc
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, ys in series.items():
        ax.plot(x, ys, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel or (next(iter(series)) if len(series) == 1 else ""))
    ax.grid(alpha=0.3)
    for k, (at, label) in enumerate(marks):  # labels stepped down so close marks stay readable
        ax.axvline(at, color="0.35", linestyle=":", linewidth=1.2)
        ax.annotate(label, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12 - 11 * (k % 3)),
                    textcoords="offset points", fontsize=8, color="0.25")
    handles, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for k, (name, ys) in enumerate(right.items()):  # colours after the left axis's, never the same line colour
            ax2.plot(x, ys, label=name, linestyle="--", color=f"C{(len(series) + k) % 10}")
        ax2.set_ylabel(right_label)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    fig.legend(handles, labels, loc="lower center", ncol=min(3, max(1, len(labels))), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05 + 0.045 * ((len(labels) - 1) // 3), 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
