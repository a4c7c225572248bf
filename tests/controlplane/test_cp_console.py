"""The web console: pages rendered from hand-made snapshots (names, escaping, wall time, size), the HTTP shell
(401 without a viewer's token, HTML with one, the sign-in cookie, live regions over SSE), a snapshot of a real
plane, ``serve --ui-port`` end to end, and one real headless Chromium that sees a change without reloading."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from controlplane.campaigning import Solo
from controlplane.console import markup, pages, serving, snapshots
from controlplane.console.snapshots import (
    AgentView,
    AutoscaleView,
    ClusterView,
    DecisionView,
    MigrationView,
    NodeView,
    PlacementView,
    PodView,
    Snapshot,
    StepView,
    WorkloadView,
)
from controlplane.registry import ClusterSpec
from controlplane.runtime import Backends, ControlPlane
from controlplane.workloads import Template, Workload

HOSTILE = "<script>alert(1)</script>"
T0 = 1_796_000_000.0  # 2026-11-29 ...Z
TOKEN = "viewer-token"


def _cluster(name: str, health: str = "healthy", region: str = "r0", reasons: tuple[str, ...] = ("API answers probes",)) -> ClusterView:
    agent = AgentView("n0", "n0-1", "reporting", 0.1, "", "policy-v3", "learned", 7, 2, 0.4, (1, 0, 0), (2, 1, 0))
    return ClusterView(name, region, "twin", health, T0 - 60, reasons, 8000, 1000, 32768, 512, 0.12, 0.2, "learned",
                       (NodeView("n0", True, 8000, 32768, 0, "amd64", ""),), (agent,), tuple((T0 - 10 + i, 0.1 + i / 100) for i in range(10)))


def _snapshot(*clusters: ClusterView, decisions: int = 3) -> Snapshot:
    migration = MigrationView("m1", "web", "failover", "c0", "c1", 2, 3, "done", T0 - 30, T0 - 29, "", ("c0 is down",),
                              (StepView(T0 - 30, "plan", "done", ""), StepView(T0 - 29, "create-target", "done", "")))
    return Snapshot(
        T0, True, "", "", clusters or (_cluster("c0"), _cluster("c1", region="r1")),
        (WorkloadView("web", 2, 500, 512, 0, (PlacementView("c1", 2, 3, "placed"),)),),
        (migration,),
        tuple(DecisionView(T0 - i, "verdict:down" if i == 0 else "place", "web", "c0", "c1", ("why",)) for i in range(decisions)),
        (AutoscaleView("web", "forecast_hpa", "alibaba2018-cpu", 1, 6, 2.5, 3.1, 3, 2, 2, "2 -> 3 replicas", "",
                       tuple((T0 - 60 + i, 2 + i / 30) for i in range(60))),),
        (PodView("c1", "web-0", "web", 3, "Running", True, "c1-n0"), PodView("c1", "web-1", "web", 2, "Running", True, "c1-n1")),
    )


def test_every_page_names_the_clusters_and_reads_wall_time() -> None:
    s = _snapshot()
    assert set(pages.paths(s)) >= {"/", "/workloads", "/timeline", "/decisions", "/autoscaling", "/learning", "/drills", "/clusters/c0",
                                   "/workloads/web"}
    for path in pages.paths(s):
        page = pages.render(s, path)
        assert page is not None, path
        html = page.html()
        assert html.startswith("<!doctype html>") and "</html>" in html
        assert "http://" not in html and "https://" not in html  # nothing fetched from elsewhere
        assert "&lt;" not in html, path  # markup stays markup: the page reads as served, before any script runs
    overview = _html(s, "/")
    assert 'data-cluster="c0"' in overview and 'data-cluster="c1"' in overview
    assert 'data-health="healthy"' in overview
    assert markup.when(T0) in _html(s, "/decisions")  # wall clock, UTC, not uptime
    assert _html(s, "/").count('<polyline') == 2 and _html(s, "/autoscaling").count('<polyline') == 1  # load and demand drawn
    assert pages.render(s, "/clusters/nowhere") is None and pages.render(s, "/nope") is None and pages.render(s, "/workloads/x") is None
    trail = _html(s, "/workloads/web")  # its placement with the epoch, then decision -> migration steps, oldest first
    assert ">e3<" not in trail and "<td>3</td>" in trail
    assert "<td>c1-n0</td><td>3</td>" in trail and '<td class="bad">2 (stale)</td>' in trail  # bound pods, an old epoch flagged
    assert trail.index("failover: plan done") < trail.index("failover: create-target done") < trail.index(">verdict:down<")


def _html(s: Snapshot, path: str) -> str:
    page = pages.render(s, path)
    assert page is not None
    return page.html()


def test_the_learning_page_shows_the_promoted_and_canary_models_and_the_loop_s_decisions() -> None:
    loop = (DecisionView(T0 - 1, "rounds-run", "", "", "run-2", ("run 2 finished: round 4 canary; fleet on v000003",)),
            DecisionView(T0 - 2, "model-canary", "", "", "v000004", ("v000004 on trial for 20% of the decisions of c0/n0",)),
            DecisionView(T0 - 3, "model-promote", "", "", "v000003", ("every agent runs v000003 (was v000002)",)),
            DecisionView(T0 - 4, "rounds-start", "", "", "10.0.0.1:9092", ("SuperLink at 10.0.0.1:9092 (TLS, trainers c0, c1)",)))
    html = _html(dataclasses.replace(_snapshot(), decisions=loop + _snapshot().decisions), "/learning")
    models = html[html.index("Models the plane hands out"):html.index("rounds and model changes")]
    assert "v000003" in models and "v000004 on trial for 20%" in models
    rounds = html[html.index("rounds and model changes"):html.index("Scorer family per cluster")]
    assert "rounds-run" in rounds and "rounds-start" in rounds and "place" not in rounds
    ended = (DecisionView(T0, "model-canary-end", "", "", "v000004", ("trial of v000004 ended: rolled back",)), *loop)
    html = _html(dataclasses.replace(_snapshot(), decisions=ended), "/learning")
    assert "v000004 on trial" not in html[html.index("Models the plane hands out"):html.index("rounds and model changes")]
    assert "No model decision" in _html(_snapshot(), "/learning")


def test_an_agent_told_learned_but_running_the_heuristic_is_flagged() -> None:
    c0 = _cluster("c0")
    fallback = dataclasses.replace(c0, agents=(dataclasses.replace(c0.agents[0], model_version="heuristic"),))
    assert "(no learned model)" not in _html(_snapshot(c0), "/clusters/c0")
    assert '<td class="warn"' in _html(_snapshot(fallback), "/clusters/c0") and "(no learned model)" in _html(_snapshot(fallback), "/learning")


def test_hostile_names_are_shown_escaped_never_run() -> None:
    evil = _cluster(HOSTILE, reasons=(f"probe said {HOSTILE}", 'quote " and <img src=x onerror=alert(1)>'))
    s = _snapshot(evil, _cluster("c0"))
    for path in pages.paths(s):
        page = pages.render(s, path)
        assert page is not None, path
        html = page.html()
        assert "<script>alert" not in html and "<img" not in html, path
        assert "onerror=alert" not in html or "&lt;img src=x onerror=alert(1)&gt;" in html
    overview = _html(s, "/")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in overview
    assert "/clusters/%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in overview  # the link to its page, percent-encoded
    assert pages.render(s, "/clusters/%3Cscript%3Ealert%281%29%3C%2Fscript%3E") is not None


def test_a_long_lived_plane_still_fits_a_page_in_512_kib() -> None:
    many = tuple(_cluster(f"c{i}", region=f"r{i % 4}") for i in range(60))
    s = dataclasses.replace(_snapshot(*many, decisions=snapshots.DECISIONS_SHOWN),
                            decisions=tuple(DecisionView(T0 - i, "failover", "w" * 60, "c0", "c1", ("x" * 400,) * 3)
                                            for i in range(snapshots.DECISIONS_SHOWN)))
    for path in pages.paths(s):
        page = pages.render(s, path)
        assert page is not None
        assert len(page.html().encode()) <= 512 * 1024, path


def test_a_real_plane_snapshot_shifts_its_clock_to_wall_time(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "cp.db", Backends(time.monotonic, 0.0), time.monotonic)
    try:
        for i in range(2):
            plane.register_cluster(ClusterSpec(f"c{i}", f"r{i}", twin_nodes=2))
        plane.tick(time.monotonic())
        plane.submit(Workload("web", 2, Template(500, 256)), False)
        s = snapshots.take(plane, Solo(), lambda: T0)
    finally:
        plane.close()
    assert [c.name for c in s.clusters] == ["c0", "c1"] and all(c.health == "healthy" for c in s.clusters)
    assert [w.name for w in s.workloads] == ["web"] and sum(p.replicas for p in s.workloads[0].placements) == 2
    assert s.decisions and all(T0 - 60 < d.at <= T0 for d in s.decisions)  # the plane's clock, moved to the wall's
    assert len(s.clusters[0].nodes) == 2
    assert len(s.pods) == 2 and {p.workload for p in s.pods} == {"web"}  # the twin's pods, read without driving it


@pytest.mark.asyncio
async def test_the_plane_s_credentials_let_viewers_and_up_read_and_no_agent(tmp_path: Path) -> None:
    from controlplane import auth
    from controlplane.sqlitestore import SqliteStore

    store = SqliteStore(tmp_path / "cp.db")
    try:
        gate = auth.Authenticator(store)
        check = serving.viewers(gate)
        for role in ("viewer", "operator", "admin"):
            assert await check(gate.issue(role))
        assert not await check(gate.issue("agent", cluster="c0"))
        assert not await check("") and not await check("never-issued")
        assert await serving.viewers(auth.INSECURE)("")  # --insecure (loopback only): the console is as open as the API
    finally:
        store.close()


class Holder:
    """The snapshot a test serves; swapping it is a change the live stream must carry."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def take(self) -> Snapshot:
        return self.snap


