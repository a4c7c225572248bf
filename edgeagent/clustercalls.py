"""The agent's calls to its cluster back end: the pod watch, binds, evictions and node-status reports.

Each call retries with jittered exponential backoff (to ``BACKOFF_MAX``) while the back end
is unreachable (:class:`edgeagent.clusters.ClusterUnavailable`), and :attr:`ClusterCalls.error`
says why it is unusable now (``/healthz`` and the reports show it). What the back end answers
goes to the placement core (:class:`edgeagent.placing.Placer`), whose effects go back to the
shell's effect pipeline (:mod:`edgeagent.committing`); the back end itself is
:mod:`edgeagent.planeclient` (twin link) or :mod:`edgeagent.kube`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from edgeagent.clusters import BindResult, ClusterAPI, ClusterUnavailable
from edgeagent.config import BackendSection
from edgeagent.effects import Bind, Effect, Evict
from edgeagent.placing import Placer

log = logging.getLogger("edgeagent")

MAX_BINDS_IN_FLIGHT = 32
BACKOFF_MAX = 10.0
RECONNECT_MAX = 2.0
"""Cap of the backoff between attempts to reach a back end that stopped answering (the pod watch, the reports), unless
the plane paces reports slower (a large fleet): after a partition heals, a copy the cluster replaced meanwhile is
fenced within a couple of seconds, not after a 10 s sleep begun while the link was still cut."""
EVICT_ATTEMPTS = 60
"""About ten minutes of retries at the capped backoff (a PodDisruptionBudget may hold it that long)."""


class ClusterCalls:
    """One agent's calls to ``cluster``; answers go to the placer, its effects to ``apply``."""

    def __init__(self, cluster: ClusterAPI, settings: BackendSection, placer: Callable[[], Placer],
                 apply: Callable[[list[Effect]], None]) -> None:
        self.cluster = cluster
        self.settings = settings
        self.placer = placer
        self.apply = apply
        self.error: str | None = "not connected yet"
        """Why the back end is not usable now (the last call to it failed), or None."""
        self._binds = asyncio.Semaphore(MAX_BINDS_IN_FLIGHT)
        self.reconnect_max = RECONNECT_MAX
        """Longest wait between attempts to reopen the watch: the plane's report pace when slower than RECONNECT_MAX."""

    async def watch(self) -> None:
        """Follow the cluster's pods; every ``backend.relist_interval`` the watch is reopened, which lists every
        pod again, so an event the watch missed (a dropped connection, a back end that forgot one) strands nothing."""
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while True:
            try:
                async with asyncio.timeout(self.settings.relist_interval):
                    async for update in self.cluster.watch():
                        self.error, backoff = None, 0.1
                        self.apply(self.placer().pod_update(update, loop.time()))
            except TimeoutError:
                continue  # a relist, not a failure: reopen at once
            except ClusterUnavailable as exc:
                log.warning("cluster watch: %s (retrying in %.1fs)", exc, backoff)
                self.error = f"pod watch: {exc}"
            else:
                self.error = "pod watch ended"
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(self.reconnect_max, backoff * 2)

    async def bind(self, effect: Bind) -> None:
        result: BindResult | None
        async with self._binds:
            try:
                result = await self.cluster.bind(effect.pod, effect.node, effect.epoch, effect.gpus, effect.reclaimed_milli)
                self.error = None
            except ClusterUnavailable as exc:
                log.warning("bind %s: %s", effect.pod, exc)
                self.error = f"bind: {exc}"
                result = None
        self.apply(self.placer().bind_done(effect.pod, result, asyncio.get_running_loop().time()))

    async def evict(self, effect: Evict) -> None:
        """Stop the pod at the back end, retrying until it answers for good (evicted, gone, or moved on).

        Idempotent: a retry after the pod went answers GONE, and the epoch fences off a newer copy.
        A PodDisruptionBudget that forbids it now (BLOCKED) is waited out with the same backoff.
        """
        backoff = 0.2
        for _ in range(EVICT_ATTEMPTS):
            try:
                async with self._binds:
                    result = await self.cluster.evict(effect.pod, effect.epoch)
                if result.final:
                    self.placer().counters.evictions_done += 1
                    log.info("evict %s (epoch %d): %s %s", effect.pod, effect.epoch, result.outcome.value, result.reason)
                    return
                log.warning("evict %s: %s (%s)", effect.pod, result.outcome.value, result.reason)
            except ClusterUnavailable as exc:
                log.warning("evict %s: %s", effect.pod, exc)
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(BACKOFF_MAX, backoff * 2)
        log.error("evict %s (epoch %d): gave up after %d attempts", effect.pod, effect.epoch, EVICT_ATTEMPTS)

    async def report(self, node: str, ready: bool, attempts: int) -> None:
        """Tell the back end whether ``node`` is ready (not ready: it frees the node's pods)."""
        backoff = 0.2
        for _ in range(attempts):
            try:
                freed = await self.cluster.report_node(node, ready)
                self.error = None
                if not ready:
                    log.info("reported node %s not ready: the cluster freed %d pods", node, freed)
                return
            except ClusterUnavailable as exc:
                log.warning("report node %s: %s", node, exc)
                self.error = f"node status: {exc}"
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def report_ready(self, node: str) -> None:
        """Our own node is ready: said every ``backend.status_interval``."""
        while True:
            await self.report(node, True, attempts=1)
            await asyncio.sleep(self.settings.status_interval)
