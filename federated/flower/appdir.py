"""The Flower app directory, written by hand at run time (``flwr new`` needs the internet).

It holds only ``pyproject.toml``: the components point at this installed package
(``federated.flower.serverapp:app`` and ``federated.flower.clientapp:app``), so the FAB that
``flwr run`` builds carries no code of its own and the SuperLink's dependency installation can
stay off. Run-config overrides are written as a TOML file beside it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from federated.flower.runconfig import DEFAULTS

PUBLISHER = "fedplane"
NAME = "fedplane-placement"


def toml_value(value: str | float | bool) -> str:
    """A TOML scalar (JSON's string escapes are valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def toml_table(values: Mapping[str, str | int | float | bool]) -> str:
    return "".join(f"{key} = {toml_value(value)}\n" for key, value in values.items())


def write(directory: Path) -> Path:
    """Write the app into ``directory`` (created if needed); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        "[project]\n"
        f'name = "{NAME}"\nversion = "1.0.0"\n'
        'description = "fedplane: federated training of the learned placement policy"\nlicense = "Apache-2.0"\n'
        "dependencies = []\n\n"
        f'[tool.flwr.app]\npublisher = "{PUBLISHER}"\n\n'
        "[tool.flwr.app.components]\n"
        'serverapp = "federated.flower.serverapp:app"\nclientapp = "federated.flower.clientapp:app"\n\n'
        "[tool.flwr.app.config]\n" + toml_table(DEFAULTS)
    )
    return directory


def write_overrides(path: Path, overrides: Mapping[str, str | int | float | bool]) -> Path:
    """A run-config override file for ``flwr run --run-config``; unknown keys are refused here, early."""
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown run-config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    path.write_text(toml_table(overrides))
    return path