async def _viewer(token: str) -> bool:
    return token == TOKEN


@pytest_asyncio.fixture
async def client() -> AsyncIterator[tuple[TestClient, Holder]]:  # type: ignore[type-arg]
    holder = Holder(_snapshot())
    console = serving.Console(holder.take, _viewer, poll_s=0.05)
    async with TestClient(TestServer(console.app())) as c:
        yield c, holder
        await console.close()


BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.asyncio
async def test_no_viewer_token_no_console(client: tuple[TestClient, Holder]) -> None:  # type: ignore[type-arg]
    c, _ = client
    for path in ("/", "/clusters/c0", "/decisions", "/events?path=/"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            reply = await c.get(path, headers=headers)
            assert reply.status == 401, (path, headers)
            body = await reply.text()
            assert "c0" not in body and 'action="/login"' in body
            assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await c.get("/static/live.js")).status == 200  # no data in it: served to the sign-in page too


@pytest.mark.asyncio
async def test_a_viewer_token_gets_html_under_a_same_origin_policy(client: tuple[TestClient, Holder]) -> None:  # type: ignore[type-arg]
    c, _ = client
    reply = await c.get("/", headers=BEARER)
    assert reply.status == 200 and reply.content_type == "text/html"
    body = await reply.text()
    assert "<html" in body and ">c0<" in body and ">c1<" in body
    assert "default-src 'self'" in reply.headers["Content-Security-Policy"]
    assert (await c.get("/clusters/nowhere", headers=BEARER)).status == 404


