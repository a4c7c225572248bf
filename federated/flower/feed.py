"""A regional trainer's pull of its region's experience from the plane (:mod:`controlplane.experiencefeed`).

The trainer runs on a host of its own, so the rows the agents shipped to the plane reach it over the network: one
authenticated GET per round, the newest ``window`` rows of each of the region's agents, zlib-compressed msgpack.
Every row is checked (:meth:`Row.decode`) as when it is read from a log. No torch, no flwr.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

import msgpack

from federated.runtime.experience import Row

MAX_BODY = 256 << 20
"""The most an answer may inflate to."""


class FeedError(RuntimeError):
    """The plane did not hand over the region's experience: the message says why (refused, unreachable, garbled)."""


def read_token(path: Path) -> str:
    """The bearer token in ``path``: a credential file (``fedplane controlplane credentials --role agent --cluster
    REGION``: JSON with its ``token``) or the token alone."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise FeedError(f"token file {path}: {exc.strerror or exc}") from None
    if token.startswith("{"):
        try:
            token = str(json.loads(token).get("token", ""))
        except (ValueError, AttributeError):
            raise FeedError(f"token file {path}: neither a credential file nor a token") from None
    if not token:
        raise FeedError(f"token file {path} is empty")
    return token


def pull(url: str, cluster: str, token: str, window: int, timeout_s: float = 30.0, ca_file: str = "") -> list[Row]:
    """The newest ``window`` rows of each agent of ``cluster`` the plane at ``url`` (``https://host:port``, checked
    against ``ca_file``; ``http://`` on a trusted network) holds."""
    target = f"{url.rstrip('/')}/v1/experience/{urllib.parse.quote(cluster, safe='')}?window={int(window)}"
    request = urllib.request.Request(target, headers={"Authorization": f"Bearer {token}"})
    try:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as reply:
            body = reply.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        raise FeedError(f"{target}: {exc.code} {exc.read(500).decode(errors='replace').strip()}") from None
    except OSError as exc:
        raise FeedError(f"{target}: {getattr(exc, 'reason', exc)}") from None
    inflate = zlib.decompressobj()
    try:
        raw = msgpack.unpackb(inflate.decompress(body, MAX_BODY), raw=False)
    except (zlib.error, ValueError, msgpack.UnpackException) as exc:
        raise FeedError(f"{target}: not an experience answer ({exc})") from None
    if not isinstance(raw, list):
        raise FeedError(f"{target}: not an experience answer (a {type(raw).__name__}, not a list of rows)")
    return [Row.decode(row, f"{target} row {n}") for n, row in enumerate(raw)]
