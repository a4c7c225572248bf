"""An agent's workload context: taken from its control plane's acks, kept while it is away, refused when malformed
(one clear log line, counted, the previous value kept), exported on /metrics and reported back."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgeagent import reporting
from edgeagent.config import PlacementSection
from edgeagent.ledger import Ledger
from edgeagent.metrics import AgentMetrics
from edgeagent.placing import Placer
from edgeagent.scoring import HeuristicScorer
from edgeagent.contextkeeping import ContextKeeper
from fedapi import agentlink
from fedapi.workloadcontext import NONE, Profile, WorkloadContext
from fedcore.nodes import Node


def test_the_first_context_and_each_new_value_are_taken_and_silence_keeps_the_last() -> None:
    keeper = ContextKeeper()
    assert not keeper.receive(None), "an older control plane sends none: the artifact's own value stays"
    assert not keeper.receive({"cpu_pressure": 0.0, "version": 0}), "one that computed none yet"
    assert keeper.current is NONE
    assert keeper.receive({"cpu_pressure": 0.0, "version": 5}), "a first context is applied even at 0: it overrides the artifact's"
    assert not keeper.receive({"cpu_pressure": 0.0, "version": 5})
    assert not keeper.receive({"cpu_pressure": 0.0, "version": 9}), "a new version of the same value: nothing to redo"
    assert keeper.current == WorkloadContext(0.0, 9)
    assert keeper.receive({"cpu_pressure": 1.0, "version": 12})
    assert not keeper.receive(None) and keeper.current == WorkloadContext(1.0, 12), "the control plane is away: keep placing as we were"


PROFILE = {"cpu": [16000], "milli": [1000], "count": [2], "weight": [1.0], "slots": [], "pinned": 0.0}


def test_a_new_profile_alone_is_taken_and_a_hostile_one_refused_keeping_the_previous(caplog: pytest.LogCaptureFixture) -> None:
    keeper = ContextKeeper()
    assert keeper.receive({"cpu_pressure": 1.0, "version": 5, "profile": PROFILE})
    taken = keeper.current
    assert taken.profile == Profile(((16000, 1000, 2, 1.0),))
    assert not keeper.receive({"cpu_pressure": 1.0, "version": 6, "profile": PROFILE}), "same profile, new version"
    other = {**PROFILE, "cpu": [8000]}
    assert keeper.receive({"cpu_pressure": 1.0, "version": 7, "profile": other}), "the pressure stays, the profile moves"
    assert not keeper.receive({"cpu_pressure": 1.0, "version": 7, "profile": other})
    with caplog.at_level(logging.WARNING, logger="edgeagent.contextkeeping"):
        assert not keeper.receive({"cpu_pressure": 0.5, "version": 8, "profile": {**other, "weight": [math.nan]}})
    assert keeper.current.profile is not None and keeper.current.profile.shapes == ((8000, 1000, 2, 1.0),) and keeper.refused == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "shape weight" in line and "keeping cpu_pressure 1, 1 pod shapes (8000m/2x1000m 1.00) and scorer learned (version 7)" in line
    assert keeper.receive({"cpu_pressure": 1.0, "version": 9}), "no profile any more: back to the artifact's shapes"
    assert keeper.current.profile is None


def test_a_new_scorer_family_alone_is_taken_and_an_unknown_one_refused_keeping_the_previous(caplog: pytest.LogCaptureFixture) -> None:
    keeper = ContextKeeper()
    assert keeper.receive({"cpu_pressure": 1.0, "version": 5, "profile": PROFILE})
    assert keeper.receive({"cpu_pressure": 1.0, "version": 6, "profile": PROFILE, "scorer": "fgd"}), "only the family moves"
    assert keeper.receive({"cpu_pressure": 1.0, "version": 7, "profile": PROFILE, "scorer": "fgd", "max_cpu_milli": 32000,
                           "max_gpus": 4}), "the fleet's largest node moves BestFit's scores"
    with caplog.at_level(logging.WARNING, logger="edgeagent.contextkeeping"):
        assert not keeper.receive({"cpu_pressure": 1.0, "version": 8, "profile": PROFILE, "scorer": "dotprod"})
    assert keeper.current.scorer == "fgd" and keeper.current.version == 7 and keeper.refused == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "scorer must be one of learned, fgd, bestfit" in line and "and scorer fgd (version 7)" in line
    assert keeper.receive({"cpu_pressure": 1.0, "version": 9, "profile": PROFILE}), "absent: back to learned"
    assert keeper.current.scorer == "learned"


@pytest.mark.parametrize("garbage", [
    {"cpu_pressure": math.nan, "version": 20}, {"cpu_pressure": -1.0, "version": 20}, {"cpu_pressure": 1e12, "version": 20},
    {"cpu_pressure": "high", "version": 20}, {"cpu_pressure": 1.0, "version": "new"}, [1.0], "1.0",
])
def test_a_malformed_context_is_refused_clearly_and_the_previous_value_kept(garbage: object,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    keeper = ContextKeeper()
    keeper.receive({"cpu_pressure": 0.5, "version": 10})
    with caplog.at_level(logging.WARNING, logger="edgeagent.contextkeeping"):
        for _ in range(3):
            assert not keeper.receive(garbage)
    assert keeper.current == WorkloadContext(0.5, 10) and keeper.refused == 3
    (line,) = [r.getMessage() for r in caplog.records]  # one line per distinct reason, not one per ack
    assert "refused the workload context" in line and "keeping cpu_pressure 0.5" in line and "Traceback" not in caplog.text


def test_metrics_and_the_report_carry_the_context_only_once_there_is_one() -> None:
    node = Node("n0", 32000, 131072, gpus=4)
    placer = Placer(node, Ledger("n0", "n0", node.capacity), HeuristicScorer(), PlacementSection(), 0.0)
    keeper = ContextKeeper()
    metrics = AgentMetrics(placer, lambda: 0, lambda: True, lambda: 0, keeper)

    def samples() -> dict[str, float]:
        return {s.name: s.value for f in text_string_to_metric_families(metrics.render().decode()) for s in f.samples}

    message = reporting.report(placer, "c0", "a1", 1, {}, {}, {}, None, keeper.current)
    assert "context" not in message, "a control plane that predates the field refuses a report carrying it"
    assert samples()["fedplane_agent_workload_cpu_pressure"] == 0.0 and samples()["fedplane_agent_workload_context_version"] == 0
    keeper.receive({"cpu_pressure": 0.97, "version": 1234})
    keeper.receive({"cpu_pressure": math.inf, "version": 1235})
    got = samples()
    assert got["fedplane_agent_workload_cpu_pressure"] == 0.97 and got["fedplane_agent_workload_context_version"] == 1234
    assert got["fedplane_agent_workload_context_refused_total"] == 1
    message = reporting.report(placer, "c0", "a1", 2, {}, {}, {}, None, keeper.current)
    assert message["context"] == {"cpu_pressure": 0.97, "version": 1234}
    assert got["fedplane_agent_workload_profile_shapes"] == 0, "the artifact's shapes"
    keeper.receive({"cpu_pressure": 0.97, "version": 1240, "profile": PROFILE})
    assert samples()["fedplane_agent_workload_profile_shapes"] == 1
    message = reporting.report(placer, "c0", "a1", 3, {}, {}, {}, None, keeper.current)
    assert message["context"] == {"cpu_pressure": 0.97, "version": 1240}, "its version names the profile: not sent back"


@pytest.mark.parametrize(("saved", "resumed", "warning"), [
    (agentlink.encode({"cpu_pressure": 0.98, "version": 3}), WorkloadContext(0.98, 3), ""),
    (agentlink.encode(WorkloadContext(0.98, 4, Profile(((16000, 1000, 2, 1.0),))).to_wire()),
     WorkloadContext(0.98, 4, Profile(((16000, 1000, 2, 1.0),))), ""),
    (agentlink.encode(WorkloadContext(0.98, 5, Profile(((16000, 1000, 2, 1.0),)), "fgd", 32000, 4).to_wire()),
     WorkloadContext(0.98, 5, Profile(((16000, 1000, 2, 1.0),)), "fgd", 32000, 4), ""),
    (agentlink.encode({"cpu_pressure": 0.98, "version": 4, "profile": {**PROFILE, "count": [2, 2]}}), NONE, "one length"),
    (agentlink.encode({"cpu_pressure": 0.98, "version": 4, "scorer": "random"}), NONE, "scorer must be one of"),
    (b"\xc1garbage", NONE, "is unreadable"),
    (agentlink.encode({"cpu_pressure": math.nan, "version": 3}), NONE, "refused the workload context"),
])
def test_a_restarted_agent_resumes_with_its_saved_context_and_refuses_a_damaged_one(
        saved: bytes, resumed: WorkloadContext, warning: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from edgeagent import config, savedstate
    from edgeagent.daemon import Agent

    settings = config.parse({"node": "a0", "cluster": "c0", "data_dir": str(tmp_path), "log_level": "warning",
                             "backend": {"kind": "twin", "address": "127.0.0.1:9"}})
    (tmp_path / savedstate.CONTEXT_FILE).write_bytes(saved)
    agent = Agent(settings, cluster=object(), handle_signals=False)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        savedstate.restore_context(agent.data, agent.context)  # the start-up step, without the rest of run()
    assert agent.context.current == resumed and "Traceback" not in caplog.text
    assert [warning in r.getMessage() for r in caplog.records] == ([True] if warning else [])
