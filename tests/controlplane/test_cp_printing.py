"""-o json|yaml print plain data: every field, int64 as numbers, enums as words; -o wide shows wide-only columns."""

from __future__ import annotations

import json

import click
import yaml
from click.testing import CliRunner

from controlplane import printing
from fedapi import controlplane_pb2 as cp


def status() -> cp.ListClustersResponse:
    return cp.ListClustersResponse(clusters=[cp.ClusterStatus(
        spec=cp.ClusterSpec(name="c0", region="r0", backend=cp.BACKEND_KUBERNETES, labels={"zone": "a"}),
        verdict=cp.Verdict(health=cp.HEALTH_AGENTS_SILENT, since_ms=2**40), agents_reporting=0)])


def test_plain_data_has_numbers_words_and_zero_values() -> None:
    c = printing.plain(status())["clusters"][0]
    assert c["verdict"] == {"health": "agents-silent", "reasons": [], "since_ms": 2**40}
    assert c["spec"]["backend"] == "kubernetes" and c["spec"]["labels"] == {"zone": "a"}
    assert c["agents_reporting"] == 0 and c["load"] == 0.0  # zero values are printed, not left out


def run(*args: str) -> str:
    @click.command()
    @click.option("--json", "as_json", is_flag=True)
    @printing.output_option
    def listing(as_json: bool) -> None:
        printing.emit(as_json, status(), "clusters", lambda d: [
            {"cluster": c["spec"]["name"], printing.WIDE + "region": c["spec"]["region"]} for c in d["clusters"]])

    result = CliRunner().invoke(listing, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_every_output_format() -> None:
    assert json.loads(run("--json")) == json.loads(run("-o", "json")) == printing.plain(status())
    assert yaml.safe_load(run("-o", "yaml")) == printing.plain(status())
    assert "region" not in run() and "c0" in run()
    assert "region" in run("-o", "wide") and "r0" in run("-o", "wide")


def test_cpu_and_memory_are_kubernetes_quantities() -> None:
    from controlplane.quantities import Cpu, Memory

    assert [Cpu().convert(v, None, None) for v in ("500m", "2", "0.25", "1e3")] == [500, 2000, 250, 1_000_000]
    assert [Memory().convert(v, None, None) for v in ("512Mi", "1Gi", "64", "1G")] == [512, 1024, 1, 954]  # bytes round up to MiB
    for bad in ("abc", "-1", "nan", "1e400", "9223372036854775808"):
        try:
            Cpu().convert(bad, None, None)
        except click.BadParameter as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(f"{bad} accepted")
