"""The committed generated code matches the protos, imports as a package, and keeps its wire numbering."""

from __future__ import annotations

import re
from pathlib import Path

from fedapi import controlplane_pb2 as cp, generate, twincluster_pb2 as tw


def test_generated_modules_are_up_to_date() -> None:
    assert generate.stale() == []


def test_generated_modules_have_no_bare_imports() -> None:
    for path in Path(generate.HERE).glob("*_pb2*.py*"):
        assert not re.search(r"^import \w+_pb2", path.read_text(), re.MULTILINE), path.name


def test_the_services_agents_rely_on_exist() -> None:
    control = cp.DESCRIPTOR.services_by_name["ControlPlane"]
    twin = tw.DESCRIPTOR.services_by_name["TwinCluster"]
    assert {"RegisterCluster", "ListClusters", "ReportAgent", "SubmitWorkload", "GetPlacements", "StartMigration",
            "CancelMigration", "ListMigrations", "ListDecisions", "RunDrill"} <= set(control.methods_by_name)
    assert {"WatchPods", "BindPod", "ReportNodeStatus", "CompletePod", "ListNodes", "DescribeNode", "GetSafety"} <= set(twin.methods_by_name)
    assert twin.methods_by_name["WatchPods"].server_streaming
    # Wire numbers are frozen: appending is allowed, renumbering is not.
    assert cp.AgentReport.DESCRIPTOR.fields_by_name["peers"].number == 6
    assert tw.BindPodRequest.DESCRIPTOR.fields_by_name["epoch"].number == 4
    assert tw.BIND_DUPLICATE == 4 and cp.HEALTH_DOWN == 5
