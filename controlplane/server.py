"""Putting a control plane on the wire: gRPC (health, reflection, optional mTLS), the twin
link for edge agents (the TwinCluster service without gRPC, :mod:`fedapi.agentlink`), the
reconcile loop, and the Prometheus ``/metrics`` endpoint.

Both transports check credentials (:mod:`controlplane.auth`) unless the caller passes
:data:`~controlplane.auth.INSECURE`, which binds to loopback only: there is no default.

The loop calls ``plane.tick(now)`` every probe interval in a worker thread; an exception in a
tick is logged and the loop goes on, except a ``SimulatedCrash`` (drills), which ends it as a
real crash would end the process. Beside it, the clusters' scorer selections run one at a time
in a worker process (:mod:`controlplane.selectworker`), never on the tick.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from controlplane.autoscaling.api import AutoscalerService
from controlplane import agentviews, limits, selectworker
from controlplane.auth import Authenticator, Gate, Insecure, loopback
from controlplane.campaigning import Campaign, Leadership, Solo
from controlplane.migrations import SimulatedCrash
from controlplane.runtime import ControlPlane
from controlplane.experienceinbox import ExperienceInbox
from controlplane.learninglink import LearningTwin
from federated.flower.shelf import ModelShelf
from controlplane.service import ControlPlaneService, DrillRunner
from controlplane.store import Fenced
from fedapi import autoscale_pb2, autoscale_pb2_grpc, controlplane_pb2, controlplane_pb2_grpc, twincluster_pb2, twincluster_pb2_grpc
from fedapi.tls import TlsFiles, server_credentials
from fedapi import agentlink
from fedapi.linkserver import LinkServer

log = logging.getLogger(__name__)
LAG_SAMPLE_S = 0.25
"""How often the event loop's lag is sampled for the report backpressure."""
SERVICES = (
    controlplane_pb2.DESCRIPTOR.services_by_name["ControlPlane"].full_name,
    twincluster_pb2.DESCRIPTOR.services_by_name["TwinCluster"].full_name,
    autoscale_pb2.DESCRIPTOR.services_by_name["Autoscaler"].full_name,
)


def _no_drills(scenario: str, runs: int, seed: int) -> dict[str, Any]:
    raise ValueError("a serving control plane runs no drills: they belong to the lab (fedplane drill failover)")


@dataclass(slots=True)
class Running:
    server: grpc.aio.Server
    port: int
    plane: ControlPlane
    loop: asyncio.Task[None]
    link: LinkServer
    metrics_port: int = 0
    _metrics: Any = None
    campaign: asyncio.Task[None] | None = None
    leadership: Leadership = Solo()
    selection: asyncio.Task[None] | None = None
    auth: Authenticator | Insecure = Insecure()

    @property
    def link_port(self) -> int:
        """Where edge agents reach the twin cluster API."""
        return self.link.port

    async def stop(self, grace: float | None = 0.2) -> None:
        for task in (self.loop, self.selection):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)  # a selection in flight: its worker is killed
        if self.campaign is not None:
            self.campaign.cancel()
            await asyncio.gather(self.campaign, return_exceptions=True)
            if isinstance(self.leadership, Campaign):
                await self.leadership.resign()
        await self.link.stop()
        await self.server.stop(grace)
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()


async def reconcile(plane: ControlPlane, interval_s: float, clock: Callable[[], float]) -> None:
    """Tick while this process leads (a standby only answers reads), on a thread of its own: the tick's cadence never
    waits on the event loop, which a fleet of thousands of agents' reports and binds keeps busy (a tick scheduled
    through it waited whole seconds between rounds). Ends when cancelled (the thread stops after its current tick)."""
    stop, thread = threading.Event(), ThreadPoolExecutor(1, thread_name_prefix="reconcile")  # not one of the API's pool
    lag = asyncio.create_task(_sample_lag(plane))
    try:
        await asyncio.get_running_loop().run_in_executor(thread, _ticking, plane, interval_s, clock, stop)
    finally:
        lag.cancel()
        stop.set()
        thread.shutdown(wait=False)


