"""Kubernetes quantities on the command line: ``--cpu 500m`` or ``2``, ``--memory 512Mi`` or ``1Gi``.

What a kubectl user types means what it means in a pod spec: a bare CPU number is cores, a bare memory number
is bytes. The parsing is :mod:`fedcore.kubeobjects`' (the one reader of quantities), so the CLI and the
Kubernetes adapters agree; requests round up as Kubernetes rounds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from fedcore import kubeobjects

INT64_MAX = 2**63 - 1


class Quantity(click.ParamType):
    """A request given as a Kubernetes quantity; the value is an integer in the unit ``parse`` returns."""

    def __init__(self, name: str, parse: Callable[[str], int], unit: str, example: str) -> None:
        self.name, self.parse, self.unit, self.example = name, parse, unit, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            amount = self.parse(str(value).strip())
        except kubeobjects.KubeObjectError as exc:
            self.fail(f"{value!r} is not a {self.name} quantity such as {self.example} ({exc})", param, ctx)
        if not 0 <= amount <= INT64_MAX:
            self.fail(f"{value!r} is out of range (0 to {INT64_MAX} {self.unit})", param, ctx)
        return amount


def Cpu() -> Quantity:  # noqa: N802 (a click type, named as click's are)
    """CPU: ``500m``, ``2`` (cores); the value is millicores."""
    return Quantity("cpu", kubeobjects.cpu_milli, "millicores", "500m or 2")


def Memory() -> Quantity:  # noqa: N802
    """Memory: ``512Mi``, ``1Gi`` (a bare number is bytes); the value is MiB."""
    return Quantity("memory", kubeobjects.memory_mib, "MiB", "512Mi or 1Gi")
