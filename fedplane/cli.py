"""Compose the ``fedplane`` command from the sub-commands each package provides.

Sub-commands are imported lazily, by name, so ``fedplane agent`` on an edge node
never pays for the imports of the control plane or of training.
"""

from __future__ import annotations

import importlib
import os

import click

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


class LazyGroup(click.Group):
    """A click group whose commands are ``module:attribute`` strings loaded on first use."""

    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attr = self.lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


BENCHES = {
    "schedule": "fedplane.lab.benches.commands:bench_schedule",
    "gossip": "fedplane.lab.benches.gossipcmd:bench_gossip",
    "claims": "fedplane.lab.benches.commands:bench_claims",
    "policy": "fedplane.lab.benches.commands:bench_policy",
    "generalize": "fedplane.lab.benches.commands:bench_generalize",
    "federated": "fedplane.lab.benches.commands:bench_federated",
    "agent": "fedplane.lab.benches.commands:bench_agent",
    "kube": "fedplane.lab.benches.kubebench:bench_kube",
    "autoscale": "fedplane.lab.benches.commands:bench_autoscale",
    "loop": "fedplane.lab.loop.loopcmd:bench_loop",
    "scale": "fedplane.lab.benches.scalebench:bench_scale",
    "console": "fedplane.lab.benches.consolebench:bench_console",
    "colocation": "fedplane.lab.benches.colocationbench:bench_colocation",
}

COMMANDS = {
    "controlplane": "controlplane.commands:controlplane",
    "drill": "fedplane.lab.drills.commands:drill",
    "sim": "fedcore.commands:sim",
    "demo": "fedplane.lab.demo.command:demo",
    "policy": "federated.commands:policy",
    "federated": "fedplane.lab.loop.loopcmd:federated",
    "agent": "edgeagent.commands:agent",
    "autoscale": "controlplane.autoscaling.commands:autoscale",
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="fedplane")
def main() -> None:
    """fedplane: federated multi-cluster and edge scheduling control plane."""


@main.group(cls=LazyGroup, lazy=BENCHES)
def bench() -> None:
    """Benchmarks: each prints its figures as JSON beside its baseline from the same run."""
