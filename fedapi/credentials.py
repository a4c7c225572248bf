"""Credential files: the bearer token a client shows the control plane, with its role and where it was issued.

One JSON object per file (``token``, ``role``, ``cluster``, ``node``, ``target``), mode 0600, written
by ``controlplane serve --admin-credentials`` (the first admin) and ``controlplane credentials``. The CLI
reads one from ``--credentials`` or ``$FEDPLANE_CREDENTIALS``, an agent from ``backend.credentials``, the web
console takes its ``token`` as a bearer header. The token travels as gRPC metadata ``authorization: Bearer
<token>``, or as the first frame on the agents' link. No gRPC here: edge agents import this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

ENV = "FEDPLANE_CREDENTIALS"
METADATA_KEY = "authorization"
SCHEME = "Bearer "
ROLES = ("admin", "operator", "viewer", "agent")
MAX_TOKEN = 256
"""Longer tokens are refused unread (ours are 43 characters)."""
HINT = f"pass --credentials FILE or set ${ENV} (a credential file from 'fedplane controlplane credentials'; " \
       "'controlplane serve --admin-credentials FILE' writes the first)"
"""What a caller without a credential is told to do, by the plane and by the CLI."""


@dataclass(frozen=True, slots=True)
class Credential:
    token: str
    role: str
    cluster: str = ""
    node: str = ""
    target: str = ""
    """The plane's address (host:port, or several comma-separated) this credential was issued by."""


def read(path: str | Path) -> Credential:
    """The credential in ``path``; raises ValueError saying what is wrong (never the token's value)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"credentials {path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"credentials {path}: not a JSON credential file ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"credentials {path}: expected a JSON object")
    fields = {k: raw.get(k, "") for k in ("token", "role", "cluster", "node", "target")}
    bad = [k for k, v in fields.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"credentials {path}: {', '.join(bad)} must be text")
    token = fields["token"]
    if not token or len(token) > MAX_TOKEN or not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError(f"credentials {path}: no usable token (expected 1-{MAX_TOKEN} printable ASCII characters)")
    if fields["role"] not in ROLES:
        raise ValueError(f"credentials {path}: role must be one of {', '.join(ROLES)}")
    return Credential(**fields)


def token_in(path: str) -> str:
    """The token of the credential file ``path`` ("" when no file is named); raises ValueError as :func:`read`."""
    return read(path).token if path else ""


def write(path: str | Path, credential: Credential) -> None:
    """Write ``credential`` to ``path`` readable by its owner only (0600), replacing any file there in one step."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(credential), f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def bearer(token: str) -> tuple[str, str]:
    """The gRPC metadata pair that carries ``token``."""
    return METADATA_KEY, SCHEME + token


def token_of(value: str) -> str:
    """The token in an ``authorization`` value ("" when it is not a bearer token)."""
    return value[len(SCHEME):].strip() if value[:len(SCHEME)].lower() == SCHEME.lower() else ""
