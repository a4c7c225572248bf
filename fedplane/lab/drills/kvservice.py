"""The lab's key-value service: one process per stateful replica, writing its volume through the epoch fence.

``python -m fedplane.lab.drills.kvservice --volume DIR --epoch N --port P [--audit FILE]`` serves a line protocol on
127.0.0.1:P: ``PUT key value`` -> ``OK`` once the write is appended to ``data/kv.log`` and fsynced, or ``FENCED``
when the volume's fence (:func:`fedcore.backends.volumes.writing`) no longer allows this replica's epoch (a
hand-off moved the volume on: the write is not made); ``GET key`` -> ``VAL value`` or ``NONE``. At start it
replays its log. Every ``STATUS_EVERY`` writes it records ``data/status.json`` (the fields a hand-off preserves:
the last sequence number, the epoch that wrote it). ``--audit`` appends ``<monotonic time> <epoch> <key>`` for
every write it made, so a drill can tell from the writers themselves whether two ever wrote at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import IO

from fedcore.backends.volumes import STATUS, Fenced, writing

STATUS_EVERY = 50


class Store:
    """The replica's keys, its append-only log and its audit trail."""

    def __init__(self, volume: Path, epoch: int, audit: Path | None) -> None:
        self.volume, self.epoch = volume, epoch
        self.keys: dict[str, str] = {}
        self.seq = 0
        log = volume / "data" / "kv.log"
        if log.exists():
            for line in log.read_text().splitlines():
                key, _, value = line.partition(" ")
                self.keys[key] = value
                self.seq += 1
        self.audit: IO[str] | None = open(audit, "a") if audit else None  # noqa: SIM115 - lives as long as the process

    def put(self, key: str, value: str) -> bool:
        """Write durably under the fence; False when fenced off (nothing written)."""
        try:
            with writing(self.volume, self.epoch) as data:
                data.mkdir(parents=True, exist_ok=True)
                with open(data / "kv.log", "a") as f:
                    f.write(f"{key} {value}\n")
                    f.flush()
                    os.fsync(f.fileno())
                self.seq += 1
                if self.seq % STATUS_EVERY == 0:
                    (data / STATUS).write_text(json.dumps({"last_seq": self.seq, "epoch": self.epoch}))
        except Fenced:
            return False
        self.keys[key] = value
        if self.audit is not None:
            self.audit.write(f"{time.monotonic():.6f} {self.epoch} {key}\n")
            self.audit.flush()
        return True


async def serve(store: Store, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                verb, _, rest = line.decode().strip().partition(" ")
                if verb == "PUT":
                    key, _, value = rest.partition(" ")
                    reply = "OK" if key and store.put(key, value) else "FENCED" if key else "ERR key required"
                elif verb == "GET":
                    reply = f"VAL {store.keys[rest]}" if rest in store.keys else "NONE"
                else:
                    reply = f"ERR unknown verb {verb!r}"
                writer.write(reply.encode() + b"\n")
                await writer.drain()
        except (ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volume", type=Path, required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--audit", type=Path, default=None)
    args = ap.parse_args()
    asyncio.run(serve(Store(args.volume, args.epoch, args.audit), args.port))


if __name__ == "__main__":
    main()
