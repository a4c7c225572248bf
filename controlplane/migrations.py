"""The migration executor: journaled, idempotent steps that move replicas between clusters.

Steps (each journaled as intent before it acts and done after):
1. ``create-target``: create the workload in the target at the new epoch (409 -> read back; if
   it exists, scale it to the intended total) -> TARGET_CREATED.
2. ``await-ready``: wait until the target has the intended total ready (a value, not an error;
   a deadline turns it into a failure) -> TARGET_READY, and the target placement is recorded.
3. ``remove-source``: scale the source down by the moved replicas or delete it (404 = done). If the
   source is unreachable, its placement is left ``stale`` (holding any replicas not moved) for cleanup
   once it answers -> DONE; the planner fails over what a stale placement on a failed cluster still holds.
A stateful workload's migration first hands its volume over (``fence-source``, ``checkpoint``, ``restore-target``:
:mod:`controlplane.handoffs`), so its replicas never have two writers. Temporary errors retry with exponential backoff; a permanent error or too many attempts fails the
migration, rolls back what it created in the target, and leaves the source untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controlplane.handoffs import HANDOFF, UNFENCE, Handoff, Volumes
from controlplane.journal import Journal, Kind, Migration, MigrationState
from controlplane.registry import Home, Placement, PlacementState, Registry
from fedcore.backends import errors
from fedcore.backends.contract import ClusterBackend

Backends = Callable[[str], ClusterBackend]
CrashHook = Callable[[str, str], None]


class SimulatedCrash(BaseException):
    """Raised by a crash hook: the process 'dies' here (crash tests and the control-plane-crash drill)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_s: float = 0.1
    max_s: float = 5.0
    max_attempts: int = 8
    ready_timeout_s: float = 60.0

    def delay(self, attempts: int) -> float:
        return float(min(self.max_s, self.base_s * 2 ** max(0, attempts - 1)))


def no_crash(step: str, when: str) -> None:
    """The production crash hook: never crashes."""


