"""The asyncio shell around the placement core: the agent built and wired to gossip, the back end, the journal and HTTP.

Everything the agent decides is decided in :class:`edgeagent.placing.Placer`; this
module builds the agent and feeds the placer its inputs (gossip events, load samples, its
own health score, the control plane's workload context) and says how each effect it returns
is performed. The neighbours: :mod:`edgeagent.committing` (the effect pipeline: no effect
leaves before its journal commit, and the placer's timer), :mod:`edgeagent.clustercalls`
(the pod watch, binds, evictions, node status), :mod:`edgeagent.savedstate` (the files
beside the journal), :mod:`edgeagent.reporting` (the report to the control plane).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fedapi import agentlink, credentials
from fedcore.agentcmd import LOSS_ENV

from edgeagent import federation, reporting, residency, savedstate
from edgeagent.batchadvertising import BatchAdvertiser, NodeStatusPatching
from edgeagent.clustercalls import RECONNECT_MAX, ClusterCalls
from edgeagent.colocation import NodeColocation
from edgeagent.clusters import ClusterAPI, ClusterUnavailable
from edgeagent.committing import EffectPipeline
from edgeagent.config import AgentConfig
from edgeagent.effects import Bind, Effect, Evict, Publish, ReportNode
from fedcore.framelog import FrameLog
from edgeagent.ledger import Ledger
from edgeagent.metrics import AgentMetrics
from edgeagent.policy import ModelWatcher
from edgeagent.placing import Placer
from edgeagent.probes import NodeProbe, RealProbe, TwinProbe
from edgeagent.scoring import HeuristicScorer
from edgeagent.serving import StatusServer
from edgeagent.families import Families
from edgeagent.contextkeeping import ContextKeeper
from gossip.config import GossipConfig, split_addr
from gossip.effects import MemberEvent, RecordEvent
from gossip.keyring import Keyring
from gossip.members import MemberState
from gossip.udp import Event, UdpGossip

if TYPE_CHECKING:
    from edgeagent.planeclient import PlaneClient

log = logging.getLogger("edgeagent")

JOURNAL = "claims.journal"


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
    residency.tune_malloc()
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
        self.calls = ClusterCalls(self.cluster, config.backend, lambda: self.placer_, self._apply)
        """The pod watch, binds, evictions and node status, with retries; says why the back end is unusable."""
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
        self._tasks: set[asyncio.Task[None]] = set()
        self.effects = EffectPipeline(self.data, config.journal_max_mib * 2**20, config.experience_max_mib * 2**20,
                                      self._perform, self._spawn)
        """Effects leave only after the journal commit of the ledger operations behind them."""
        self.colocation = NodeColocation(config.isolation, config.backend.kind == "kubernetes")
        """Online/batch isolation on this node, its online CPU use for the plane, the plane's batch offer (edgeagent.colocation)."""
        self.batch = (BatchAdvertiser(self.cluster, self.name)
                      if config.backend.kind == "kubernetes" and isinstance(self.cluster, NodeStatusPatching) else None)
        """On Kubernetes: the node's batch capacity in its status, following the offer (edgeagent.batchadvertising)."""
        self.metrics: AgentMetrics | None = None
        self._http: StatusServer | None = None
        self.http_port = 0

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Start everything, serve until stopped, then leave gracefully."""
        loop = asyncio.get_running_loop()
        self.data.mkdir(parents=True, exist_ok=True)
        probe = self._probe()
        node = await savedstate.describe_node(probe, self.data)
        if self.config.probe.kind != "twin":
            await self._check_known()
        journal = FrameLog(self.data / JOURNAL)
        ledger = Ledger.replay(self.name, node.name, node.capacity, (op for batch in journal.read() for op in batch))
        savedstate.restore_context(self.data, self.context)  # the model loaded next takes it (_swap_model)
        self.placer = Placer(node, ledger, self.families.take(self.context.current), self.config.placement, loop.time())
        self.effects.start(journal, self.placer)
        self.colocation.start()
        if self.batch is not None:
            self._spawn(self.batch.run())
        models = ModelWatcher(self.config.models_path, self.config.shipped_model)
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
        self._spawn(self.calls.watch())
        self._spawn(self._every(self.config.probe.interval, lambda: self._apply(self.placer_.set_load(probe.load(), loop.time()))))
        self._spawn(self.calls.report_ready(self.name))
        if self.config.report_address:
            self._spawn(self._report_loop(self.config.report_address))
        self._spawn(self._every(self.config.gossip.probe_interval, lambda: self._sample_awareness(loop.time())))
        self._spawn(self._every(self.config.models.poll_interval, lambda: self._swap_model(models)))
        from edgeagent.planeclient import PlaneClient

        if self.config.models.fetch and isinstance(self.cluster, PlaneClient):
            self._spawn(self._fetch_models(self.cluster, node.name, models))
        if self.config.experience_ship > 0 and isinstance(self.cluster, PlaneClient):
            self._spawn(self._ship_experience(self.cluster, node.name))
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
        self.effects.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.effects.drain()
        if self.gossip is not None:
            await self.gossip.leave(linger=self.config.gossip.gossip_interval * 10)
        if self.wan is not None:
            await self.wan.leave(linger=self.config.gossip.gossip_interval * 10)
        if self._http is not None:
            await self._http.close()
        self.effects.close()
        await self.cluster.close()

    # ---- effects -------------------------------------------------------------------------------------

    def _apply(self, effects: list[Effect]) -> None:
        """Queue the placer's effects: they are performed after their journal commit (:mod:`edgeagent.committing`)."""
        self.effects.apply(effects)

    def _perform(self, effects: list[Effect]) -> None:
        placer = self.placer_
        for effect in effects:
            if isinstance(effect, Publish):
                if self.gossip is not None:
                    self.gossip.publish(effect.key, effect.value)
            elif isinstance(effect, Bind):
                self._spawn(self.calls.bind(effect))
            elif isinstance(effect, ReportNode):
                self._spawn(self.calls.report(effect.node, effect.ready, attempts=10))
            elif isinstance(effect, Evict):
                log.warning("pod %s (epoch %d) was re-placed elsewhere: stopping it here", effect.pod, effect.epoch)
                self._spawn(self.calls.evict(effect))
        if self.metrics is not None:
            for seconds in placer.counters.decisions:
                self.metrics.decisions.observe(seconds)
        placer.counters.decisions.clear()

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
        held = False  # the plane asked for the pods we run (its rebuilt twin adopts them)
        takes_heard = False  # the plane reads heard_ms (one that predates it refuses a report carrying it)
        try:
            while True:
                self.reports_sent += 1
                wan = self.wan.members() if self.wan is not None else {}
                lan = {name: view for name, view in self.gossip_.members().items() if name != self.gossip_.name}
                now = asyncio.get_running_loop().time()
                heard = {name: now - at for name, at in self.wan.heard().items()} if self.wan is not None and takes_heard else {}
                message = reporting.report(self.placer_, self.config.cluster, self.agent_id, self.reports_sent,
                                           lan, wan, self._wan_ids(), self._health(), self.context.current, held,
                                           self.colocation.measure(now), heard)
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
                    backoff = min(max(RECONNECT_MAX, interval), backoff * 2)
                    await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
                    continue
                self.report_error = None
                held = ack.get("send_held") is True
                takes_heard = ack.get("takes_heard") is True
                channel.members.learn(ack.get("members"))  # a replicated plane's other members, for when this one dies
                self._take_context(ack.get("context"))
                reclaimed = self.colocation.take(ack.get("offer"))
                self._apply(self.placer_.offer_reclaimed(reclaimed, asyncio.get_running_loop().time()))
                if self.batch is not None:
                    self.batch.offer(reclaimed)
                if shared and self.backend_error is not None and self.backend_error.startswith("report:"):
                    self.backend_error = None  # the link answers again
                asked = ack.get("report_interval_ms")
                if isinstance(asked, int) and asked > 0:
                    interval = min(60.0, max(0.1, asked / 1000))
                    self.calls.reconnect_max = max(RECONNECT_MAX, interval)  # a fleet paced slower reconnects no faster
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
        savedstate.save_context(self.data, self.context.current)

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
                                suspicion_mult=g.suspicion_mult, reap_after=g.reap_after, hearing=True)
        return UdpGossip(w.bind, w.seeds, keyring=Keyring.load(w.key_file) if w.key_file else None, config=settings,
                         loss=injected_loss())

    async def _start_http(self) -> None:
        placer = self.placer_
        self.metrics = AgentMetrics(
            placer, lambda: sum(1 for m in self.gossip_.members().values() if m.state is MemberState.ALIVE) - 1,
            lambda: self.backend_error is None, self.effects.journal_size, self.context)
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

    async def _fetch_models(self, plane: PlaneClient, node: str, models: ModelWatcher) -> None:
        """Keep the models directory holding what the plane offers this node (:mod:`edgeagent.modelfetching`); a model
        that arrived is swapped in at once, not at the next scan."""
        from edgeagent.modelfetching import ModelFetcher

        timeout = self.config.backend.timeout
        fetcher = ModelFetcher(lambda method, request: plane.channel.call(method, request, timeout), self.config.cluster, node,
                               self.config.models_path, self.config.models.signer)
        while True:
            try:
                if await fetcher.sync():
                    self._swap_model(models)
            except agentlink.LinkError as exc:
                if exc.code == "UNIMPLEMENTED":
                    log.info("the back end ships no models (%s): only the models directory's own", exc.details)
                    return
                log.debug("model fetch: %s", exc)
            except OSError as exc:
                log.warning("model fetch: cannot write %s: %s", self.config.models_path, exc)
            await asyncio.sleep(self.config.models.poll_interval)

    async def _ship_experience(self, plane: PlaneClient, node: str) -> None:
        """Ship the experience log to the plane (:mod:`edgeagent.experienceshipping`): it waits on disk, bounded by its
        rotation, while the plane is away."""
        from edgeagent.experienceshipping import ExperienceShipper

        timeout = self.config.backend.timeout
        shipper = ExperienceShipper(lambda method, request: plane.channel.call(method, request, timeout), self.config.cluster, node,
                                    self.data)
        while True:
            await asyncio.sleep(self.config.experience_ship)
            try:
                await shipper.ship()
            except agentlink.LinkError as exc:
                if exc.code == "UNIMPLEMENTED":
                    log.info("the back end takes no experience (%s): it stays in %s", exc.details, self.data)
                    return
                log.debug("experience shipping: %s", exc)
            except OSError as exc:
                log.warning("experience shipping: %s", exc)

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
    def backend_error(self) -> str | None:
        """Why the back end is not usable now (the last call to it failed), or None."""
        return self.calls.error

    @backend_error.setter
    def backend_error(self, error: str | None) -> None:
        self.calls.error = error

    @property
    def placer_(self) -> Placer:
        assert self.placer is not None, "the agent is not running"
        return self.placer

    @property
    def gossip_(self) -> UdpGossip:
        assert self.gossip is not None, "the agent is not running"
        return self.gossip
