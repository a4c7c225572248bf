"""Regenerate (or ``--check``) the committed protobuf/gRPC modules from ``fedapi/protos``.

grpc_tools emits bare-name imports between generated modules (``import common_pb2``); they are
rewritten to ``from fedapi import common_pb2`` so the modules import as a package.
Run: ``python -m fedapi.generate`` (write) or ``python -m fedapi.generate --check`` (exit 1 if stale).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
BARE_IMPORT = re.compile(r"^import (\w+_pb2)( as \w+)?$", re.MULTILINE)


def generate(out: Path) -> list[Path]:
    """Run protoc into ``out`` and fix imports; returns the files written."""
    from grpc_tools import protoc  # the 'test' extra: generated code is committed

    files = sorted(str(p.name) for p in PROTOS.glob("*.proto"))
    args = ["protoc", f"-I{PROTOS}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {files}")
    written = sorted(p for p in out.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")))
    for path in written:
        text = BARE_IMPORT.sub(r"from fedapi import \1\2", path.read_text())
        if not path.name.endswith("_pb2.py"):  # grpc_tools' stubs are loosely typed; callers still get the message types
            text = "# mypy: ignore-errors\n" + text
        path.write_text(text)
    return written


def stale() -> list[str]:
    """Names of generated files that differ from what the protos generate now."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [p.name for p in fresh if not (HERE / p.name).exists() or (HERE / p.name).read_text() != p.read_text()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        if bad:
            print(f"stale generated files: {', '.join(bad)}; run python -m fedapi.generate", file=sys.stderr)
            return 1
        return 0
    for path in generate(HERE):
        print(path.relative_to(HERE.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
