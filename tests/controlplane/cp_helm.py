"""A tiny, honest Helm renderer for this chart only (helm is not installable from Debian here).

It understands exactly what deploy/helm/fedplane-controlplane uses: ``{{ .Values.a.b }}``,
``{{ .Values.a.b | quote }}``, ``{{ .Release.Name }}``, ``{{ .Release.Namespace }}`` and
``{{ .Chart.Name }}`` / ``{{ .Chart.AppVersion }}`` (optionally ``| quote``), and whole-line
``{{- if .Values.a.b }}`` / ``{{- else }}`` / ``{{- end }}`` blocks (Helm's truthiness: empty, 0, false are false).
Any other template construct is an error, so the chart cannot silently grow beyond what the tests render.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}")
BLOCK = re.compile(r"^\s*{{-?\s*(if\s+(\S+)|else|end)\s*-?}}\s*$")
SIMPLE = re.compile(r"^\.(Values|Release|Chart)((?:\.[A-Za-z][A-Za-z0-9]*)+)(\s*\|\s*quote)?$")


def render(chart: Path, release: str = "fedplane", namespace: str = "fedplane-system", values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    scope = {
        "Values": {**yaml.safe_load((chart / "values.yaml").read_text()), **(values or {})},
        "Release": {"Name": release, "Namespace": namespace},
        "Chart": {"Name": meta["name"], "AppVersion": meta["appVersion"], "Version": meta["version"]},
    }

    def substitute(match: re.Match[str]) -> str:
        parsed = SIMPLE.match(match.group(1))
        if parsed is None:
            raise ValueError(f"template construct not supported by the test renderer: {match.group(0)!r}")
        value: Any = scope[parsed.group(1)]
        for key in parsed.group(2).strip(".").split("."):
            if not isinstance(value, dict) or key not in value:
                raise KeyError(f"{match.group(0)}: no value {key!r}")
            value = value[key]
        return json.dumps(str(value)) if parsed.group(3) else str(value)

    def lookup(path: str) -> Any:
        parsed = SIMPLE.match(path)
        if parsed is None or parsed.group(3):
            raise ValueError(f"condition not supported by the test renderer: {path!r}")
        value: Any = scope[parsed.group(1)]
        for key in parsed.group(2).strip(".").split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def conditions(text: str) -> str:
        """Keep the lines whose enclosing ``if`` blocks hold (nested blocks allowed)."""
        kept, stack = [], []  # stack of (condition held, in else branch)
        for line in text.splitlines(keepends=True):
            block = BLOCK.match(line)
            if block is None:
                if all(held != in_else for held, in_else in stack):
                    kept.append(line)
            elif block.group(1).startswith("if"):
                stack.append((bool(lookup(block.group(2))), False))
            elif block.group(1) == "else":
                stack[-1] = (stack[-1][0], True)
            else:
                stack.pop()
        if stack:
            raise ValueError("an if block without its end")
        return "".join(kept)

    docs: list[dict[str, Any]] = []
    for template in sorted((chart / "templates").glob("*.yaml")):
        text = ACTION.sub(substitute, conditions(template.read_text()))
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs
