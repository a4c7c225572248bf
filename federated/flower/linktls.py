"""The SuperLink <-> SuperNode channel, secure by default: TLS on the SuperLink and SuperNode authentication.

A trainer's SuperNode joins the plane's SuperLink over the network, so the channel carries model weights and the
rounds' instructions between hosts. The SuperLink serves TLS with a certificate for its address, signed by a CA that
lives in the service's directory (made once, kept: trainers keep a copy of ``ca.crt`` as ``--root-certificates``),
and admits only SuperNodes whose public key it was told (``--enable-supernode-auth``; each trainer signs with its
``--auth-supernode-private-key``, an OpenSSH EC key). Why a CA of its own and not the plane's ``--tls-*`` files: the
plane's certificates are for mTLS between the plane's processes and may not name the SuperLink's address; the rounds
service needs nothing from the operator to be secure, and ``--insecure`` stays an explicit opt-out.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
CA_NAME = "fedplane SuperLink CA"


@dataclass(frozen=True, slots=True)
class LinkSecurity:
    """The files of a secure SuperLink in ``directory``: its CA, its server certificate, the trainers' keys."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def cert(self) -> Path:
        return self.directory / "superlink.crt"

    @property
    def key(self) -> Path:
        return self.directory / "superlink.key"

    def superlink_args(self) -> list[str]:
        """``flower-superlink`` flags: TLS with the service's certificate, and only registered SuperNodes."""
        return ["--ssl-ca-certfile", str(self.ca), "--ssl-certfile", str(self.cert), "--ssl-keyfile", str(self.key),
                "--enable-supernode-auth"]

    def supernode_args(self, name: str) -> list[str]:
        """``flower-supernode`` flags for trainer ``name``: verify the SuperLink, sign with the trainer's key."""
        return ["--root-certificates", str(self.ca), "--auth-supernode-private-key", str(self.node_key(name))]

    def node_key(self, name: str) -> Path:
        return self.directory / "supernodes" / f"{name}.key"

    def node_public_key(self, name: str) -> Path:
        return self.directory / "supernodes" / f"{name}.pub"


def prepare(directory: Path, host: str) -> LinkSecurity:
    """The CA (made the first time, kept after) and a fresh server certificate naming ``host`` and loopback."""
    directory.mkdir(parents=True, exist_ok=True)
    link = LinkSecurity(directory)
    ca_key_path = directory / "ca.key"
    if link.ca.is_file() and ca_key_path.is_file():
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
        ca = x509.load_pem_x509_certificate(link.ca.read_bytes())
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_path}: not an EC private key")
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate(_name(CA_NAME), ca_key.public_key(), ca_key, _name(CA_NAME), ca=True)
        _write_key(ca_key_path, ca_key)
        link.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(_name(f"fedplane SuperLink {host}"), server_key.public_key(), ca_key, ca.subject, ca=False, host=host)
    _write_key(link.key, server_key)
    link.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    return link


def node_keys(link: LinkSecurity, name: str) -> Path:
    """Trainer ``name``'s key pair (made the first time): returns the public key the SuperLink is told."""
    key_path, public_path = link.node_key(name), link.node_public_key(name)
    if not (key_path.is_file() and public_path.is_file()):
        key_path.parent.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP384R1())
        _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                   serialization.NoEncryption()))
        public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return public_path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: x509.Name, public_key: ec.EllipticCurvePublicKey, signer: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 ca: bool, host: str = "") -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = (builder.add_extension(x509.SubjectAlternativeName(_alt_names(host)), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    return builder.sign(signer, hashes.SHA256())


def _alt_names(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [*names, x509.DNSName(host)] if host != "localhost" else names
    return names if str(address) == "127.0.0.1" else [*names, x509.IPAddress(address)]


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    _write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _write_private(path: Path, data: bytes) -> None:
    """A private key readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
