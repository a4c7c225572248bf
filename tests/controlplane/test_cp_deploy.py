"""Deploy artefacts: the Helm chart renders to valid Kubernetes manifests with least-privilege RBAC,
and the Grafana dashboard only queries metrics the control plane exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest

from controlplane.metrics import Metrics
from cp_helm import render

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "fedplane-controlplane"
DASHBOARD = ROOT / "deploy" / "grafana" / "fedplane-controlplane.json"


def test_chart_renders_valid_manifests() -> None:
    docs = render(CHART)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "PersistentVolumeClaim", "Role",
                     "RoleBinding", "Service", "ServiceAccount"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_deployment_is_single_writer_hardened_and_wired_to_its_config() -> None:
    docs = {d["kind"]: d for d in render(CHART, values={"grpcPort": 6000})}
    dep = docs["Deployment"]["spec"]
    assert dep["replicas"] == 1 and dep["strategy"]["type"] == "Recreate"
    container = dep["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["controlplane", "serve"] and "--port=6000" in container["args"]
    assert container["readinessProbe"]["grpc"]["port"] == 6000
    assert container["securityContext"]["readOnlyRootFilesystem"] and container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = docs["ConfigMap"]["data"]
    used = set(re.findall(r"\$\((\w+)\)", " ".join(container["args"])))
    assert used <= set(env), f"args use variables the ConfigMap does not define: {used - set(env)}"
    assert env["FEDPLANE_SCORER_SELECTION"] == "true", "serve reads it (click envvar): the chart can turn selection off"


def test_rbac_is_least_privilege() -> None:
    docs = render(CHART)
    rules = [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    granted = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert all("*" not in item for item in granted)
    assert not any(res in ("secrets", "configmaps") for _g, res, _v in granted)
    cluster_wide = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert cluster_wide == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    assert ("", "pods/binding", "create") in granted and ("apps", "deployments/scale", "patch") in granted
    assert ("", "pods/eviction", "create") in granted and ("apps", "replicasets", "delete") in granted


def test_renderer_refuses_constructs_it_does_not_understand(tmp_path: object) -> None:
    import shutil
    from pathlib import Path

    chart = Path(str(tmp_path)) / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "extra.yaml").write_text("x: {{ toYaml .Values.resources }}\n")
    with pytest.raises(ValueError, match="not supported"):
        render(chart)


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = set()
    for family in Metrics().registry.collect():
        exported |= {s.name for s in family.samples} | {family.name}
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    used = {m for e in exprs for m in re.findall(r"\b(fedplane_[a-z_]+)", e)}
    assert used and used <= exported | {m + "_total" for m in exported} | {m + "_bucket" for m in exported}, used - exported
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_replicated_values_render_members_on_etcd_with_tls_and_the_console() -> None:
    values = {"etcd": {"endpoints": "http://etcd-0:2379,http://etcd-1:2379,http://etcd-2:2379"}, "replicas": 3, "tls": {"secret": "cp-tls"}}
    docs = render(CHART, values=values)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    kinds = {d["kind"]: d for d in docs}
    assert "PersistentVolumeClaim" not in kinds, "replicated members keep their state in etcd"
    dep = kinds["Deployment"]["spec"]
    assert dep["replicas"] == 3 and dep["strategy"]["rollingUpdate"]["maxUnavailable"] == 1
    pod = dep["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--etcd=http://etcd-0:2379,http://etcd-1:2379,http://etcd-2:2379" in args and not any(a.startswith("--db") for a in args)
    assert {"--member=$(POD_NAME)", "--tls-cert=/etc/fedplane/tls/tls.crt", "--tls-ca=/etc/fedplane/tls/ca.crt"} <= set(args)
    assert {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"] == "cp-tls"
    assert "console" in {p["name"] for p in kinds["Service"]["spec"]["ports"]} and "--ui-port=8080" in args


def test_single_member_values_keep_one_writer_on_its_volume() -> None:
    kinds = {d["kind"]: d for d in render(CHART)}
    args = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--db=$(FEDPLANE_DB)" in args and not any(a.startswith(("--etcd", "--tls")) for a in args)
    assert "PersistentVolumeClaim" in kinds


def test_every_serve_flag_the_chart_passes_exists() -> None:
    from click.testing import CliRunner

    from fedplane.cli import main

    helptext = CliRunner().invoke(main, ["controlplane", "serve", "--help"], terminal_width=200).output
    for values in ({}, {"etcd": {"endpoints": "http://e:2379"}, "tls": {"secret": "s"}}):
        args = {d["kind"]: d for d in render(CHART, values=values)}["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
        for flag in (a.split("=")[0] for a in args[2:]):
            assert flag in helptext, f"the chart passes {flag}, which serve does not take"
