"""The agent's effect pipeline: the placement core's effects leave only after their journal commit.

The one rule that makes restarts safe lives here: effects are queued, and once per
event-loop turn the ledger's new operations are written and fsynced to the journal
*before* any queued effect leaves the process (group commit: one fsync, in a worker
thread, releases every effect queued before it started). After each turn the placement
core's next deadline (:meth:`edgeagent.placing.Placer.next_deadline`) is armed as a timer
that runs its ``tick``. The shell (:mod:`edgeagent.daemon`) says how an effect is performed;
the journal is fedcore's :class:`~fedcore.framelog.FrameLog`, rewritten as one snapshot of
the ledger once it has grown past ``journal_max_mib`` (and doubled since the last one).
Decisions' experience rows (:mod:`federated.runtime.experience`) are written with the commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.framelog import FrameLog

from edgeagent.effects import Bind, Effect, Evict, Experience, Publish, ReportNode
from edgeagent.placing import Placer

if TYPE_CHECKING:
    from federated.runtime.experience import ExperienceLog

log = logging.getLogger("edgeagent")


class EffectPipeline:
    """Queues the placer's effects, journals the ledger's operations, performs the effects once durable."""

    def __init__(self, data: Path, snapshot_after: float, experience_max: float,
                 perform: Callable[[list[Effect]], None], spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        """``snapshot_after``: journal bytes before its first rewrite as a snapshot; ``experience_max``: bytes of the
        experience log (in ``data``) before it rotates."""
        self.data = data
        self.snapshot_after = snapshot_after
        self.experience_max = experience_max
        self.perform = perform
        self.spawn = spawn
        self.journal: FrameLog | None = None
        self.placer: Placer | None = None
        self._closing = False
        self._queue: list[Effect] = []
        self._flush_scheduled = False
        self._awaiting: list[Effect] = []
        """Effects waiting for the fsync that makes their journal operations durable."""
        self._syncing = False
        self._snapshot_bytes = 0
        """Size of the last journal snapshot: the journal is rewritten again only once it has doubled."""
        self._timer: asyncio.TimerHandle | None = None
        self._fsync = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-fsync")
        """One thread for every fsync: more would each grow a malloc arena for nothing."""
        self._experience: ExperienceLog | None = None

    def start(self, journal: FrameLog, placer: Placer) -> None:
        """From now on ``placer``'s ledger is journaled to ``journal`` (the one it was replayed from)."""
        self.journal, self.placer = journal, placer

    def apply(self, effects: list[Effect]) -> None:
        """Queue effects; they run after the next journal commit (at most one commit per loop turn)."""
        self._queue.extend(effects)
        if not self._flush_scheduled and not self._closing:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def stop(self) -> None:
        """Take no more effects: those queued from now on are never performed (the agent is leaving)."""
        self._closing = True

    def drain(self) -> None:
        """After :meth:`stop`: commit and sync the ledger's last operations (their effects are dropped)."""
        if self._timer is not None:
            self._timer.cancel()
        self._commit()
        if self.journal is not None:
            self.journal.sync()

    def close(self) -> None:
        for closable in (self.journal, self._experience):
            if closable is not None:
                closable.close()
        self._fsync.shutdown(wait=False)

    def journal_size(self) -> int:
        return self.journal.size() if self.journal else 0

    def experience_log(self) -> ExperienceLog:
        """Opened at the first row: only an agent scoring with a model records experience (and loads its format)."""
        if self._experience is None:
            from federated.runtime.experience import ExperienceLog

            self._experience = ExperienceLog(self.data, self.experience_max)
        return self._experience

    def _commit(self) -> list[Effect]:
        """Append the ledger's new operations to the journal; returns the queued effects."""
        ledger = self._placer().ledger
        ops = ledger.take_ops()
        if ops and self.journal is not None:
            size = self.journal.size()
            if size > max(self.snapshot_after, 2 * self._snapshot_bytes) and not self._syncing:
                try:
                    self.journal.replace([[ledger.snapshot()]])  # durable on return; no fsync thread holds the old file
                    self._snapshot_bytes, ops = self.journal.size(), []
                except OSError as exc:
                    self._snapshot_bytes = size  # next try once the journal doubled again
                    log.warning("journal snapshot failed, appending instead: %s", exc)
            if ops:
                self.journal.append(ops)
        effects, self._queue = self._queue, []
        rows = [e.row for e in effects if isinstance(e, Experience)]
        if rows:
            self.experience_log().write(rows)
        return effects

    def _flush(self) -> None:
        """Commit, then perform: at once if the journal is already durable, else after the next fsync."""
        self._flush_scheduled = False
        effects = self._commit()
        journal = self.journal
        if self._awaiting or (journal is not None and journal.dirty and any(
                isinstance(e, (Publish, Bind, ReportNode, Evict)) for e in effects)):
            self._awaiting.extend(effects)
            if not self._syncing:
                self._syncing = True
                self.spawn(self._sync())
        else:
            self.perform(effects)
        self._arm()

    async def _sync(self) -> None:
        """Group commit: one fsync (in a worker thread) releases every effect queued before it started."""
        try:
            while self._awaiting and self.journal is not None:
                batch, self._awaiting = self._awaiting, []
                self.journal.flush()
                await asyncio.get_running_loop().run_in_executor(self._fsync, self.journal.fsync)
                self.perform(batch)
                if self._experience is not None:
                    self._experience.flush()
        finally:
            self._syncing = False

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(max(self._placer().next_deadline(), loop.time()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.apply(self._placer().tick(asyncio.get_running_loop().time()))

    def _placer(self) -> Placer:
        assert self.placer is not None, "the agent is not running"
        return self.placer
