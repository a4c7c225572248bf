"""The autoscale bench's unseen series: request rates and fleet totals made from a trace's own event times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controlplane.autoscaling import series as sr
from fedplane.lab.benches import autoscaleunseen as au

HEADER = "instance_sn,app_name,cpu_request,creation_time,deletion_time\n"


def test_arrivals_count_events_per_interval_including_quiet_ones() -> None:
    assert au.arrivals(np.array([0.0, 10.0, 299.0, 900.0, 901.0]), 300.0).tolist() == [3.0, 0.0, 0.0, 2.0]


def test_dlrm_series_are_creation_requests_live_vcpus_and_unseen_services(tmp_path: Path) -> None:
    trace = tmp_path / "dlrm.csv"
    rows = (
        "i0,app_2,4,,",                # present for the whole trace
        "i1,app_2,2,100,700",          # created in the first interval, gone in the third
        "i2,app_20,8,650,",            # created in the third interval, never deleted
        "i3,app_9,1,660,1000",
    )
    trace.write_text(HEADER + "".join(f"{r}\n" for r in rows))
    got = {name: (kind, stride, x.tolist()) for name, kind, stride, x in au.dlrm_series(trace)}
    assert got["dlrm-requests"] == ("request rate", 300.0, [1.0, 0.0, 2.0])
    assert got["dlrm-vcpus"][2] == [4.0, 6.0, 6.0]       # at 0 s, 300 s, 600 s: i1 runs 100..700, i2 from 650 on
    assert got["dlrm-app_2"][2][:3] == [1.0, 2.0, 2.0] and got["dlrm-app_20"][2][:3] == [0.0, 0.0, 0.0]


def test_a_series_without_demand_in_its_training_part_is_refused_by_name() -> None:
    x = np.zeros(400)
    x[-20:] = 5.0   # every event in the held-out quarter (openb's submissions per hour look like this)
    with pytest.raises(sr.SeriesError, match="'bursts'.*no demand"):
        sr.as_demand("bursts", 3600.0, x)