@pytest.mark.asyncio
async def test_the_sign_in_form_sets_a_strict_http_only_cookie(client: tuple[TestClient, Holder]) -> None:  # type: ignore[type-arg]
    c, _ = client
    assert (await c.post("/login", data={"token": "wrong"}, allow_redirects=False)).status == 401
    assert (await c.post("/login", data={"token": TOKEN}, headers={"Origin": "https://elsewhere.example"}, allow_redirects=False)).status == 403
    reply = await c.post("/login", data={"token": TOKEN}, allow_redirects=False)
    assert reply.status == 303 and reply.headers["Location"] == "/"
    cookie = reply.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert (await c.get("/workloads")).status == 200  # the cookie jar carries the session
    await c.post("/logout", allow_redirects=False)
    assert (await c.get("/workloads")).status == 401


@pytest.mark.asyncio
async def test_events_deliver_a_changed_health_cell(client: tuple[TestClient, Holder]) -> None:  # type: ignore[type-arg]
    c, holder = client
    reply = await c.get("/events?path=/", headers=BEARER)
    assert reply.status == 200 and reply.content_type == "text/event-stream"

    async def next_message() -> dict[str, object]:
        while True:
            line = (await asyncio.wait_for(reply.content.readline(), 5)).decode()
            if line.startswith("data: "):
                return dict(json.loads(line[6:]))

    first = await next_message()
    assert set(first["regions"]) == {"status", "clusters", "recent"}  # type: ignore[arg-type]
    assert 'data-health="down"' not in str(first["regions"])
    holder.snap = dataclasses.replace(holder.snap, clusters=(_cluster("c0", "down"), holder.snap.clusters[1]))
    changed = time.monotonic()
    while True:
        message = await next_message()
        regions = dict(message["regions"])  # type: ignore[call-overload]
        if "clusters" in regions:
            break
        assert time.monotonic() - changed < 2
    assert re.search(r'data-cluster="c0"><td><a href="/clusters/c0">c0</a></td><td class="health h-down" data-health="down">down', regions["clusters"])
    assert time.monotonic() - changed < 2
    reply.close()


