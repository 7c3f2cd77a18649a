"""Under a budget schedule the report shows every segment and the baselines face the schedule.

Hand-computed: profile b in {8, 32} at 400/800 MHz, truth = shipped = {8: 800, 32: 1600}
samples, schedule 10 W then 5 W from 2 s. B1 (largest batch, 32) runs 800 MHz for 2 s (0.4 of
its 5 s), then at 5 W its cap is 400 MHz: 0.6 x 1600 x 0.2/32 = 6 s more, 8 s in all. B2
(fewest samples, 8) runs 2 s at 800 MHz (half of 4 s), then 0.5 x 800 x 0.08/8 = 4 s: 6 s.
"""

from __future__ import annotations

import pytest

from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.method.budget import parse_schedule
from fleet.reports.markdown import segments_section
from fleet.reports.report import segment_table
from fleet.rounds.virtual_clock import simulate_device

PROFILE = (
    "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n"
    "8,400,0.08,3.0,2.5\n8,800,0.04,6.0,5.0\n"
    "32,400,0.2,4.0,3.5\n32,800,0.1,8.0,7.0\n"
)


def scheduled_row(tmp_path, schedule="0:10,2:5"):
    prof = tmp_path / "p.csv"
    prof.write_text(PROFILE)
    trace = tmp_path / "trace.csv"
    trace.write_text("batch_size,samples_to_accuracy\n8,800\n32,1600\n")
    steps = parse_schedule(schedule)
    spec = DeviceSpec("d", "jetson-nano", steps[0].budget_w, str(prof), str(trace), steps)
    shipped = Efficiency({8: 800.0, 32: 1600.0}, source="proxy.csv")
    return simulate_device(spec, shipped, RunSettings("t", "small_cnn", "proxy.csv", 0.9)).to_dict()


def test_baselines_are_costed_on_the_same_schedule(tmp_path):
    row = scheduled_row(tmp_path)
    assert row["status"] == "ok"
    assert row["b1_time_s"] == pytest.approx(8.0)
    assert row["b2_time_s"] == pytest.approx(6.0)
    # ours: b=8 at 800 MHz (4 s at 10 W), 2 s of it, then b=8 at 400 MHz: 4 s more
    assert row["time_s"] == pytest.approx(6.0)
    assert row["speedup_vs_b1"] == pytest.approx(8.0 / 6.0)


def test_a_baseline_that_cannot_run_a_step_pauses_through_it(tmp_path):
    # 2 W from 2 s to 3 s: nothing fits (the lowest peak is 3 W), everyone waits 1 s
    row = scheduled_row(tmp_path, "0:10,2:2,3:5")
    assert row["b1_time_s"] == pytest.approx(9.0)
    assert row["b2_time_s"] == pytest.approx(7.0)
    assert row["time_s"] == pytest.approx(7.0)


def test_every_segment_is_a_line_of_the_report(tmp_path):
    row = scheduled_row(tmp_path)
    single = scheduled_row(tmp_path, "0:10")
    single["device"] = "steady"
    headers, cells = segment_table([row, single])
    assert headers[:6] == ["device", "from s", "to s", "budget", "b", "f (MHz)"]
    assert [c[:6] for c in cells] == [
        ["d", "0.0", "2.0", "10 W", "8", "800"],
        ["d", "2.0", "6.0", "5 W", "8", "400"],
    ]  # the steady device's one segment is its row already
    md = "\n".join(segments_section([row, single]))
    assert "| d | 2.0 | 6.0 | 5 W | 8 | 400 |" in md