class Executor:
    def __init__(
        self, journal: Journal, registry: Registry, backends: Backends, retry: RetryPolicy = RetryPolicy(),
        crash: CrashHook = no_crash, observe: Callable[[Migration], None] = lambda m: None, volumes: Volumes | None = None,
    ) -> None:
        self.journal, self.registry, self.backends = journal, registry, backends
        self.retry, self.crash, self.observe = retry, crash, observe
        self.handoff = Handoff(volumes, self._intent_now, self._save_now)
        self._now = 0.0

    def start(self, m: Migration, now: float) -> Migration:
        m = m.moved(created=now, updated=now, state=MigrationState.PLANNED)
        self.journal.save(m)
        self.journal.log(m.id, "plan", "done", now, f"{m.kind.value} {m.workload}: {m.source} -> {m.target} x{m.replicas} epoch {m.epoch}")
        self.observe(m)
        return m

    def cancel(self, mid: str, now: float) -> Migration:
        m = self.journal.get(mid)
        if m is None:
            raise KeyError(f"no migration {mid!r}")
        if m.state.terminal:
            return m
        if m.state not in (MigrationState.PLANNED, *UNFENCE, MigrationState.TARGET_CREATED) or (m.state is MigrationState.TARGET_CREATED and self._stateful(m)):
            raise ValueError(f"migration {mid} is {m.state.value}: the target already serves (or holds the state), too late to cancel")
        note = self._rollback(m, now)
        return self._save(m.moved(state=MigrationState.CANCELLED, error=f"cancelled; {note}"), now, "cancel")

    def close(self, m: Migration, state: MigrationState, error: str, now: float) -> Migration:
        """End a migration without touching any cluster (its workload is being deleted)."""
        return self._save(m.moved(state=state, error=error), now, state.value)

    def advance(self, now: float) -> list[Migration]:
        """Move every due migration as far as it can go now; returns them in their new state."""
        return [self.run(m, now) for m in self.journal.active() if m.next_at <= now]

    def run(self, m: Migration, now: float) -> Migration:
        while not m.state.terminal:
            try:
                nxt = self._step(m, now)
            except errors.TemporaryError as exc:
                return self._retry(m, exc, now)
            except (errors.PermanentError, ValueError) as exc:
                return self._fail(m, f"permanent error: {exc}", now)
            if nxt is None:
                return m
            m = nxt
        return m

    # -- steps -----------------------------------------------------------------------------
    def _step(self, m: Migration, now: float) -> Migration | None:
        self._now = now
        if (m.state is MigrationState.PLANNED and self._stateful(m)) or m.state in HANDOFF[:2]:
            return self.handoff.step(m)
        if m.state in (MigrationState.PLANNED, MigrationState.RESTORED):
            return self._create_target(m, now)
        if m.state is MigrationState.TARGET_CREATED:
            return self._await_ready(m, now)
        return self._remove_source(m, now)

    def _create_target(self, m: Migration, now: float) -> Migration:
        workload = self.registry.workload(m.workload)
        if workload is None:
            raise ValueError(f"workload {m.workload} is no longer registered")
        self._intent(m, "create-target", now)
        target = self.backends(m.target)
        try:
            target.create_workload(workload.spec(m.target_total, m.epoch, scheduler_name=self.registry.scheduler_name(m.target)))
        except errors.Conflict:
            existing = target.get_workload(m.workload)
            if existing.spec.replicas < m.target_total:  # never shrink: a sibling migration may have grown it
                target.scale_workload(m.workload, m.target_total)
        self.crash("create-target", "after")
        return self._save(m.moved(state=MigrationState.TARGET_CREATED), now, "create-target")

    def _await_ready(self, m: Migration, now: float) -> Migration | None:
        try:
            found = self.backends(m.target).get_workload(m.workload)
        except errors.NotFound:
            found = None
        if found is None or found.spec.replicas < m.target_total:
            # the target lost what create-target made (an embedded twin rebuilt after a restart): make it again (a
            # stateful one on the volume restored there: its replicas may have written since)
            again = MigrationState.RESTORED if self._stateful(m) else MigrationState.PLANNED
            return self._save(m.moved(state=again), now, "target-lost")
        ready = found.ready_replicas
        if ready < m.target_total:
            if now - m.updated > self.retry.ready_timeout_s:
                raise errors.PermanentError(m.target, f"{ready}/{m.target_total} ready after {self.retry.ready_timeout_s:.0f}s")
            return None
        self._intent(m, "await-ready", now)
        with self.registry.store.tx():
            here = {p.cluster: p.replicas for p in self.registry.placements(m.workload) if p.state is PlacementState.PLACED}
            total = max(m.target_total, here.get(m.target, 0))
            self.registry.set_placement(Placement(m.workload, m.target, total, m.epoch))
            return self._save(m.moved(state=MigrationState.TARGET_READY), now, "await-ready")

    def _remove_source(self, m: Migration, now: float) -> Migration:
        current = {p.cluster: p for p in self.registry.placements(m.workload)}.get(m.source)
        remaining = max(0, (current.replicas if current else 0) - m.replicas)
        self._intent(m, "remove-source", now)
        try:
            source = self.backends(m.source)
            if remaining:
                source.scale_workload(m.workload, remaining)
            else:
                source.delete_workload(m.workload)
        except errors.NotFound:
            pass
        except errors.TemporaryError as exc:
            # the target already serves the moved replicas: whatever the kind, the move is made; retrying here
            # would keep the workload busy (no failover of the rest) while its source may be gone for good
            with self.registry.store.tx():
                if current is not None:
                    self.registry.set_placement(Placement(m.workload, m.source, remaining, current.epoch, PlacementState.STALE))
                if m.kind is Kind.FAILOVER:
                    self.registry.add_home(Home(m.workload, m.source, m.target, m.replicas))
                return self._save(m.moved(state=MigrationState.DONE, error=f"source left stale until it answers: {exc}"), now, "remove-source")
        self.crash("remove-source", "after")
        if self._stateful(m):
            self.handoff.finish(m)
        with self.registry.store.tx():
            if remaining and current is not None:
                self.registry.set_placement(Placement(m.workload, m.source, remaining, current.epoch))
            else:
                self.registry.drop_placement(m.workload, m.source)
            if m.kind is Kind.FAILOVER:
                self.registry.add_home(Home(m.workload, m.source, m.target, m.replicas))
            return self._save(m.moved(state=MigrationState.DONE), now, "remove-source")

    # -- bookkeeping -----------------------------------------------------------------------------
    def _stateful(self, m: Migration) -> bool:
        w = self.registry.workload(m.workload)
        return w is not None and w.stateful

    def _intent_now(self, m: Migration, step: str) -> None:
        self._intent(m, step, self._now)

    def _save_now(self, m: Migration, step: str) -> Migration:
        self.crash(step, "after")  # acted, not yet journaled: a crash here re-runs the (idempotent) step
        return self._save(m, self._now, step)

    def _intent(self, m: Migration, step: str, now: float) -> None:
        self.journal.log(m.id, step, "intent", now)
        self.crash(step, "before")

    def _save(self, m: Migration, now: float, step: str) -> Migration:
        m = m.moved(updated=now, attempts=0, next_at=0.0)
        with self.registry.store.tx():
            self.journal.save(m)
            self.journal.log(m.id, step, "done", now, m.error)
        self.observe(m)
        return m

    def _retry(self, m: Migration, exc: errors.BackendError, now: float) -> Migration:
        attempts = m.attempts + 1
        if attempts >= self.retry.max_attempts:
            return self._fail(m, f"gave up after {attempts} attempts: {exc}", now)
        m = m.moved(attempts=attempts, next_at=now + self.retry.delay(attempts), error=f"retrying: {exc}")
        self.journal.save(m)
        self.journal.log(m.id, "retry", "done", now, m.error)
        return m

    def _fail(self, m: Migration, error: str, now: float) -> Migration:
        note = self._rollback(m, now)
        return self._save(m.moved(state=MigrationState.FAILED, error=f"{error}; {note}"), now, "fail")

    def _rollback(self, m: Migration, now: float) -> str:
        """Undo what the migration put in the target (best effort); the source was never touched but for a hand-off's
        fence, lifted while the state has not reached the target."""
        if m.state in UNFENCE[1:]:
            return self.handoff.unfence(m)
        if self._stateful(m) and m.state is not MigrationState.PLANNED:
            return f"target {m.target} kept: it holds the state (the source stays fenced)"
        if m.state not in (MigrationState.PLANNED, MigrationState.TARGET_CREATED):
            return "target kept (it already serves or holds the state)"
        before = m.target_total - m.replicas
        self.journal.log(m.id, "rollback", "intent", now)
        try:
            target = self.backends(m.target)
            if before > 0:
                target.scale_workload(m.workload, before)
            else:
                target.delete_workload(m.workload)
        except errors.NotFound:
            pass
        except errors.BackendError as exc:
            return f"rollback of {m.target} failed ({exc}); workload left on {m.source}"
        self.journal.log(m.id, "rollback", "done", now)
        return f"target {m.target} rolled back; workload left on {m.source}"
