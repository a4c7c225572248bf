"""The SuperLink <-> SuperNode channel is secure by default: TLS with the service's own CA, only registered trainers."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from federated.flower import engine, linktls, supervisor


def test_the_ca_is_kept_and_the_server_certificate_names_the_superlink_s_address(tmp_path: Path) -> None:
    first = linktls.prepare(tmp_path / "tls", "10.231.0.1")
    ca_pem = first.ca.read_bytes()
    again = linktls.prepare(tmp_path / "tls", "10.231.0.1")
    assert again.ca.read_bytes() == ca_pem, "a restart keeps the CA the trainers hold"
    ca, server = x509.load_pem_x509_certificate(ca_pem), x509.load_pem_x509_certificate(again.cert.read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.231.0.1") in names.get_values_for_type(x509.IPAddress)
    for private in (again.key, tmp_path / "tls" / "ca.key"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_trainer_key_is_an_openssh_ec_key_as_flower_loads_it(tmp_path: Path) -> None:
    link = linktls.prepare(tmp_path, "127.0.0.1")
    public = linktls.node_keys(link, "region-0")
    key = load_ssh_private_key(link.node_key("region-0").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(load_ssh_public_key(public.read_bytes()), ec.EllipticCurvePublicKey)
    assert linktls.node_keys(link, "region-0").read_bytes() == public.read_bytes(), "made once, kept"


def test_a_secure_engine_serves_tls_and_registers_each_trainer_before_it_joins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    ran: list[list[str]] = []

    class Started:
        pid = 4242

    def spawn(command: list[str], env: object, log: Path) -> Started:
        spawned.append(command)
        return Started()

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(supervisor, "spawn", spawn)
    monkeypatch.setattr(engine.subprocess, "run", run)
    security = linktls.prepare(tmp_path / "tls", "10.231.0.1")
    eng = engine.Engine(tmp_path, 9092, "10.231.0.1", security=security)
    eng.add_supernode("region-0", {"partition-id": 0}, ["ip", "netns", "exec", "trainer-0"])
    (command,) = spawned
    assert "--insecure" not in command
    assert command[command.index("--root-certificates") + 1] == str(security.ca)
    assert command[command.index("--auth-supernode-private-key") + 1] == str(security.node_key("region-0"))
    (register,) = ran
    assert register[1:4] == ["supernode", "register", str(security.node_public_key("region-0"))]
    assert engine.attach(tmp_path).security == security, "federated down and a reboot of a trainer find the keys again"
    engine.write_connection(tmp_path / "home", eng.address, security)
    config = (tmp_path / "home" / "config.toml").read_text()
    assert f'root-certificates = "{security.ca}"' in config and "insecure" not in config


def test_an_insecure_engine_says_so_on_every_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(supervisor, "spawn", lambda command, env, log: type("P", (), {"pid": 1})())
    command = supervisor.supernode_command("127.0.0.1:9092", 9094, {})
    assert "--insecure" in command and "--root-certificates" not in command
    engine.write_connection(tmp_path, "127.0.0.1:9092")
    assert "insecure = true" in (tmp_path / "config.toml").read_text()


@pytest.mark.skipif(os.environ.get("FEDPLANE_LOOP_SLOW") != "1", reason="opt-in: set FEDPLANE_LOOP_SLOW=1 (real Flower processes, ~15 s)")
def test_only_a_registered_trainer_joins_a_secure_superlink(tmp_path: Path) -> None:
    eng = engine.start(tmp_path / "engine", [{"partition-id": 0}], secure=True)
    try:
        assert eng.security is not None
        linktls.node_keys(eng.security, "rogue")  # a key the SuperLink was never told
        eng._spawn("rogue", supervisor.supernode_command(eng.address, supervisor.free_port(), {}, eng.security.supernode_args("rogue")))
        deadline, online = time.monotonic() + 60, 0
        while time.monotonic() < deadline and online < 1:
            listed = subprocess.run([str(Path(sys.executable).parent / "flwr"), "supernode", "list", engine.CONNECTION, "--format", "json"],
                                    env=eng.env(), capture_output=True, text=True, check=True)
            nodes = json.loads(listed.stdout)["nodes"]
            online = sum(node["status"] == "online" for node in nodes)
            time.sleep(1)
        time.sleep(4)  # the rogue has had its chances too
        nodes = json.loads(subprocess.run([str(Path(sys.executable).parent / "flwr"), "supernode", "list", engine.CONNECTION, "--format", "json"],
                                          env=eng.env(), capture_output=True, text=True, check=True).stdout)["nodes"]
        assert [node["status"] for node in nodes] == ["online"], "the registered trainer joined over TLS; the rogue did not"
    finally:
        eng.stop()
