"""The ``fedplane`` executable: ``fedplane agent``'s plain start goes straight to the daemon.

Everything else — and the agent's help and errors — goes through the click command
tree in :mod:`fedplane.cli`. The edge daemon skips click because every module it
imports stays resident for its whole life (see :mod:`edgeagent.entry`).
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["agent"]:
        from edgeagent.entry import run_from_argv

        if run_from_argv(args[1:]):
            return
    from fedplane.cli import main as cli

    cli()
