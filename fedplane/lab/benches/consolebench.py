"""``bench console``: the control plane's web console in a real headless Chromium, on a live plane with real agents.

The plane is ``fedplane controlplane serve`` in its own process (credentials on, the console on ``--ui-port``):
two twin clusters whose pods real ``fedplane agent`` processes bind (:class:`~fedplane.lab.drills.agentfleet.AgentFleet`,
each with its cluster's agent credential), and one Kubernetes cluster, ``edge``, served by the lab's API double
(:mod:`fedplane.lab.doubles.kubedouble`) through a kubeconfig. The outage is real from the plane's side: the double
goes dark (503 to every request), so the plane's probes fail and its verdict turns DOWN; then it comes back.

Chromium (Debian's, driven through Playwright's protocol client, never a downloaded browser) signs in with a
viewer's token through the form and opens every page, recording per page the JavaScript errors (console errors
and uncaught exceptions), the load time (navigation to the load event) and a PNG. Then, on the open overview,
it measures the seconds from the double going dark until the page's ``edge`` health cell reads DOWN, and from its
return until it reads HEALTHY, with a marker in the page proving no reload happened; the pages are opened after
that, so the timeline and the logs show the failover. Every request the browser
makes to another host than the console's is counted; an unauthenticated request's status is recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import grpc

from fedapi import autoscale_pb2, autoscale_pb2_grpc, client
from fedcore import reporting
from fedcore.agentcmd import dies_with_starter
from fedcore.loopback import free_ports
from fedplane.lab.doubles.kubedouble import NODES, KubeDouble
from fedplane.lab.drills.agentfleet import AgentFleet
from fedplane.lab.drills.commands import run_stoppable

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TWINS, TWIN_NODES, EDGE = 2, 2, "edge"
START_TIMEOUT_S = 90.0
SHOWN_TIMEOUT_S = 30.0
POLL_S = 0.02
OUTAGE_HOLD_S = 3.0
"""The outage lasts this long after the page shows it (the failover completes meanwhile), and the pages are opened
this long after the recovery shows."""
AUTOSCALED = "cache"
WORKLOADS = (("web", 4, 500, 512), ("batch", 2, 1500, 2048), ("cache", 3, 250, 1024))


@dataclass
class PageFigures:
    path: str
    js_errors: int
    load_ms: float
    screenshot: str
    bytes: int
    errors: list[str] = field(default_factory=list)


def _kubeconfig(url: str, path: Path) -> None:
    path.write_text(json.dumps({  # JSON is YAML
        "apiVersion": "v1", "kind": "Config", "current-context": EDGE,
        "clusters": [{"name": EDGE, "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": EDGE, "context": {"cluster": EDGE, "user": "bench", "namespace": "default"}}],
    }))


def _edge_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "8000m", "memory": "32768Mi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def _fedplane(*args: str, creds: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"FEDPLANE_CREDENTIALS": str(creds)} if creds else {})}
    return subprocess.run([sys.executable, "-m", "fedplane", *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def _until(check: Any, timeout: float, what: str) -> float:
    """Poll ``check`` (sync or async) until it is truthy; the monotonic time it was."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)


