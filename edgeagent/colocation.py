"""The agent's side of online and batch on one node: what it measures for the plane, what it does with the plane's offer.

The plane forecasts each node's online CPU use and runs the quota auction (``controlplane.colocating``); it needs
the use measured, and it answers with the node's batch offer on the ack of every report. This module is that
exchange for one agent: with ``isolation.enabled`` it makes the node's cgroups (:mod:`edgeagent.isolation`: online
first, batch capped), reads the online group's CPU use between reports, and writes the offer's quota into the batch
group; the offer's reclaimed CPU goes to the placer either way (:meth:`edgeagent.placing.Placer.offer_reclaimed`).
Without isolation nothing is measured, so the plane reclaims nothing on this node: batch fits on escrow alone. With
the Kubernetes back end the groups are kubelet's QoS groups (batch capped in BestEffort, online metered as the rest).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from edgeagent import isolation
from edgeagent.config import IsolationSection

log = logging.getLogger("edgeagent.colocation")


class NodeColocation:
    """One node's isolation and meter; :meth:`start` applies the groups, :meth:`measure` and :meth:`take` run per report."""

    def __init__(self, settings: IsolationSection, kubelet: bool = False) -> None:
        """``kubelet``: the back end is Kubernetes, so pods run in kubelet's cgroups (:func:`edgeagent.isolation.detect`)."""
        self.settings, self.kubelet = settings, kubelet
        self.layout: isolation.Layout | None = None
        self.quota: int | None = None
        """The batch CPU quota last written (None: none, the group runs uncapped)."""
        self._last: tuple[int, float] | None = None

    def plan(self) -> tuple[isolation.Layout, list[tuple[Path, str]]]:
        """What :meth:`start` would write on this host (``fedplane agent --check``); raises IsolationError."""
        layout = isolation.detect(Path(self.settings.root), Path(self.settings.resctrl), self.kubelet)
        return layout, isolation.settings(layout, self._limits(None))

    def start(self) -> None:
        """Make the groups with batch uncapped until the plane's first offer; raises IsolationError (named setting)."""
        if not self.settings.enabled:
            return
        self.layout = isolation.detect(Path(self.settings.root), Path(self.settings.resctrl), self.kubelet)
        isolation.apply(self.layout, self._limits(None))
        if not self.layout.resctrl:
            log.info("isolation: %s", self.layout.describe()["cache_partitioning"])

    def measure(self, now: float) -> int | None:
        """The online group's CPU use since the last call (millicores), or None (isolation off, first call, unreadable)."""
        if self.layout is None:
            return None
        try:
            used_ns = isolation.online_usage_ns(self.layout)
        except isolation.IsolationError as exc:
            log.warning("isolation: %s", exc)
            self._last = None
            return None
        last, self._last = self._last, (used_ns, now)
        if last is None or now <= last[1] or used_ns < last[0]:
            return None
        return round((used_ns - last[0]) / 1e6 / (now - last[1]))

    def take(self, offer: object) -> int:
        """An ack's ``offer``: writes its quota into the batch group; returns the reclaimed CPU for the placer (0: none)."""
        if not isinstance(offer, dict) or offer.get("colocated") is not True:
            self._cap(None)
            return 0
        reclaimed, quota = offer.get("reclaimed_milli"), offer.get("quota_milli")
        if not isinstance(reclaimed, int) or not isinstance(quota, int) or reclaimed < 0 or quota < 0:
            log.warning("ignored a batch offer that is not two non-negative integers: %r", offer)
            return 0
        self._cap(quota)
        return reclaimed

    def _cap(self, quota: int | None) -> None:
        if self.layout is None or quota == self.quota:
            return
        try:
            isolation.apply(self.layout, self._limits(quota))
            self.quota = quota
        except isolation.IsolationError as exc:
            log.warning("isolation: batch quota %s not applied: %s", quota, exc)

    def _limits(self, quota: int | None) -> isolation.BatchLimits:
        mib = self.settings.batch_memory_mib
        return isolation.BatchLimits(quota, mib << 20 if mib else None)


def check(settings: IsolationSection, kubelet: bool = False) -> tuple[str | None, str]:
    """``(problem, summary)`` for ``--check``: what isolation would do on this host (which groups it found), and why it
    cannot (enabled only)."""
    try:
        layout, writes = NodeColocation(settings, kubelet).plan()
    except isolation.IsolationError as exc:
        return (f"isolation: {exc}" if settings.enabled else None), f"isolation unavailable here ({exc})"
    where = layout.describe()
    summary = (f"isolation {'on' if settings.enabled else 'off (isolation.enabled)'}: would write {len(writes)} cgroup "
               f"settings, groups {where['groups']}, cpu {where['cpu']}, memory {where['memory']}; cache partitioning {where['cache_partitioning']}")
    base = layout.cpu[1] / (layout.groups.batch if kubelet else isolation.PARENT)
    writable = base if base.exists() else layout.cpu[1]
    if settings.enabled and not os.access(writable, os.W_OK):
        return f"isolation: {writable} is not writable by this user (run as root, or set isolation.enabled false)", summary
    return None, summary
