"""What every ``fedplane controlplane`` client command shares: its options, its credential, and one call that
finds the leader (``--target`` may list several members) and turns a gRPC error into one clear line and exit 2.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc

from controlplane import printing
from fedapi import client, credentials, failover
from fedapi.tls import TlsFiles
from fedcore.commands import fail

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_TARGET = os.environ.get("FEDPLANE_CONTROLPLANE", "127.0.0.1:50051")
CREDENTIALS = "fedplane.credentials"
"""Where ``--credentials`` leaves its path in the click context (read by :func:`connect`)."""


def tls_options(f: F) -> F:
    for opt in reversed((
        click.option("--tls-cert", type=click.Path(dir_okay=False), help="PEM certificate of this side (enables mTLS with --tls-key/--tls-ca)."),
        click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of this side."),
        click.option("--tls-ca", type=click.Path(dir_okay=False), help="PEM CA that signs the other side."),
    )):
        f = opt(f)
    return f


def tls_files(cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
    given = [x for x in (cert, key, ca) if x]
    if not given:
        return None
    if len(given) != 3:
        fail("mTLS needs all of --tls-cert, --tls-key and --tls-ca")
    return TlsFiles(Path(cert or ""), Path(key or ""), Path(ca or ""))


def _keep_credentials(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    ctx.meta[CREDENTIALS] = path


def client_options(f: F) -> F:
    f = click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the short form of -o json).")(f)
    f = printing.output_option(f)
    f = click.option("--target", default=DEFAULT_TARGET, show_default=True, help="Control plane address (host:port; replicated: several, comma-separated).")(f)
    f = click.option("--credentials", envvar=credentials.ENV, show_envvar=True, expose_value=False, callback=_keep_credentials,
                     type=click.Path(dir_okay=False), help="Credential file (JSON with a bearer token) to show the control plane.")(f)
    return tls_options(f)


def credential() -> credentials.Credential | None:
    """The credential this command was given (None: none), read once; an unusable file ends the command."""
    ctx = click.get_current_context(silent=True)
    path = ctx.meta.get(CREDENTIALS) if ctx is not None else None
    if not path:
        return None
    try:
        return credentials.read(path)
    except ValueError as exc:
        fail(str(exc))


def plane_target(target: str) -> str:
    """``--target`` as given; left at its default, the plane the credential was issued by (if it names one)."""
    ctx = click.get_current_context(silent=True)
    given = ctx is None or ctx.get_parameter_source("target") is not click.core.ParameterSource.DEFAULT or "FEDPLANE_CONTROLPLANE" in os.environ
    found = None if given else credential()
    return found.target if found is not None and found.target else target


def connect(target: str, tls: TlsFiles | None) -> client.Connection:
    """A connection to one member that shows this command's credential on every call."""
    found = credential()
    try:
        return client.connect(target, tls, found.token if found else "")
    except ValueError as exc:
        fail(str(exc))


def call(target: str, tls: TlsFiles | None, method: str, request: Any) -> Any:
    """One unary call; a gRPC error becomes a clear message and exit code 2.

    ``target`` may list several members (``a:1,b:2``): the call goes to the leader (:mod:`fedapi.failover`: an
    unreachable or silent member passes it on, a standby names the leader, an election in progress is waited out).
    """
    candidates = [t.strip() for t in plane_target(target).split(",") if t.strip()]
    found = credential()
    try:
        return failover.call(candidates, method, request, 600 if method == "RunDrill" else 10, tls, found.token if found else "")
    except ValueError as exc:
        fail(str(exc))
    except failover.NoLeader as exc:
        fail(f"{method} at {exc.tried[0]}" if len(exc.tried) == 1 else f"{method}: no leader answered ({'; '.join(exc.tried)})")
    except failover.Refused as exc:
        fail(f"{method} at {exc}" + _hint(exc.code))


def _hint(code: grpc.StatusCode) -> str:
    """What to do about a credential of too low a role (the plane names the role needed)."""
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return " (ask an admin for a credential of that role: fedplane controlplane credentials --role ...)"
    return ""


