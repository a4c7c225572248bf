"""The colocation bench's real node: a latency-sensitive server and CPU burners on this machine, isolated by the agent.

Replays one node's day (the node a policy packed hardest in :mod:`colocationfleet`), compressed: each
segment sets the online request rate to the node's online usage share and the batch cgroup's CPU quota
to the batch quota the policy granted there, both scaled from the node's cores to this machine's.

- Online: ``WORKERS`` server processes on one port (``SO_REUSEPORT``), each answering a line with a fixed
  CPU job (``ROUNDS`` sha256 rounds over 4 KiB, about ``WORK_MS`` on an idle core), in the ``online`` group.
- Client: open-loop Poisson arrivals over ``CONNECTIONS`` connections, latency timed from the moment a
  request was due (a late send counts against the server: no coordinated omission), in the ``online`` group.
- Batch: one busy-loop process per core in the ``batch`` group, capped by :func:`edgeagent.isolation.apply`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from edgeagent import isolation

WORK_MS = 4.0
CONNECTIONS = 32
WORKERS = 2
SLO_MS = 100.0
BATCH_MEMORY = 256 << 20
_BLOCK = b"x" * 4096


def job(rounds: int) -> bytes:
    """The fixed CPU job one request costs."""
    digest = b""
    for _ in range(rounds):
        digest = hashlib.sha256(_BLOCK + digest).digest()
    return digest


def calibrate() -> int:
    """Rounds that take ``WORK_MS`` of CPU here (measured once, before any load)."""
    t0 = time.process_time()
    job(2000)
    per = (time.process_time() - t0) / 2000
    return max(1, int(WORK_MS / 1000 / per))


def serve(port: int, rounds: int) -> None:
    """One server worker (a process): answer each line with the job's digest."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(256)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readline():
            writer.write(job(rounds).hex()[:16].encode() + b"\n")
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock)
        await server.serve_forever()

    asyncio.run(main())


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the server, waiting (up to 30 s) for its workers to listen."""
    for _ in range(300):
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the server on port {port} never listened")


def drive(port: int, rates: list[float], segment_s: float, seed: int) -> None:
    """The client (a process): once connected, prints its start time, then sends Poisson requests at
    ``rates[k]`` per second in segment k from it, and prints the latencies (ms)."""
    rng = random.Random(seed)

    async def main() -> list[float]:
        queue: asyncio.Queue[float] = asyncio.Queue()
        lat: list[float] = []
        links = [await _connect(port) for _ in range(CONNECTIONS)]
        start = time.time() + 0.5
        print(json.dumps(start), flush=True)

        async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while (due := await queue.get()) >= 0:
                writer.write(b"q\n")
                await writer.drain()
                await reader.readline()
                lat.append((time.time() - due) * 1000)
            writer.close()

        workers = [asyncio.create_task(conn(*link)) for link in links]
        await asyncio.sleep(max(0.0, start - time.time()))
        due = start
        for k, rate in enumerate(rates):
            end = start + (k + 1) * segment_s
            while rate > 0:
                due += rng.expovariate(rate)
                if due >= end:
                    break
                await asyncio.sleep(max(0.0, due - time.time()))
                queue.put_nowait(due)
            due = max(due, end) if rate > 0 else end
        for _ in workers:
            queue.put_nowait(-1.0)
        await asyncio.gather(*workers)
        return lat

    print(json.dumps(asyncio.run(main())))


def _spawn(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def replay(online: list[float], batch: list[float], segment_s: float, *, seed: int = 0,
           root: Path = Path("/sys/fs/cgroup")) -> dict[str, float]:
    """Replay one node's segments (shares of the node) here; the online latency figures."""
    layout = isolation.detect(root)
    cores = os.cpu_count() or 1
    isolation.apply(layout, isolation.BatchLimits(None, BATCH_MEMORY))
    procs: list[subprocess.Popen[str]] = []
    try:
        rounds = calibrate()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mod = "from fedplane.lab.benches import colocationnode as c"
        for _ in range(WORKERS):
            procs.append(_spawn(f"{mod}; c.serve({port}, {rounds})"))
            isolation.attach(layout, isolation.ONLINE, procs[-1].pid)
        burners = []
        if any(b > 0 for b in batch):
            for _ in range(cores):
                burners.append(_spawn("while True: pass"))
                isolation.attach(layout, isolation.BATCH, burners[-1].pid)
            procs += burners
        rates = [u * cores * 1000 / WORK_MS for u in online]
        client = _spawn(f"{mod}; c.drive({port}, {rates!r}, {segment_s}, {seed})")
        isolation.attach(layout, isolation.ONLINE, client.pid)
        procs.append(client)
        assert client.stdout is not None
        start = float(client.stdout.readline())
        for k, share in enumerate(batch):
            isolation.apply(layout, isolation.BatchLimits(int(share * cores * 1000), BATCH_MEMORY))
            time.sleep(max(0.0, start + (k + 1) * segment_s - time.time()))
        out, _ = client.communicate(timeout=60 + segment_s * len(online))
        lat = sorted(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        isolation.remove(layout)
    if not lat:
        raise RuntimeError("the replay measured no request")
    return {"online_p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))], "online_p50_ms": lat[len(lat) // 2],
            "online_slo_miss_pct": 100 * sum(x > SLO_MS for x in lat) / len(lat), "requests": float(len(lat)),
            "server_cores_at_peak": max(online) * cores}
