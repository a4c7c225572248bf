"""Run one gossip member on real sockets and print what it sees as JSON lines.

    python -m gossip.node_main --bind 127.0.0.1:7946 --seeds 127.0.0.1:7947 --key-file keys.txt

Lines on stdout: ``{"event": "started", "name": ...}``, then one ``{"event": "member", ...}``
or ``{"event": "record", ...}`` per change, and every ``--report-every`` seconds
``{"event": "members", "members": {name: state}}``. SIGTERM or SIGINT leaves gracefully.
Used by the multi-process tests and handy for poking a cluster by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from gossip.config import GossipConfig
from gossip.effects import MemberEvent
from gossip.keyring import Keyring
from gossip.udp import Event, UdpGossip


def _print(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _event_line(event: Event) -> dict[str, object]:
    if isinstance(event, MemberEvent):
        state = None if event.state is None else event.state.name
        return {"event": "member", "name": event.name, "state": state, "incarnation": event.incarnation}
    return {"event": "record", "owner": event.owner, "key": event.key, "version": event.version, "value": event.value}


async def _main(args: argparse.Namespace) -> None:
    config = GossipConfig().replace(
        probe_interval=args.probe_interval,
        probe_timeout=args.probe_interval / 2,
        pushpull_interval=args.pushpull_interval,
        reap_after=args.reap_after,
        suspicion_mult=args.suspicion_mult,
    )
    keyring = Keyring.load(args.key_file) if args.key_file else None
    member = UdpGossip(args.bind, [s for s in args.seeds.split(",") if s], keyring=keyring, config=config)
    await member.start()
    member.subscribe(lambda event: _print(_event_line(event)))
    _print({"event": "started", "name": member.name})
    for item in args.publish:
        key, _, value = item.partition("=")
        member.publish(key, value)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        states = {name: view.state.name for name, view in member.members().items()}
        _print({"event": "members", "members": states, "refutations": member.metrics.refutations})
        try:
            await asyncio.wait_for(stop.wait(), args.report_every)
        except asyncio.TimeoutError:
            pass
    await member.leave()
    _print({"event": "left", "name": member.name})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gossip.node_main", description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True, help="host:port for UDP and TCP (port 0 picks one)")
    parser.add_argument("--seeds", default="", help="comma-separated host:port of members to join through")
    parser.add_argument("--key-file", help="base64 32-byte keys, one per line, primary first")
    parser.add_argument("--publish", action="append", default=[], help="key=value record to publish at start")
    defaults = GossipConfig()
    parser.add_argument("--probe-interval", type=float, default=defaults.probe_interval)
    parser.add_argument("--pushpull-interval", type=float, default=defaults.pushpull_interval)
    parser.add_argument("--reap-after", type=float, default=defaults.reap_after)
    parser.add_argument("--suspicion-mult", type=float, default=defaults.suspicion_mult)
    parser.add_argument("--report-every", type=float, default=0.5)
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
