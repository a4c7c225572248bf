"""The Flower app directories, written by hand at run time (``flwr new`` needs the internet).

Each holds only ``pyproject.toml``: the components point at this installed package, so the FAB
that ``flwr run`` builds carries no code of its own and the SuperLink's dependency installation
can stay off. Run-config overrides are written as a TOML file beside it. Two apps:
:data:`PLACEMENT` (imitation on recorded teacher decisions, ``fedplane bench federated``) and
:data:`LOOP` (the learning loop on the agents' own experience, ``fedplane federated loop``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from federated.flower import loopconfig, runconfig

PUBLISHER = "fedplane"


@dataclass(frozen=True, slots=True)
class App:
    name: str
    description: str
    serverapp: str
    clientapp: str
    defaults: Mapping[str, str | int | float]
    """The ``[tool.flwr.app.config]`` table: Flower only accepts overrides of keys it declares."""


PLACEMENT = App("fedplane-placement", "fedplane: federated training of the learned placement policy",
                "federated.flower.serverapp:app", "federated.flower.clientapp:app", runconfig.DEFAULTS)
LOOP = App("fedplane-loop", "fedplane: the learning loop, agents' experience to rollout",
           "federated.flower.loopserver:app", "federated.flower.loopclient:app", loopconfig.DEFAULTS)


def toml_value(value: str | float | bool) -> str:
    """A TOML scalar (JSON's string escapes are valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def toml_table(values: Mapping[str, str | int | float | bool]) -> str:
    return "".join(f"{key} = {toml_value(value)}\n" for key, value in values.items())


def write(directory: Path, app: App = PLACEMENT) -> Path:
    """Write ``app`` into ``directory`` (created if needed); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        "[project]\n"
        f'name = "{app.name}"\nversion = "1.0.0"\n'
        f"description = {toml_value(app.description)}\nlicense = \"Apache-2.0\"\n"
        "dependencies = []\n\n"
        f'[tool.flwr.app]\npublisher = "{PUBLISHER}"\n\n'
        "[tool.flwr.app.components]\n"
        f'serverapp = "{app.serverapp}"\nclientapp = "{app.clientapp}"\n\n'
        "[tool.flwr.app.config]\n" + toml_table(app.defaults)
    )
    return directory


def write_overrides(path: Path, overrides: Mapping[str, str | int | float | bool], app: App = PLACEMENT) -> Path:
    """A run-config override file for ``flwr run --run-config``; unknown keys are refused here, early."""
    unknown = set(overrides) - set(app.defaults)
    if unknown:
        raise ValueError(f"unknown run-config keys {sorted(unknown)}; known: {sorted(app.defaults)}")
    path.write_text(toml_table(overrides))
    return path
