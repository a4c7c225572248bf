"""How listings print, as kubectl's printers do: ``-o table|wide|json|yaml``.

Machines get plain data: every field of the message (zero values included), int64 as numbers (protobuf's JSON
mapping writes them as strings) and enums as plain words (``HEALTH_AGENTS_SILENT`` -> ``agents-silent``: the enum's
type prefix dropped). People get the curated table; ``wide`` adds the columns a row function marks wide-only
(keys starting with :data:`WIDE`). ``--json`` stays as the short form of ``-o json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click
import yaml
from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from fedcore import reporting

OUTPUTS = ("table", "wide", "json", "yaml")
WIDE = "wide:"
"""A row key with this prefix is a column shown only with ``-o wide``."""
F = TypeVar("F", bound=Callable[..., Any])
_META = "fedplane.output"


def output_option(f: F) -> F:
    """``-o/--output``; the choice is kept on the click context for :func:`emit` (commands keep their signatures)."""
    def keep(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value:
            ctx.meta[_META] = value
    return click.option("-o", "--output", type=click.Choice(OUTPUTS), expose_value=False, callback=keep, is_eager=False,
                        help="Output format: table (default), wide (more columns), json or yaml (every field).")(f)


def chosen(as_json: bool) -> str:
    """The output format of the running command (``--json`` means json)."""
    ctx = click.get_current_context(silent=True)
    picked = ctx.meta.get(_META) if ctx is not None else None
    return str(picked or ("json" if as_json else "table"))


def enum_word(enum: EnumDescriptor, number: int) -> str:
    """``HEALTH_AGENTS_SILENT`` of enum ``Health`` -> ``agents-silent`` (an unknown number stays a number's text)."""
    value = enum.values_by_number.get(number)
    if value is None:
        return str(number)
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"
    return value.name.removeprefix(prefix).lower().replace("_", "-")


def plain(message: Message) -> dict[str, Any]:
    """Every field of ``message`` as plain data (see the module docstring)."""
    return {f.name: _value(f, getattr(message, f.name)) for f in message.DESCRIPTOR.fields}


def _value(f: FieldDescriptor, value: Any) -> Any:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        field = f.message_type.fields_by_name["value"]
        return {k: _scalar(field, v) for k, v in value.items()}
    if f.is_repeated:
        return [_scalar(f, v) for v in value]
    return _scalar(f, value)


def _scalar(f: FieldDescriptor, value: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return plain(value)
    if f.type == FieldDescriptor.TYPE_ENUM:
        return enum_word(f.enum_type, value)
    if f.type == FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def emit(as_json: bool, message: Message, title: str, rows: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> None:
    """Print ``message`` in the chosen format; ``rows`` turns its protobuf-JSON form into table rows."""
    output = chosen(as_json)
    if output == "json":
        click.echo(json.dumps(plain(message), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(plain(message), sort_keys=False, allow_unicode=True), nl=False)
    else:
        table = rows(MessageToDict(message, preserving_proto_field_name=True))
        wide = output == "wide"
        reporting.table(title, [{k.removeprefix(WIDE): v for k, v in row.items() if wide or not k.startswith(WIDE)} for row in table])
