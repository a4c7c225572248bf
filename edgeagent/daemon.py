"""The asyncio shell around the placement core: sockets, timers, the journal and the back end.

Everything the agent decides is decided in :class:`edgeagent.placing.Placer`; this
module feeds it inputs (gossip events, the cluster's pod watch, bind answers, load
samples, its own deadline) and performs the effects it returns. The one rule that
makes restarts safe lives here: effects are queued, and once per event-loop turn the
ledger's new operations are written and fsynced to the journal *before* any queued
effect leaves the process (group commit).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedapi import agentlink, credentials
from fedcore.agentcmd import LOSS_ENV
from fedcore.nodes import Node

from edgeagent import federation, linkcodec, reporting, residency
from edgeagent.clusters import BindResult, ClusterAPI, ClusterUnavailable
from edgeagent.config import AgentConfig
from edgeagent.effects import Bind, Effect, Evict, Experience, Publish, ReportNode
from fedcore.framelog import FrameLog
from edgeagent.ledger import Ledger
from edgeagent.metrics import AgentMetrics
from edgeagent.policy import ModelWatcher
from edgeagent.placing import Placer
from edgeagent.probes import NodeProbe, RealProbe, TwinProbe
from edgeagent.scoring import HeuristicScorer
from edgeagent.serving import StatusServer
from edgeagent.families import Families
from edgeagent.workloadcontext import ContextKeeper
from gossip.config import GossipConfig, split_addr
from gossip.effects import MemberEvent, RecordEvent
from gossip.keyring import Keyring
from gossip.members import MemberState
from gossip.udp import Event, UdpGossip

if TYPE_CHECKING:
    from federated.runtime.experience import ExperienceLog

log = logging.getLogger("edgeagent")

JOURNAL = "claims.journal"
NODE_FILE = "node.msgpack"
CONTEXT_FILE = "context.msgpack"
"""The last workload context from the control plane: an agent restarted while it is away scores as its peers still do."""
MAX_BINDS_IN_FLIGHT = 32
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
"""glibc's mallopt parameter numbers."""
MALLOC_THRESHOLD = 128 * 1024
"""glibc's default trim and mmap thresholds, held fixed (see :func:`tune_malloc`)."""
BACKOFF_MAX = 10.0
EVICT_ATTEMPTS = 60
"""About ten minutes of retries at the capped backoff (a PodDisruptionBudget may hold it that long)."""


def injected_loss() -> float:
    """The loss ``FEDPLANE_GOSSIP_LOSS`` asks for; a value that is not a share in [0, 0.9] is ignored with a warning."""
    raw = os.environ.get(LOSS_ENV, "")
    if not raw:
        return 0.0
    try:
        loss = float(raw)
    except ValueError:
        loss = -1.0
    if not 0.0 <= loss <= 0.9:
        log.warning("%s=%r is not a share in [0, 0.9]: no loss injected", LOSS_ENV, raw)
        return 0.0
    return loss


def tune_malloc(arenas: int = 2) -> None:
    """Keep glibc from holding freed memory the agent no longer uses.

    Two settings, both measured on the 16-agent bench: at most ``arenas`` malloc arenas
    (each thread would otherwise get its own, ~MiBs each), and fixed trim/mmap thresholds.
    By default glibc raises both after a large block is freed, and from then on keeps up
    to twice that at the top of the heap; under load an agent's heap grew by 11 MiB that
    way and never gave it back (1.2 MiB with the thresholds fixed).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(M_ARENA_MAX, arenas)
        mallopt(M_TRIM_THRESHOLD, MALLOC_THRESHOLD)
        mallopt(M_MMAP_THRESHOLD, MALLOC_THRESHOLD)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a mix."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def make_cluster(config: AgentConfig) -> ClusterAPI:
    if config.backend.kind == "kubernetes":
        from edgeagent.kube import KubeCluster

        return KubeCluster(config.backend.kubeconfig, config.backend.scheduler_name, config.backend.timeout)
    from edgeagent.planeclient import PlaneClient

    return PlaneClient(config.backend.address, config.cluster, config.backend.timeout, link_tls(config), credentials.token_in(config.backend.credentials))


def link_tls(config: AgentConfig) -> Any:
    """The agent's side of mutual TLS on the twin link, or None (plain TCP); ssl is loaded only when it is on."""
    t = config.tls
    return agentlink.tls_context(t.cert, t.key, t.ca, server=False) if t.enabled else None


