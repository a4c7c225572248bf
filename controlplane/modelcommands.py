"""``fedplane controlplane models``: what the plane hands its agents, decided on the plane's host.

These act on the plane's ``--models`` directory (:mod:`federated.flower.shelf`), which the running plane re-reads
when it changes: the agents fetch the decision over their link within their ``models.poll_interval``. They hold
the signing key's directory, so they run where the plane runs (as the rounds do), never from an operator's laptop.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from fedcore import reporting
from fedcore.commands import fail

if TYPE_CHECKING:
    from federated.flower.shelf import ModelShelf

_DIR = click.option("--models", "models_dir", required=True, type=click.Path(file_okay=False),
                    help="The plane's models directory (controlplane serve --models).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")


@click.group()
def models() -> None:
    """The models the plane signs and its agents fetch (promote, canary, end-canary, status)."""


def _shelf(models_dir: str) -> ModelShelf:
    from federated.flower.shelf import ModelShelf

    try:
        return ModelShelf(Path(models_dir))
    except (OSError, ValueError) as exc:
        fail(f"--models {models_dir}: {exc}")


def _status(models_dir: str, as_json: bool) -> None:
    shelf = _shelf(models_dir)
    a = shelf.assignment
    summary = {"current": a.current, "canary": a.canary, "weight": a.weight, "nodes": list(a.nodes), "signer": shelf.signer.hex()}
    if as_json:
        reporting.emit_json(summary)
    else:
        trial = f", canary {a.canary} on {a.weight:.0%} of the decisions of {', '.join(a.nodes) or 'every agent'}" if a.canary else ""
        reporting.stderr.print(f"agents run {a.current or 'what they have (nothing promoted)'}{trial}; signer {summary['signer']}")


@models.command()
@click.argument("version", type=click.Path(file_okay=False, exists=True))
@_DIR
@_JSON
def promote(version: str, models_dir: str, as_json: bool) -> None:
    """Make the artifact directory VERSION (a registry version, e.g. registry/v000007) every agent's model."""
    try:
        _shelf(models_dir).promote(Path(version))
    except (OSError, ValueError) as exc:
        fail(f"cannot promote {version}: {exc}")
    _status(models_dir, as_json)


@models.command()
@click.argument("version", type=click.Path(file_okay=False, exists=True))
@_DIR
@click.option("--weight", default=0.2, show_default=True, type=click.FloatRange(0, 1, min_open=True), help="Share of the decisions on trial.")
@click.option("--node", "nodes", multiple=True, metavar="CLUSTER/NODE", help="An agent on trial (repeatable; none: every agent).")
@_JSON
def canary(version: str, models_dir: str, weight: float, nodes: tuple[str, ...], as_json: bool) -> None:
    """Put the artifact directory VERSION on trial beside the current model."""
    try:
        _shelf(models_dir).start_canary(Path(version), weight, nodes)
    except (OSError, ValueError) as exc:
        fail(f"cannot canary {version}: {exc}")
    _status(models_dir, as_json)


@models.command("end-canary")
@_DIR
@_JSON
def end_canary(models_dir: str, as_json: bool) -> None:
    """End the trial: every agent back on the current model alone."""
    _shelf(models_dir).end_canary()
    _status(models_dir, as_json)


@models.command()
@_DIR
@_JSON
def status(models_dir: str, as_json: bool) -> None:
    """What the agents are told to run, and the key they check it with."""
    _status(models_dir, as_json)