class Plane:
    """``fedplane controlplane serve`` as a child process, with the credentials the bench issues from its admin's."""

    def __init__(self, work: Path, kubeconfig: Path) -> None:
        self.work = work
        self.port, self.ui_port, self.link_port = free_ports(3)
        self.admin = work / "admin.cred"
        self.log = open(work / "plane.log", "wb")  # noqa: SIM115 - closed in stop
        argv = [sys.executable, "-m", "fedplane", "controlplane", "serve", "--db", str(work / "cp.db"), "--port", str(self.port),
                "--ui-port", str(self.ui_port), "--agent-port", str(self.link_port), "--metrics-port", "-1",
                "--twin-clusters", str(TWINS), "--twin-nodes", str(TWIN_NODES), "--agents-bind", "--kubeconfig", str(kubeconfig),
                "--placer", "kube-scheduler", "--no-scorer-selection", "--admin-credentials", str(self.admin)]
        # its own process group (stopped whole), and dead with the bench however the bench ends
        self.process = subprocess.Popen(dies_with_starter(argv), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    async def ready(self) -> None:
        def up() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"the control plane exited ({self.process.returncode}):\n{self.tail()}")
            try:
                return self.admin.exists() and _status(self.url + "/login") == 200
            except OSError:
                return False
        await _until(up, START_TIMEOUT_S, "the control plane and its console")

    def issue(self, role: str, cluster: str = "") -> Path:
        out = self.work / f"{role}{'-' + cluster if cluster else ''}.cred"
        done = _fedplane("controlplane", "credentials", "--role", role, *(["--cluster", cluster] if cluster else []), "--out", str(out),
                         "--target", f"127.0.0.1:{self.port}", creds=self.admin)
        if done.returncode != 0:
            raise RuntimeError(f"cannot issue a {role} credential: {done.stderr.strip()[-400:]}")
        return out

    def autoscale(self, workload: str) -> None:
        """Enable forecast-fed autoscaling over gRPC with room for the forecaster's fit (seconds on a busy host; the
        CLI's call gives up after 10 s)."""
        spec = autoscale_pb2.AutoscaleSpec(workload=workload, series="alibaba2018-cpu", policy="forecast_hpa", min_replicas=1,
                                           max_replicas=6, startup_s=60.0, peak_replicas=4.0, speed=60.0)
        conn = client.connect(f"127.0.0.1:{self.port}", None, json.loads(self.admin.read_text())["token"])
        try:
            autoscale_pb2_grpc.AutoscalerStub(conn.channel).EnableAutoscale(autoscale_pb2.EnableAutoscaleRequest(spec=spec), timeout=120)
        except grpc.RpcError as exc:
            raise RuntimeError(f"autoscale {workload}: {exc.code().name}: {exc.details()}") from None
        finally:
            conn.close()

    def tail(self) -> str:
        return (self.work / "plane.log").read_text(errors="replace")[-1500:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


async def _signed_in(browser: Any, base: str, token: str) -> tuple[Any, Any, list[str], list[str]]:
    """A browser context signed in through the form; its page, the page's errors so far, and requests to other hosts."""
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    external: list[str] = []
    host = base.split("//", 1)[1]
    context.on("request", lambda r: external.append(r.url) if r.url.split("//", 1)[-1].split("/", 1)[0] != host
               and not r.url.startswith(("data:", "blob:", "about:")) else None)
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"exception: {e}"))
    await page.goto(base + "/login")
    await page.fill("input[name=token]", token)
    async with page.expect_navigation():
        await page.click("button[type=submit]")
    return context, page, errors, external


async def _pages(page: Any, base: str, errors: list[str], out: Path) -> list[PageFigures]:
    """Open every page the navigation, the overview and the workloads link to: errors, load time, a screenshot, the
    HTML's size."""
    links: list[str] = []
    for start in ("/", "/workloads"):
        await page.goto(base + start)
        links += await page.eval_on_selector_all("header nav a, table.clusters a, table.matrix a", "els => els.map(e => e.getAttribute('href'))")
    figures = []
    for path in dict.fromkeys(links):
        errors.clear()
        started = time.monotonic()
        response = await page.goto(base + path, wait_until="load")
        load_ms = (time.monotonic() - started) * 1000
        await _live(page, path)
        shot = out / f"{path.strip('/').replace('/', '-') or 'overview'}.png"
        await page.screenshot(path=str(shot), full_page=True)
        body = await response.body() if response is not None else b""
        figures.append(PageFigures(path, len(errors), round(load_ms, 1), str(shot), len(body), list(errors)))
    return figures


async def _live(page: Any, path: str) -> None:
    """Wait until the page's event stream has delivered (the header's badge says live)."""
    async def on() -> bool:
        return bool(await page.evaluate("document.getElementById('live').className === 'on'"))
    await _until(on, 10, f"live updates on {path}")


async def _health(page: Any, cluster: str) -> str:
    return str(await page.evaluate(f"(document.querySelector('tr[data-cluster=\"{cluster}\"] td.health') || {{}}).textContent || ''"))


