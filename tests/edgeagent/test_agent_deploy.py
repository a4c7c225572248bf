"""deploy/: Kubernetes manifests valid against the schemas, least-privilege RBAC, a hardened unit."""

from __future__ import annotations

import configparser
import os
from pathlib import Path

import pytest
import yaml

from edgeagent import config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs() -> list[dict[str, object]]:
    out = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


def by_kind(kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [d for d in docs() if d["kind"] == kind]


@pytest.mark.parametrize("doc", docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifest_is_valid_against_the_kubernetes_schema(doc: dict[str, object]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_rbac_allows_only_reading_pods_and_nodes_binding_evicting_and_patching_node_status() -> None:
    """``nodes/status`` patch: the agent advertises its node's batch capacity (edgeagent/batchadvertising.py)."""
    (role,) = by_kind("ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == {("pods", "get"), ("pods", "list"), ("pods", "watch"), ("pods/binding", "create"), ("pods/eviction", "create"),
                       ("nodes", "get"), ("nodes", "list"), ("nodes", "watch"), ("nodes/status", "patch")}
    (binding,) = by_kind("ClusterRoleBinding")
    (account,) = by_kind("ServiceAccount")
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]


def test_daemonset_runs_on_every_arch_with_a_tag_per_arch_unprivileged() -> None:
    (ds,) = by_kind("DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    arch = next(e for e in terms[0]["matchExpressions"] if e["key"] == "kubernetes.io/arch")
    assert set(arch["values"]) == {"amd64", "arm64", "arm"}
    tags = dict(item.split("=") for item in ds["spec"]["template"]["metadata"]["annotations"]["fedplane.io/images"].split())
    assert set(tags) == set(arch["values"]) and all(tag.startswith(spec["containers"][0]["image"] + "-") for tag in tags.values())
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["serviceAccountName"] == by_kind("ServiceAccount")[0]["metadata"]["name"]


def test_configmap_holds_a_valid_agent_config(monkeypatch: pytest.MonkeyPatch) -> None:
    (cm,) = by_kind("ConfigMap")
    monkeypatch.setenv("NODE_NAME", "edge-1")
    monkeypatch.setenv("POD_IP", "10.0.0.5")
    loaded = config.parse(yaml.safe_load(os.path.expandvars(cm["data"]["agent.yaml"])))
    assert loaded.backend.kind == "kubernetes" and loaded.gossip.bind == "10.0.0.5:7946"


def unit_text() -> str:
    return (DEPLOY / "systemd" / "fedplane-agent.service").read_text()


def test_systemd_unit_is_hardened_and_writes_only_its_state_directory() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "fedplane-agent.service")
    service = unit["Service"]
    for key, value in {"DynamicUser": "yes", "StateDirectory": "fedplane-agent", "ProtectSystem": "strict",
                       "NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectHome": "yes"}.items():
        assert service.get(key) == value, key
    assert "ORT_DISABLE_TELEMETRY=1" in service["Environment"]
    assert "fedplane agent --config" in service["ExecStart"]
    # Run as the bench measures it (fedcore.agentcmd): docstrings stripped, from .opt-2.pyc files the install compiled.
    assert "PYTHONOPTIMIZE=2" in service["Environment"] and "-OO -m compileall" in unit_text()


def test_containerfile_is_slim_multi_arch_and_unprivileged() -> None:
    text = (DEPLOY / "container" / "Containerfile").read_text()
    assert "debian:bookworm-slim" in text and all(p in text for p in ("linux/amd64", "linux/arm64", "linux/arm/v7"))
    assert "podman build --platform" in text and "buildah build --platform" in text
    assert "USER 65532" in text and "ORT_DISABLE_TELEMETRY=1" in text
    assert "PYTHONOPTIMIZE=2" in text and text.index("-OO -m compileall") < text.index("USER 65532")
    assert "torch" not in text.replace("no torch", "")
