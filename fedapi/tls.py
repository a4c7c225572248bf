"""Optional mutual TLS for the fedplane API, shared by the control plane, agents and the CLI.

With TLS on, the server demands a client certificate signed by the given CA, so a client
without credentials is refused at the handshake. Paths are PEM files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM paths: this side's certificate and key, and the CA that signs the other side."""

    cert: Path
    key: Path
    ca: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        try:
            return self.cert.read_bytes(), self.key.read_bytes(), self.ca.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read TLS file: {exc}") from exc


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
