"""The virtual-clock device against hand-computed times and energies."""

import math

import pytest

from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.method.budget import BudgetStep
from fleet.method.point import Point
from fleet.reports.report import fleet_totals
from fleet.rounds.device_round import run_device
from fleet.rounds.virtual_clock import VirtualClock

PROFILE = Profile(
    [
        Point(8, 307.2, 0.10, 4.0, 3.0),
        Point(8, 460.8, 0.08, 4.8, 4.0),
        Point(32, 307.2, 0.32, 4.4, 3.5),
        Point(32, 460.8, 0.16, 5.6, 5.0),
    ],
    "hand.csv",
)
SHIPPED = Efficiency({8: 1000.0, 32: 1200.0}, source="proxy.csv")
TRACE = Efficiency({8: 1100.0, 32: 1500.0}, source="trace.csv")


def spec(budget=None, schedule=()):
    return DeviceSpec("d1", "jetson-nano", budget, "hand.csv", "trace.csv", tuple(schedule))


def replay_device(spec, profile, shipped, trace, target):
    """The device round on the virtual clock, with the hand-made profile and trace."""
    run = RunSettings("t", "m", shipped.source, target)
    return run_device(spec, profile, shipped, run, VirtualClock(trace))


def test_single_budget_time_energy_hand_computed():
    # unlimited: b=8@460.8 -> 0.01 s/sample * 1000 = 10 s; b=32@460.8 -> 0.005 * 1200 = 6 s
    r = replay_device(spec(None), PROFILE, SHIPPED, TRACE, 0.9)
    assert (r.batch_size, r.freq_mhz, r.status) == (32, 460.8, "ok")
    assert r.predicted_time_s == pytest.approx(6.0)
    # truth: 1500 samples at 0.005 s/sample = 7.5 s at 5 W mean
    assert r.time_s == pytest.approx(7.5)
    assert r.energy_j == pytest.approx(37.5)
    assert r.samples == pytest.approx(1500)
    assert r.accuracy == 0.9
    # B1 = b=32 at the unlimited cap 460.8 -> same point; speed-up 1
    row = r.to_dict()
    assert row["speedup_vs_b1"] == pytest.approx(1.0)
    # B2 = b=8 (fewest proxy samples) at 460.8: truth 1100 * 0.01 = 11 s
    assert row["b2_time_s"] == pytest.approx(11.0)
    assert row["speedup_vs_b2"] == pytest.approx(11.0 / 7.5)


def test_budget_change_reselects_and_carries_fraction_done():
    # 0-3 s unlimited (b=32@460.8: 0.005 s/sample), then 4.5 W (b=8@307.2: 0.0125 s/sample vs
    # b=32@307.2: 0.01 s/sample * 1200 = 12 < 8@307.2 0.0125*1000 = 12.5 -> b=32@307.2)
    sched = [BudgetStep(0, None), BudgetStep(3, 4.5)]
    r = replay_device(spec(None, sched), PROFILE, SHIPPED, TRACE, 0.9)
    first, second = r.segments
    assert (first.batch_size, first.freq_mhz) == (32, 460.8)
    assert first.samples == pytest.approx(600)  # 3 s / 0.005
    assert (second.batch_size, second.freq_mhz) == (32, 307.2)
    # 40 % done; 900 samples left at 0.01 s/sample = 9 s
    assert r.time_s == pytest.approx(12.0)
    assert r.energy_j == pytest.approx(3 * 5.0 + 9 * 3.5)
    assert r.peak_power_w == 5.6
    assert all(s.peak_power_w <= (s.budget_w or math.inf) for s in r.segments)


def test_infeasible_segment_pauses_without_power():
    sched = [BudgetStep(0, 5.0), BudgetStep(2, 1.0), BudgetStep(10, 5.0)]
    r = replay_device(spec(5.0, sched), PROFILE, SHIPPED, TRACE, 0.9)
    # 5 W: b=8@460.8 (0.01*1000=10) vs b=32@307.2 (0.01*1200=12) -> b=8@460.8
    assert r.segments[0].batch_size == 8
    assert r.segments[1].batch_size is None and r.segments[1].energy_j == 0
    # 2 s done = 200 of 1100 samples; 900 left * 0.01 = 9 s after resuming at 10 s
    assert r.time_s == pytest.approx(19.0)
    assert r.energy_j == pytest.approx(11 * 4.0)


def test_infeasible_budget_reports_and_names_lowest_peak():
    r = replay_device(spec(3.0), PROFILE, SHIPPED, TRACE, 0.9)
    assert r.status == "infeasible" and r.time_s is None
    assert "lowest measured peak power is 4 W" in r.message


def test_not_reached_in_trace():
    trace = Efficiency({8: 1100.0, 32: math.nan}, source="trace.csv")
    r = replay_device(spec(None), PROFILE, SHIPPED, trace, 0.9)
    assert r.status == "not reached" and "batch_size=32" in r.message


def test_fleet_totals_aggregate_by_metric():
    rows = [
        {
            "device": "a",
            "status": "ok",
            "time_s": 10.0,
            "energy_j": 40.0,
            "accuracy": 0.9,
            "samples": 100.0,
            "budget_w": 5.0,
            "peak_power_w": 4.9,
            "speedup_vs_b1": 2.0,
        },
        {
            "device": "b",
            "status": "ok",
            "time_s": 30.0,
            "energy_j": 60.0,
            "accuracy": 0.8,
            "samples": 300.0,
            "budget_w": None,
            "peak_power_w": 7.0,
            "speedup_vs_b1": 1.0,
        },
        {"device": "c", "status": "infeasible", "budget_w": 1.0},
        {
            "device": "d",
            "status": "ok",
            "time_s": 20.0,
            "energy_j": 50.0,
            "accuracy": 0.85,
            "samples": 100.0,
            "budget_w": 4.0,
            "peak_power_w": 4.5,
        },
    ]
    t = fleet_totals(rows)
    assert t["energy_j"] == 150.0
    assert t["round_time_s"] == 30.0 and t["median_time_s"] == 20.0
    assert t["accuracy_weighted"] == pytest.approx((0.9 * 100 + 0.8 * 300 + 0.85 * 100) / 500)
    assert t["status_counts"] == {"ok": 3, "infeasible": 1}
    assert t["budget_violations"] == ["d"]
    assert t["median_speedup_vs_b1"] == 1.5
