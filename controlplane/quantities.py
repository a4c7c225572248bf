"""Kubernetes quantities on the command line: ``--cpu 500m`` or ``2``, ``--memory 512Mi`` or ``1Gi``.

What a kubectl user types means what it means in a pod spec: a bare CPU number is cores, a bare memory number
is bytes. The parsing is :mod:`fedcore.kubeobjects`' (the one reader of quantities), so the CLI and the
Kubernetes adapters agree; requests round up as Kubernetes rounds them.
"""

from __future__ import annotations

from typing import Any

import click

from fedcore import kubeobjects

INT64_MAX = 2**63 - 1


class Cpu(click.ParamType):
    """A CPU request, given as a Kubernetes quantity; the value is millicores."""

    name = "cpu"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            milli = kubeobjects.cpu_milli(str(value).strip())
        except kubeobjects.KubeObjectError as exc:
            self.fail(f"{value!r} is not a CPU quantity such as 500m or 2 ({exc})", param, ctx)
        if not 0 <= milli <= INT64_MAX:
            self.fail(f"{value!r} is out of range (0 to {INT64_MAX}m)", param, ctx)
        return milli


class Memory(click.ParamType):
    """A memory request, given as a Kubernetes quantity; the value is MiB."""

    name = "memory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            mib = kubeobjects.memory_mib(str(value).strip())
        except kubeobjects.KubeObjectError as exc:
            self.fail(f"{value!r} is not a memory quantity such as 512Mi or 1Gi ({exc})", param, ctx)
        if not 0 <= mib <= INT64_MAX:
            self.fail(f"{value!r} is out of range (0 to {INT64_MAX} MiB)", param, ctx)
        return mib