async def run_agent(config: AgentConfig) -> None:
    """Build the agent inside the running loop (its twin link binds to it) and run it."""
    tune_malloc()
    await Agent(config).run()


class Agent:
    """One edge agent: run with :meth:`run` until :meth:`stop` (SIGTERM) or cancellation."""

    def __init__(self, config: AgentConfig, cluster: ClusterAPI | None = None, handle_signals: bool = True) -> None:
        """``handle_signals`` False: the caller stops the agent (tests running several in one loop)."""
        self.config = config
        self.handle_signals = handle_signals
        self.name = config.node_name
        self.data = config.data_path
        self.cluster = cluster or make_cluster(config)
        self.backend_error: str | None = "not connected yet"
        """Why the back end is not usable now (the last call to it failed), or None."""
        self.placer: Placer | None = None
        self.gossip: UdpGossip | None = None
        self.wan: UdpGossip | None = None
        """The federation-wide pool (``wan.bind``): liveness across clusters, for the control plane's verdicts."""
        self.agent_id = f"{self.name}-{os.getpid()}-{time.time_ns() // 1_000_000}"
        """Stable for this process's life; a restart is a new agent to the control plane."""
        self.reports_sent = 0
        self.report_error: str | None = None
        self.context = ContextKeeper()
        """The workload context from the control plane's acks, applied to every scorer (kept while it is away)."""
        self.families = Families(HeuristicScorer(lambda: self.placer_.load))
        """The scorer family the context names: the model (best fit without one), or fedcore's FGD or BestFit."""
        self._stop = asyncio.Event()
        self._closing = False
        self._queue: list[Effect] = []
        self._flush_scheduled = False
        self._awaiting: list[Effect] = []
        """Effects waiting for the fsync that makes their journal operations durable."""
        self._syncing = False
        self._snapshot_bytes = 0
        """Size of the last journal snapshot: the journal is rewritten again only once it has doubled."""
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._binds = asyncio.Semaphore(MAX_BINDS_IN_FLIGHT)
        self._journal: FrameLog | None = None
        self._fsync = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-fsync")
        """One thread for every fsync: more would each grow a malloc arena for nothing."""
        self._experience: ExperienceLog | None = None
        self.metrics: AgentMetrics | None = None
        self._http: StatusServer | None = None
        self.http_port = 0

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Start everything, serve until stopped, then leave gracefully."""
        loop = asyncio.get_running_loop()
        self.data.mkdir(parents=True, exist_ok=True)
        probe = self._probe()
        node = await self._describe_node(probe)
        if self.config.probe.kind != "twin":
            await self._check_known()
        self._journal = FrameLog(self.data / JOURNAL)
        ledger = Ledger.replay(self.name, node.name, node.capacity, (op for batch in self._journal.read() for op in batch))
        self._restore_context()
        self.placer = Placer(node, ledger, self.families.take(self.context.current), self.config.placement, loop.time())
        models = ModelWatcher(self.config.models_path)
        self._swap_model(models)
        gossip = self._make_gossip()
        await gossip.start()
        self.gossip = gossip
        gossip.subscribe(self._on_gossip)
        self._apply(self.placer.announce(loop.time()))
        if self.config.wan.bind:
            self.wan = self._make_wan()
            await self.wan.start()
            self.wan.publish(reporting.IDENTITY_KEY, reporting.identity(self.config.cluster, self.name))
        await self._start_http()
        log.info("agent %s up: gossip %s, %d pods held from the journal", self.name, self.gossip.name,
                 sum(1 for _ in ledger.own_pods()))
        self._spawn(self._watch_loop())
        self._spawn(self._every(self.config.probe.interval, lambda: self._apply(self.placer_.set_load(probe.load(), loop.time()))))
        self._spawn(self._status_loop())
        if self.config.report_address:
            self._spawn(self._report_loop(self.config.report_address))
        self._spawn(self._every(self.config.gossip.probe_interval, lambda: self._sample_awareness(loop.time())))
        self._spawn(self._every(self.config.models.poll_interval, lambda: self._swap_model(models)))
        if self.config.federation.enabled:
            self._spawn(federation.supervise(self.config.federation, self.data))
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        try:
            await self._stop.wait()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self._stop.set()

    async def _shutdown(self) -> None:
        log.info("agent %s leaving", self.name)
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._timer is not None:
            self._timer.cancel()
        self._commit()
        if self._journal is not None:
            self._journal.sync()
        if self.gossip is not None:
            await self.gossip.leave(linger=self.config.gossip.gossip_interval * 10)
        if self.wan is not None:
            await self.wan.leave(linger=self.config.gossip.gossip_interval * 10)
        if self._http is not None:
            await self._http.close()
        for closable in (self._journal, self._experience):
            if closable is not None:
                closable.close()
        await self.cluster.close()
        self._fsync.shutdown(wait=False)

    # ---- the effect pipeline ----------------------------------------------------------------------

    def _apply(self, effects: list[Effect]) -> None:
        """Queue effects; they run after the next journal commit (at most one commit per loop turn)."""
        self._queue.extend(effects)
        if not self._flush_scheduled and not self._closing:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _commit(self) -> list[Effect]:
        """Append the ledger's new operations to the journal; returns the queued effects."""
        ledger = self.placer_.ledger
        ops = ledger.take_ops()
        if ops and self._journal is not None:
            size = self._journal.size()
            if size > max(self.config.journal_max_mib * 2**20, 2 * self._snapshot_bytes) and not self._syncing:
                try:
                    self._journal.replace([[ledger.snapshot()]])  # durable on return; no fsync thread holds the old file
                    self._snapshot_bytes, ops = self._journal.size(), []
                except OSError as exc:
                    self._snapshot_bytes = size  # next try once the journal doubled again
                    log.warning("journal snapshot failed, appending instead: %s", exc)
            if ops:
                self._journal.append(ops)
        effects, self._queue = self._queue, []
        rows = [e.row for e in effects if isinstance(e, Experience)]
        if rows:
            self.experience_log().write(rows)
        return effects

    def _flush(self) -> None:
        """Commit, then perform: at once if the journal is already durable, else after the next fsync."""
        self._flush_scheduled = False
        effects = self._commit()
        journal = self._journal
        if self._awaiting or (journal is not None and journal.dirty and any(
                isinstance(e, (Publish, Bind, ReportNode, Evict)) for e in effects)):
            self._awaiting.extend(effects)
            if not self._syncing:
                self._syncing = True
                self._spawn(self._sync())
        else:
            self._perform(effects)
        self._arm()

    async def _sync(self) -> None:
        """Group commit: one fsync (in a worker thread) releases every effect queued before it started."""
        try:
            while self._awaiting and self._journal is not None:
                batch, self._awaiting = self._awaiting, []
                self._journal.flush()
                await asyncio.get_running_loop().run_in_executor(self._fsync, self._journal.fsync)
                self._perform(batch)
                if self._experience is not None:
                    self._experience.flush()
        finally:
            self._syncing = False

    def _perform(self, effects: list[Effect]) -> None:
        placer = self.placer_
        for effect in effects:
            if isinstance(effect, Publish):
                if self.gossip is not None:
                    self.gossip.publish(effect.key, effect.value)
            elif isinstance(effect, Bind):
                self._spawn(self._bind(effect))
            elif isinstance(effect, ReportNode):
                self._spawn(self._report(effect.node, effect.ready, attempts=10))
            elif isinstance(effect, Evict):
                log.warning("pod %s (epoch %d) was re-placed elsewhere: stopping it here", effect.pod, effect.epoch)
                self._spawn(self._evict(effect))
        if self.metrics is not None:
            for seconds in placer.counters.decisions:
                self.metrics.decisions.observe(seconds)
        placer.counters.decisions.clear()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(max(self.placer_.next_deadline(), loop.time()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._apply(self.placer_.tick(asyncio.get_running_loop().time()))

    # ---- inputs ---------------------------------------------------------------------------------------

    def _on_gossip(self, event: Event) -> None:
        now = asyncio.get_running_loop().time()
        placer = self.placer_
        if isinstance(event, RecordEvent):
            if event.owner != self.gossip_.name:
                self._apply(placer.record(event.owner, event.key, event.value, now))
        elif isinstance(event, MemberEvent):
            if event.state in (MemberState.DEAD, MemberState.LEFT):
                self._apply(placer.member_dead(event.name, now, graceful=event.state is MemberState.LEFT))
            elif event.state is MemberState.SUSPECT:
                self._apply(placer.member_suspect(event.name, now))
            elif event.state is MemberState.ALIVE:
                self._apply(placer.member_alive(event.name, now))

    async def _watch_loop(self) -> None:
        """Follow the cluster's pods; every ``backend.relist_interval`` the watch is reopened, which lists every
        pod again, so an event the watch missed (a dropped connection, a back end that forgot one) strands nothing."""
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while True:
            try:
                async with asyncio.timeout(self.config.backend.relist_interval):
                    async for update in self.cluster.watch():
                        self.backend_error, backoff = None, 0.1
                        self._apply(self.placer_.pod_update(update, loop.time()))
            except TimeoutError:
                continue  # a relist, not a failure: reopen at once
            except ClusterUnavailable as exc:
                log.warning("cluster watch: %s (retrying in %.1fs)", exc, backoff)
                self.backend_error = f"pod watch: {exc}"
            else:
                self.backend_error = "pod watch ended"
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def _bind(self, effect: Bind) -> None:
        result: BindResult | None
        async with self._binds:
            try:
                result = await self.cluster.bind(effect.pod, effect.node, effect.epoch, effect.gpus)
                self.backend_error = None
            except ClusterUnavailable as exc:
                log.warning("bind %s: %s", effect.pod, exc)
                self.backend_error = f"bind: {exc}"
                result = None
        self._apply(self.placer_.bind_done(effect.pod, result, asyncio.get_running_loop().time()))

    async def _evict(self, effect: Evict) -> None:
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
                    self.placer_.counters.evictions_done += 1
                    log.info("evict %s (epoch %d): %s %s", effect.pod, effect.epoch, result.outcome.value, result.reason)
                    return
                log.warning("evict %s: %s (%s)", effect.pod, result.outcome.value, result.reason)
            except ClusterUnavailable as exc:
                log.warning("evict %s: %s", effect.pod, exc)
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(BACKOFF_MAX, backoff * 2)
        log.error("evict %s (epoch %d): gave up after %d attempts", effect.pod, effect.epoch, EVICT_ATTEMPTS)

    async def _report(self, node: str, ready: bool, attempts: int) -> None:
        backoff = 0.2
        for _ in range(attempts):
            try:
                freed = await self.cluster.report_node(node, ready)
                self.backend_error = None
                if not ready:
                    log.info("reported node %s not ready: the cluster freed %d pods", node, freed)
                return
            except ClusterUnavailable as exc:
                log.warning("report node %s: %s", node, exc)
                self.backend_error = f"node status: {exc}"
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def _status_loop(self) -> None:
        while True:
            await self._report(self.name, True, attempts=1)
            await asyncio.sleep(self.config.backend.status_interval)

    async def _report_loop(self, address: str) -> None:
        """Report ourselves to the control plane: at its asked interval, backing off (to 10 s) while it is away.

        Sharing the back end's twin link (the usual case), a report that gets no answer means the
        connection may be dead (a cut link loses packets silently): it is dropped, so the pod watch
        reconnects at once rather than after TCP's retransmission timeouts.
        """
        from edgeagent.planeclient import PlaneClient

        shared = isinstance(self.cluster, PlaneClient) and address == self.config.backend.address
        channel = (self.cluster.channel if isinstance(self.cluster, PlaneClient) and shared
                   else agentlink.LinkChannel(address, link_tls(self.config), credentials.token_in(self.config.backend.credentials)))
        interval = backoff = self.config.report.interval
        try:
            while True:
                self.reports_sent += 1
                wan = self.wan.members() if self.wan is not None else {}
                lan = {name: view for name, view in self.gossip_.members().items() if name != self.gossip_.name}
                message = reporting.report(self.placer_, self.config.cluster, self.agent_id, self.reports_sent,
                                           lan, wan, self._wan_ids(), self._health(), self.context.current)
                try:
                    ack = await channel.call("ReportAgent", message, self.config.backend.timeout)
                except agentlink.LinkError as exc:
                    if self.report_error is None:
                        log.warning("report to the control plane at %s: %s (backing off)", address, exc)
                    self.report_error = str(exc)
                    if shared and exc.code in ("DEADLINE_EXCEEDED", "UNAVAILABLE"):
                        self.backend_error = f"report: {exc}"
                        if exc.code == "DEADLINE_EXCEEDED":
                            channel.reset()
                    backoff = min(BACKOFF_MAX, backoff * 2)
                    await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
                    continue
                self.report_error = None
                self._take_context(ack.get("context"))
                if shared and self.backend_error is not None and self.backend_error.startswith("report:"):
                    self.backend_error = None  # the link answers again
                asked = ack.get("report_interval_ms")
                if isinstance(asked, int) and asked > 0:
                    interval = min(60.0, max(0.1, asked / 1000))
                backoff = interval
                await asyncio.sleep(interval * random.uniform(0.9, 1.1))
        finally:
            if not shared:
                await channel.close()

    def _take_context(self, value: object) -> None:
        """An ack's workload context: a new value goes to the scorer at once and to disk (for a restart while away)."""
        if not self.context.receive(value):
            return
        self._apply(self.placer_.set_scorer(self.families.take(self.context.current)))
        try:
            atomic_write(self.data / CONTEXT_FILE, agentlink.encode(self.context.current.to_wire()))
        except OSError as exc:
            log.warning("could not save the workload context (a restart would wait for the control plane's): %s", exc)

    def _restore_context(self) -> None:
        """The context saved before a restart (its scorer family included); the model loaded next takes it (:meth:`_swap_model`)."""
        saved = self.data / CONTEXT_FILE
        try:
            value = agentlink.decode(saved.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("the saved workload context %s is unreadable (%s): waiting for the control plane's", saved, exc)
            return
        self.context.receive(value, str(saved))

    def _sample_awareness(self, now: float) -> None:
        """Feed our Lifeguard health score to the placer when it moved (an idle, healthy agent stays asleep)."""
        score = self.gossip_.awareness
        if score != self.placer_.awareness:
            self._apply(self.placer_.set_awareness(score, now))

    def _wan_ids(self) -> dict[str, str]:
        """Federation pool member -> ``cluster/node``, from their identity records."""
        if self.wan is None:
            return {}
        return {owner: value for owner, records in self.wan.records().items()
                if isinstance(value := records.get(reporting.IDENTITY_KEY, (0, None))[1], str)}

    async def _every(self, seconds: float, step: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(seconds)
            step()

    # ---- setup helpers ----------------------------------------------------------------------------------

    async def _describe_node(self, probe: NodeProbe) -> Node:
        """Ask the probe; fall back to the last description on disk, so an agent restarts offline."""
        saved = self.data / NODE_FILE
        backoff = 0.2
        while True:
            try:
                node = await probe.describe()
                atomic_write(saved, agentlink.encode(linkcodec.node_to_wire(node)))
                return node
            except ClusterUnavailable as exc:
                if saved.exists():
                    try:
                        node = linkcodec.node_from_wire(agentlink.decode(saved.read_bytes()))
                    except (ValueError, ClusterUnavailable) as bad:
                        log.error("the saved node description %s is unreadable (%s): waiting for the cluster", saved, bad)
                    else:
                        log.warning("cluster unreachable (%s): using the saved node description", exc)
                        return node
                log.warning("cluster unreachable (%s): retrying", exc)
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def _check_known(self) -> None:
        """A node described by this machine must still be one the back end knows: if it answers that
        it does not, stop (:class:`UnknownNode` propagates); if it does not answer, start anyway."""
        try:
            await asyncio.wait_for(self.cluster.describe_node(self.name), self.config.backend.timeout)
        except (ClusterUnavailable, asyncio.TimeoutError) as exc:
            log.warning("cluster unreachable (%s): starting without confirming it knows node %s", exc, self.name)

    def _probe(self) -> NodeProbe:
        if self.config.probe.kind == "twin":
            def reserved() -> float:
                if self.placer is None:
                    return 0.0
                cap, free = self.placer.node.capacity, self.placer.ledger.replica.free()
                return 1.0 - free.cpu_milli / max(1, cap.cpu_milli)

            return TwinProbe(self.name, self.cluster, reserved)
        return RealProbe(self.name, self.config.cluster, self.data, self.config.probe.arch, self.config.probe.labels)

    def _make_gossip(self) -> UdpGossip:
        g = self.config.gossip
        keyring = Keyring.load(g.key_file) if g.key_file else None
        return UdpGossip(g.bind, g.seeds, keyring=keyring, config=g.settings(), loss=injected_loss())

    def _make_wan(self) -> UdpGossip:
        g, w = self.config.gossip, self.config.wan
        settings = GossipConfig(probe_interval=g.probe_interval, probe_timeout=g.probe_interval / 2,
                                suspicion_mult=g.suspicion_mult, reap_after=g.reap_after)
        return UdpGossip(w.bind, w.seeds, keyring=Keyring.load(w.key_file) if w.key_file else None, config=settings,
                         loss=injected_loss())

    async def _start_http(self) -> None:
        placer = self.placer_
        self.metrics = AgentMetrics(
            placer, lambda: sum(1 for m in self.gossip_.members().values() if m.state is MemberState.ALIVE) - 1,
            lambda: self.backend_error is None, lambda: self._journal.size() if self._journal else 0, self.context)
        if not self.config.http.bind:
            return
        host, port = split_addr(self.config.http.bind)
        self._http = StatusServer(self.metrics, self._health, lambda: dict(placer.running))
        self.http_port = await self._http.start(host, port)

    def _health(self) -> str | None:
        """Why this agent is not fit to act, or None: ``/healthz`` answers 503 with the reason."""
        if self.gossip is None or self.placer is None:
            return "gossip not started"
        if self.gossip.internal_errors:
            return f"gossip had {self.gossip.internal_errors} internal errors"
        if self.backend_error is not None:
            return f"cut off from the back end: {self.backend_error}"
        if not self.placer.has_quorum():
            alive, total = self.placer.cluster_view()
            return (f"cut off from peers: sees {alive} of {total} agents alive (own health score "
                    f"{self.placer.awareness}); no quorum, not acting for dead peers")
        return None

    def experience_log(self) -> ExperienceLog:
        """Opened at the first row: only an agent scoring with a model records experience (and loads its format)."""
        if self._experience is None:
            from federated.runtime.experience import ExperienceLog

            self._experience = ExperienceLog(self.data, self.config.experience_max_mib * 2**20)
        return self._experience

    def _swap_model(self, models: ModelWatcher) -> None:
        scorer = models.scan()
        if scorer is not None:
            # a new model scores for the same workload as the one it replaces, and only if the cluster places with it
            self._apply(self.placer_.set_scorer(self.families.rebase(scorer, self.context.current)))
            residency.drop_cold_code()  # the session's set-up code: ~12 MiB no decision runs again

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def placer_(self) -> Placer:
        assert self.placer is not None, "the agent is not running"
        return self.placer

    @property
    def gossip_(self) -> UdpGossip:
        assert self.gossip is not None, "the agent is not running"
        return self.gossip
