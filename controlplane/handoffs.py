"""The stateful hand-off: a stateful workload's migration carries its volume, with never two writers.

Before the make-before-break steps of :mod:`controlplane.migrations`, a stateful workload's migration takes three
more, each journaled (intent, then done with the state it reached) so a crash resumes at the next one:

1. ``fence-source`` (PLANNED -> SOURCE_FENCED): the source volume allows only the migration's new epoch to write.
   The source replicas (older epoch) are quiesced: a write in progress finishes, every later one is refused. From
   here on at most one epoch can write anywhere, and none writes until the target's replicas start.
2. ``checkpoint`` (-> CHECKPOINTED): copy the fenced source volume; the checkpoint's reference (id, bytes, sha256,
   the workload's preserved status fields, as Karmada's StatePreservation carries chosen fields) is journaled with
   the migration.
3. ``restore-target`` (-> RESTORED): the copy becomes the target's volume, fenced at the new epoch; then
   ``create-target`` starts the replicas there at that epoch.

Every step is idempotent (a fence stamps the same epoch again; a complete checkpoint is reused; a restore already
made is left alone), so a step re-run after a crash does nothing twice. Until RESTORED a failure unfences the source
(its writers resume); after it the state lives at the target and the source stays fenced. ``remove-source`` drops
the source's volume once the target serves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from controlplane.journal import Migration, MigrationState
from fedcore.backends.volumes import Checkpoint

Save = Callable[[Migration, str], Migration]
Intent = Callable[[Migration, str], None]

HANDOFF = (MigrationState.SOURCE_FENCED, MigrationState.CHECKPOINTED, MigrationState.RESTORED)
UNFENCE = (MigrationState.PLANNED, MigrationState.SOURCE_FENCED, MigrationState.CHECKPOINTED)
"""States a failed or cancelled hand-off rolls back from by unfencing the source (nothing reached the target)."""


class Volumes(Protocol):
    """Where stateful workloads' volumes live (:class:`fedcore.backends.volumes.DirectoryVolumes` on the twin)."""

    def fence(self, cluster: str, workload: str, epoch: int) -> int: ...

    def checkpoint(self, cluster: str, workload: str, cid: str) -> Checkpoint: ...

    def restore(self, cluster: str, workload: str, cp: Checkpoint, epoch: int) -> None: ...

    def drop(self, cluster: str, workload: str) -> None: ...

    def forget(self, cid: str) -> None: ...


class Handoff:
    """The three hand-off steps over ``volumes``; ``intent`` and ``save`` are the executor's journal writes."""

    def __init__(self, volumes: Volumes | None, intent: Intent, save: Save) -> None:
        self.volumes, self.intent, self.save = volumes, intent, save

    def _of(self, m: Migration) -> Volumes:
        if self.volumes is None:
            raise ValueError(f"{m.workload} is stateful but this control plane has no volume host to hand its state over")
        return self.volumes

    def step(self, m: Migration) -> Migration:
        """Run the next hand-off step of ``m`` (in PLANNED, SOURCE_FENCED or CHECKPOINTED)."""
        volumes = self._of(m)
        if m.state is MigrationState.PLANNED:
            self.intent(m, "fence-source")
            before = volumes.fence(m.source, m.workload, m.epoch)
            return self.save(m.moved(state=MigrationState.SOURCE_FENCED, checkpoint=json.dumps({"unfence": before})), "fence-source")
        if m.state is MigrationState.SOURCE_FENCED:
            self.intent(m, "checkpoint")
            cp = volumes.checkpoint(m.source, m.workload, m.id)
            ref = {**json.loads(m.checkpoint or "{}"), **cp.to_dict()}
            return self.save(m.moved(state=MigrationState.CHECKPOINTED, checkpoint=json.dumps(ref)), "checkpoint")
        self.intent(m, "restore-target")
        volumes.restore(m.target, m.workload, Checkpoint.from_dict(json.loads(m.checkpoint)), m.epoch)
        return self.save(m.moved(state=MigrationState.RESTORED), "restore-target")

    def unfence(self, m: Migration) -> str:
        """Give the source back its writers (a hand-off that failed before reaching the target)."""
        before = int(json.loads(m.checkpoint or "{}").get("unfence", -1))
        if before >= 0 and self.volumes is not None:
            self.volumes.fence(m.source, m.workload, before)
            return f"source {m.source} unfenced (epoch {before} writes again)"
        return "source never fenced"

    def finish(self, m: Migration) -> None:
        """The target serves: the source's volume and the checkpoint are no longer needed."""
        if self.volumes is not None:
            self.volumes.drop(m.source, m.workload)
            self.volumes.forget(m.id)
