"""A policy artifact as one signed bundle: what the plane's registry ships to agents and an agent checks before loading.

A bundle is a msgpack map ``{"format": FORMAT, "files": {name: bytes}}`` of the artifact's manifest and ONNX files
(not the registry's fp32 training state: agents never train on it). The plane signs, with Ed25519, the statement
``FORMAT \\0 version \\0 sha256(bundle)``, so a bundle is bound to the version name it was published as: a
replayed older bundle under a newer name, a truncated download or a flipped bit is refused before anything is
written where the agent's watcher looks. :func:`unpack` then writes the files into a staging directory, verifies
the artifact there (its manifest's own sha256 of each file, :func:`federated.runtime.artifacts.load`) and renames
it into place, so the watcher never sees half a model.

Verification goes through PyNaCl's cffi module (``nacl._sodium``: one libsodium call, ``crypto_sign_open``), not ``nacl.signing``, whose
package imports every binding PyNaCl has (see :mod:`gossip.keyring`): an agent keeps every import resident.
Signing happens on the plane only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import msgpack

from federated.runtime import artifacts

FORMAT = "fedplane-model/1"
FILES = (artifacts.MANIFEST, artifacts.FP32, artifacts.INT8)
"""What a bundle carries of an artifact directory."""
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
MAX_BUNDLE = 64 * 1024 * 1024
"""The largest bundle an agent accepts (today's are ~150 KiB)."""


class BundleError(ValueError):
    """The bundle is not what the plane signed (or not a bundle at all): keep the model we have."""


@dataclass(frozen=True, slots=True)
class Signed:
    """A bundle's identity as the plane vouches for it."""

    version: str
    sha256: str
    size: int
    signature: bytes


def pack(directory: Path) -> bytes:
    """The bundle of the artifact in ``directory`` (verified first: the plane never signs a broken model)."""
    artifacts.load(directory)
    return msgpack.packb({"format": FORMAT, "files": {name: (directory / name).read_bytes() for name in FILES}},
                         use_bin_type=True)  # type: ignore[no-any-return]


def statement(version: str, digest: str) -> bytes:
    """What the signature covers."""
    return f"{FORMAT}\0{version}\0{digest}".encode()


def sign(seed: bytes, version: str, bundle: bytes) -> Signed:
    """``bundle`` as ``version``, signed with the Ed25519 key of ``seed`` (32 bytes)."""
    from nacl.signing import SigningKey

    digest = hashlib.sha256(bundle).hexdigest()
    return Signed(version, digest, len(bundle), SigningKey(seed).sign(statement(version, digest)).signature)


def public_key(seed: bytes) -> bytes:
    """The Ed25519 public key of ``seed``: what agents pin."""
    from nacl.signing import SigningKey

    return bytes(SigningKey(seed).verify_key)


def check(signer: bytes, signed: Signed, bundle: bytes) -> None:
    """Raise :class:`BundleError` unless ``bundle`` is ``signed.version`` as the holder of ``signer`` signed it."""
    if len(signer) != PUBLIC_KEY_BYTES or len(signed.signature) != SIGNATURE_BYTES:
        raise BundleError(f"model {signed.version}: malformed signer key or signature")
    if len(bundle) != signed.size:
        raise BundleError(f"model {signed.version}: {len(bundle)} bytes, the plane signed {signed.size}")
    digest = hashlib.sha256(bundle).hexdigest()
    if digest != signed.sha256:
        raise BundleError(f"model {signed.version}: sha256 {digest[:12]}... is not the signed {signed.sha256[:12]}...")
    from nacl._sodium import ffi, lib

    sealed = signed.signature + statement(signed.version, digest)  # crypto_sign_open's input: signature, then message
    opened, length = ffi.new("unsigned char[]", len(sealed)), ffi.new("unsigned long long *")
    if lib.crypto_sign_open(opened, length, sealed, len(sealed), signer) != 0:
        raise BundleError(f"model {signed.version}: bad signature (not signed by the plane this agent trusts)")


def unpack(bundle: bytes, target: Path) -> None:
    """Write the bundle's artifact to ``target`` (absent), verified, in one rename; raises :class:`BundleError`."""
    try:
        body = msgpack.unpackb(bundle, raw=False)
        files = body["files"] if isinstance(body, dict) and body.get("format") == FORMAT else None
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise BundleError(f"not a model bundle: {exc}") from None
    if not isinstance(files, dict) or sorted(files) != sorted(FILES) or not all(isinstance(v, bytes) for v in files.values()):
        raise BundleError(f"a model bundle holds exactly {', '.join(FILES)}")
    staging = target.parent / f".incoming-{target.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        try:
            artifacts.load(staging)
        except artifacts.ArtifactError as exc:
            raise BundleError(str(exc)) from None
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