@pytest.mark.asyncio
async def test_under_tls_the_console_speaks_https_and_its_cookie_is_secure(tmp_path: Path) -> None:
    import ssl

    import aiohttp
    from cp_certs import make_pki

    from fedapi.tls import TlsFiles

    pki = make_pki(tmp_path)
    served = await serving.start(serving.Console(Holder(_snapshot()).take, _viewer, secure=True), "127.0.0.1", 0,
                                 TlsFiles(pki["server_cert"], pki["server_key"], pki["ca"]))
    try:
        trust = ssl.create_default_context(cafile=str(pki["ca"]))
        async with aiohttp.ClientSession() as session:
            base = f"https://127.0.0.1:{served.port}"
            async with session.get(base + "/", ssl=trust) as reply:
                assert reply.status == 401
            async with session.post(base + "/login", data={"token": TOKEN}, ssl=trust, allow_redirects=False) as reply:
                assert reply.status == 303 and "Secure" in reply.headers["Set-Cookie"]
            async with session.get(base + "/", ssl=trust, headers=BEARER) as reply:
                assert reply.status == 200 and ">c0<" in await reply.text()
    finally:
        await served.stop()


def test_serve_ui_port_answers_401_then_html_to_a_viewer(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "fedplane", "controlplane", "serve", "--db", str(tmp_path / "cp.db"), "--port", "0", "--agent-port", "0",
            "--metrics-port", "-1", "--ui-port", "0", "--twin-clusters", "2", "--no-scorer-selection",
            "--admin-credentials", str(tmp_path / "admin.cred")]
    plane = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert plane.stderr is not None
        text = ""  # the start line, however the terminal width wrapped it
        while not re.search(r"console on\s*http://127\.0\.0\.1:\d+/", text):
            line = plane.stderr.readline()
            assert line, text
            text += line.rstrip("\n")
        ui = re.search(r"console on\s*http://127\.0\.0\.1:(\d+)/", text)
        grpc_port = re.search(r"control plane on 127\.0\.0\.1:(\d+)", text)
        assert ui and grpc_port, text
        import urllib.error
        import urllib.request
        url = f"http://127.0.0.1:{ui.group(1)}/"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 401
        viewer = tmp_path / "viewer.cred"
        issued = subprocess.run([sys.executable, "-m", "fedplane", "controlplane", "credentials", "--role", "viewer", "--out", str(viewer),
                                 "--target", f"127.0.0.1:{grpc_port.group(1)}"], env={**env, "FEDPLANE_CREDENTIALS": str(tmp_path / "admin.cred")},
                                capture_output=True, text=True, timeout=60, check=False)
        assert issued.returncode == 0, issued.stderr
        token = json.loads(viewer.read_text())["token"]
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}), timeout=5) as reply:
            html = reply.read().decode()
        assert "<html" in html and ">c0<" in html and ">c1<" in html
    finally:
        plane.terminate()
        plane.wait(10)


def test_serve_ui_port_without_aiohttp_says_what_to_install(tmp_path: Path) -> None:
    probe = ("import sys; sys.modules['aiohttp'] = None; from fedplane.entry import main; "
             f"sys.argv = ['fedplane', 'controlplane', 'serve', '--db', {str(tmp_path / 'cp.db')!r}, '--ui-port', '0']; main()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pip install 'fedplane[console]'" in out.stderr.replace("\n", "")


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def served_console() -> Iterator[tuple[str, Holder]]:
    """The console on a real port, in its own event loop thread (the browser's client is synchronous)."""
    holder = Holder(_snapshot())
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, serving.Served] = {}

    async def main() -> None:
        box["served"] = await serving.start(serving.Console(holder.take, _viewer, poll_s=0.1), "127.0.0.1", 0)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{box['served'].port}", holder
    asyncio.run_coroutine_threadsafe(box["served"].stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.mark.integration
def test_chromium_shows_a_change_without_reloading(served_console: tuple[str, Holder]) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra has it)")
    from fedplane.lab.benches.consolebench import CHROMIUM_ARGS

    base, holder = served_console
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base + "/login")
            page.fill("input[name=token]", TOKEN)
            with page.expect_navigation():
                page.click("button[type=submit]")
            page.wait_for_selector("#live.on", timeout=10_000)
            page.evaluate("window.notReloaded = true")
            holder.snap = dataclasses.replace(holder.snap, clusters=(_cluster("c0", "down"), holder.snap.clusters[1]))
            page.wait_for_selector('tr[data-cluster="c0"] td[data-health="down"]', timeout=2_000)
            assert page.evaluate("window.notReloaded") is True
            static = browser.new_context(java_script_enabled=False, extra_http_headers=BEARER).new_page()
            static.goto(base + "/clusters/c0")  # without JavaScript: the server's HTML alone
            assert static.locator("h2", has_text="Nodes").count() == 1 and static.locator("table").count() >= 2
            assert "&lt;" not in static.content() and static.locator("#live").inner_text() == "static"
        finally:
            browser.close()
    assert errors == []