async def run(out: Path, executable: str) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fedplane-consolebench-"))
    double = KubeDouble().start()
    plane: Plane | None = None
    fleet: AgentFleet | None = None
    try:
        for i in range(TWIN_NODES):
            double.put(NODES, None, f"{EDGE}-n{i}", _edge_node(f"{EDGE}-n{i}"))
        _kubeconfig(double.url, work / "kubeconfig")
        plane = Plane(work, work / "kubeconfig")
        await plane.ready()
        viewer = json.loads(plane.issue("viewer").read_text())["token"]
        agent_creds = {f"c{i}": plane.issue("agent", f"c{i}") for i in range(TWINS)}
        fleet = AgentFleet({f"c{i}": [f"c{i}-n{j}" for j in range(TWIN_NODES)] for i in range(TWINS)}, time.monotonic, credentials=agent_creds)
        await fleet.start(f"127.0.0.1:{plane.port}", f"127.0.0.1:{plane.link_port}")
        for name, replicas, cpu, memory in WORKLOADS:
            done = _fedplane("controlplane", "submit", name, "--replicas", str(replicas), "--cpu", f"{cpu}m", "--memory", f"{memory}Mi",
                             "--target", f"127.0.0.1:{plane.port}", creds=plane.admin)
            if done.returncode != 0:
                raise RuntimeError(f"submit {name}: {done.stderr.strip()[-400:]}")
        await asyncio.to_thread(plane.autoscale, AUTOSCALED)
        unauthenticated = _status(plane.url + "/")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                context, page, errors, external = await _signed_in(browser, plane.url, viewer)
                await page.goto(plane.url + "/")
                await _live(page, "/")
                await _until(lambda: _health(page, EDGE), 10, "the edge cluster's row")
                await page.evaluate("window.fedplaneBench = 'no reload'")
                dark = time.monotonic()
                double.set_dark(True)

                async def shows(health: str) -> bool:
                    return (await _health(page, EDGE)).strip().lower() == health
                down = await _until(lambda: shows("down"), SHOWN_TIMEOUT_S, "the overview to show edge down")
                await asyncio.sleep(OUTAGE_HOLD_S)  # long enough for the failover to finish while the cluster is down
                await page.screenshot(path=str(out / "overview-during-outage.png"), full_page=True)
                back = time.monotonic()
                double.set_dark(False)
                healthy = await _until(lambda: shows("healthy"), SHOWN_TIMEOUT_S, "the overview to show edge healthy")
                reloaded = await page.evaluate("window.fedplaneBench") != "no reload"
                await asyncio.sleep(OUTAGE_HOLD_S)  # the return and the stale copy's clean-up, for the timeline and the logs
                figures = await _pages(page, plane.url, errors, out)  # after the outage: the timeline and logs hold it
                await context.close()
                version = f"{browser.browser_type.name} {browser.version}"
            finally:
                await browser.close()
    finally:
        if fleet is not None:
            await fleet.stop()
        if plane is not None:
            plane.stop()
        double.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "browser": version, "pages": [{"path": f.path, "js_errors": f.js_errors, "load_ms": f.load_ms, "screenshot": f.screenshot,
                                       **({"errors": f.errors} if f.errors else {})} for f in figures],
        "outage_shown_s": round(down - dark, 3), "recovered_shown_s": round(healthy - back, 3), "reloaded": reloaded,
        "unauthenticated_status": unauthenticated, "external_requests": len(external), "page_bytes_max": max(f.bytes for f in figures),
        "clusters": [*(f"c{i}" for i in range(TWINS)), EDGE], "agents": TWINS * TWIN_NODES, "outage": f"{EDGE}'s API dark (503 to everything)",
        "out": str(out),
    }


@click.command("console")
@click.option("--out", default="fedplane-console", show_default=True, type=click.Path(file_okay=False),
              help="Directory for one PNG screenshot per page (and the overview during the outage).")
@click.option("--browser", "executable", default=CHROMIUM, show_default=True, type=click.Path(dir_okay=False),
              help="Chromium executable to drive (Debian's chromium package; never downloaded).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_console(out: str, executable: str, as_json: bool) -> None:
    """The web console in headless Chromium on a live plane with real agents: JS errors, load times, screenshots,
    an outage and its recovery shown without a reload, the unauthenticated answer, requests to other hosts."""
    if not Path(executable).exists():
        raise click.ClickException(f"no browser at {executable}: install Debian's chromium (apt-get install chromium) or pass --browser")
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise click.ClickException("the bench drives Chromium through the playwright package: pip install 'fedplane[test]'") from None
    try:
        result = run_stoppable(run(Path(out), executable))  # SIGTERM: the plane, agents and browser are stopped
    except (RuntimeError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        reporting.emit_json(result)
    else:
        reporting.table("console pages", [{k: v for k, v in p.items() if k != "errors"} for p in result["pages"]])
        for key in ("browser", "outage_shown_s", "recovered_shown_s", "reloaded", "unauthenticated_status", "external_requests", "page_bytes_max"):
            reporting.stderr.print(f"{key}: {result[key]}")