async def _sample_lag(plane: ControlPlane) -> None:
    """The event loop's lag (how late a timer fires) into the plane's report backpressure (:mod:`controlplane.pacing`)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LAG_SAMPLE_S
        await asyncio.sleep(LAG_SAMPLE_S)
        now = loop.time()
        plane.backpressure.lag(now - due, now, plane.report_interval_s())


def _ticking(plane: ControlPlane, interval_s: float, clock: Callable[[], float], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            if plane.leading:
                plane.tick(clock())
        except SimulatedCrash:
            raise
        except Fenced as exc:  # deposed while ticking: the campaign steps down
            log.warning("reconcile tick refused: %s", exc)
        except Exception:  # one bad tick must not stop failover for every other cluster
            log.exception("reconcile tick failed")
        stop.wait(interval_s)


async def select_scorers(plane: ControlPlane, clock: Callable[[], float]) -> None:
    """Run each due lookahead selection (:meth:`ControlPlane.next_selection`) in the worker process, one at a time, and
    hand its outcome back; the tick never waits for one."""
    while True:
        try:
            job = await asyncio.to_thread(plane.next_selection, clock())
            if job is not None:
                outcome = await selectworker.run(job, plane.timings.scorer_selection_timeout_s)
                await asyncio.to_thread(plane.adopt_selection, outcome, clock())
                continue
        except Fenced as exc:
            log.warning("scorer selection refused: %s", exc)
        except Exception:  # a selection must never stop the plane
            log.exception("scorer selection failed")
            plane.selections.running = None
        await asyncio.sleep(plane.timings.probe_interval_s)


async def start(
    plane: ControlPlane, host: str = "127.0.0.1", port: int = 0, tls: TlsFiles | None = None,
    metrics_port: int | None = None, drills: DrillRunner = _no_drills, link_port: int = 0, leadership: Leadership = Solo(),
    *, auth: Authenticator | Insecure, shelf: ModelShelf | None = None,
    inbox: ExperienceInbox | None = None,
) -> Running:
    """Serve ``plane`` on host:port and the agents' twin link on host:link_port (0 = any free port).

    ``auth`` checks every caller's credential; :class:`~controlplane.auth.Insecure` turns that off and is refused
    on any host but loopback (ValueError). ``shelf``: the models agents fetch over their link (None: none); ``inbox``: where their experience goes (None: kept on the agents). With a :class:`~controlplane.campaigning.Campaign` the process
    campaigns for leadership and acts only while it leads. Returns the bound ports and a stop handle.
    """
    if isinstance(auth, Insecure) and not loopback(host):
        raise ValueError(f"refusing to serve without authentication on {host}: --insecure binds to loopback only (127.0.0.1, ::1)")
    gate = auth if isinstance(auth, Authenticator) else None
    # gRPC turns SO_REUSEPORT on by default: a second control plane could then listen on the same
    # port and clients would alternate between two databases. One port, one process.
    server = grpc.aio.server(maximum_concurrent_rpcs=512, interceptors=[Gate(gate)] if gate else None,
                             options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", limits.MAX_MESSAGE_BYTES)])
    twin = LearningTwin(plane, leadership, shelf, inbox)
    controlplane_pb2_grpc.add_ControlPlaneServicer_to_server(ControlPlaneService(plane, drills, leadership, gate), server)  # type: ignore[no-untyped-call]
    twincluster_pb2_grpc.add_TwinClusterServicer_to_server(twin, server)  # type: ignore[no-untyped-call]
    autoscale_pb2_grpc.add_AutoscalerServicer_to_server(AutoscalerService(plane), server)  # type: ignore[no-untyped-call]
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for name in ("", *SERVICES):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection((*SERVICES, reflection.SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), server)
    address = f"{host}:{port}"
    try:
        bound = server.add_secure_port(address, server_credentials(tls)) if tls else server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc's "Failed to bind": the port is taken (no sharing, see above)
        raise OSError(f"address in use or unavailable ({exc})") from None
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    link_tls = agentlink.tls_context(str(tls.cert), str(tls.key), str(tls.ca), server=True) if tls else None
    link = LinkServer(twin, host, link_port, link_tls, gate)  # agents' reports and binds under the same mTLS and credentials as gRPC
    try:
        await link.start()
    except OSError:
        await server.stop(0)
        raise
    metrics, mport = None, 0
    if metrics_port is not None:
        plane.metrics.registry.register(agentviews.AgentSeries(lambda: plane.evidence, lambda: list(plane.verdicts), plane.clock))
        metrics, _thread = start_http_server(metrics_port, addr=host, registry=plane.metrics.registry)
        mport = metrics.server_port
    task = asyncio.create_task(reconcile(plane, plane.timings.probe_interval_s, plane.clock))
    selection = asyncio.create_task(select_scorers(plane, plane.clock)) if plane.selections.enabled else None
    campaign = None
    if isinstance(leadership, Campaign):
        election = leadership.election
        election.address = election.address or f"{host}:{bound}"
        election.member = election.member or election.address
        election.link = election.link or f"{election.address.rpartition(':')[0]}:{link.port}"  # agents follow the leader here
        campaign = asyncio.create_task(leadership.run())
    return Running(server, bound, plane, task, link, mport, metrics, campaign, leadership, selection, auth)
