"""Drift detection during training and the profile refresh that follows (issue 11)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleet.agent.measure.drift import (
    DriftDetector,
    choice_changes,
    pick_reprobes,
    read_profile,
    refresh_rows,
    write_refreshed,
)
from fleet.core.efficiency import Efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.trust.verify import profile_from_rows


def grid() -> list[dict]:
    """2 batch sizes x 3 knobs; t = 0.01 b + 30/f, peak = 2 + 0.002 b f, mean = 0.8 peak."""
    rows = []
    for b in (8, 16):
        for f in (100, 200, 300):
            peak = 2.0 + 0.002 * b * f
            rows.append(
                {
                    "batch_size": b,
                    "freq_mhz": f,
                    "time_per_batch_s": 0.01 * b + 30.0 / f,
                    "peak_power_w": peak,
                    "mean_power_w": 0.8 * peak,
                    "status": "ok",
                    "source": "measured",
                }
            )
    return rows


def feed(det: DriftDetector, t0: float, n: int, b: int, f: float, time_s: float, peak: float):
    events = []
    for i in range(n):
        ev = det.observe(t0 + i, b, f, time_s, peak)
        if ev is not None:
            events.append(ev)
    return events


def test_single_noisy_step_is_ignored():
    rows = grid()
    det = DriftDetector(rows, window_steps=5)
    t, p = 0.01 * 16 + 0.1, 2.0 + 0.002 * 16 * 300
    events = []
    for i in range(40):
        slow = i == 20  # one step three times slower, another with a power spike
        spike = i == 30
        ev = det.observe(i, 16, 300, t * (3.0 if slow else 1.0), p * (1.5 if spike else 1.0))
        if ev:
            events.append(ev)
    assert events == []
    assert det.events == []


def test_persistent_time_deviation_fires_once_then_rearms_after_correction():
    rows = grid()
    det = DriftDetector(rows, window_steps=5, skip_steps=1)
    t, p = 0.01 * 16 + 0.1, 2.0 + 0.002 * 16 * 300
    assert feed(det, 0, 10, 16, 300, t, p) == []
    events = feed(det, 10, 30, 16, 300, 1.15 * t, p)
    assert len(events) == 1
    ev = events[0]
    # window of 5 steps: it fires on the 3rd slow step (median of 2 normal + 3 slow is slow)
    assert ev["t_s"] == 12
    assert ev["kind"] == "time"
    assert (ev["batch_size"], ev["freq_mhz"]) == (16, 300)
    assert ev["expected_time_s"] == pytest.approx(t)
    assert ev["measured_time_s"] == pytest.approx(1.15 * t)
    assert ev["expected_peak_w"] == pytest.approx(p)
    assert ev["measured_peak_w"] == pytest.approx(p)
    # corrected: the new value is the expectation, nothing fires while it holds
    det.set_expected(16, 300, 1.15 * t, p)
    assert feed(det, 40, 20, 16, 300, 1.15 * t, p) == []
    # a new episode (another +15 % on top) fires again, exactly once
    events = feed(det, 60, 20, 16, 300, 1.15 * 1.15 * t, p)
    assert len(events) == 1
    assert events[0]["expected_time_s"] == pytest.approx(1.15 * t)
    assert len(det.events) == 2


def test_persistent_power_deviation_fires_with_values():
    rows = grid()
    det = DriftDetector(rows, window_steps=4, skip_steps=0)
    t, p = 0.01 * 8 + 30.0 / 200, 2.0 + 0.002 * 8 * 200
    events = feed(det, 0, 20, 8, 200, t, 1.10 * p)
    assert len(events) == 1
    ev = events[0]
    assert ev["kind"] == "power"
    assert ev["t_s"] == 3  # four steps in the window, all high
    assert ev["expected_peak_w"] == pytest.approx(p)
    assert ev["measured_peak_w"] == pytest.approx(1.10 * p)
    assert ev["measured_time_s"] == pytest.approx(t)
    # +7 % power is inside the 8 % tolerance: a fresh detector sees nothing
    quiet = DriftDetector(rows, window_steps=4, skip_steps=0)
    assert feed(quiet, 0, 20, 8, 200, 1.09 * t, 1.07 * p) == []


def test_episode_ends_and_rearms_without_correction_and_point_change_resets_window():
    rows = grid()
    det = DriftDetector(rows, window_steps=3, skip_steps=0)
    t, p = 0.01 * 8 + 0.3, 2.0 + 0.002 * 8 * 100
    assert len(feed(det, 0, 10, 8, 100, 1.2 * t, p)) == 1
    assert feed(det, 10, 10, 8, 100, t, p) == []  # back to normal: episode over
    assert len(feed(det, 20, 10, 8, 100, 1.2 * t, p)) == 1  # a new episode
    # two slow steps at one point, then a switch: the window restarts at the new point
    det2 = DriftDetector(rows, window_steps=3, skip_steps=0)
    t2 = 0.01 * 16 + 0.3
    assert feed(det2, 0, 2, 8, 100, 1.2 * t, p) == []
    assert feed(det2, 2, 2, 16, 100, t2, 2.0 + 0.002 * 16 * 100) == []


def test_time_window_needs_the_deviation_to_last_that_long():
    rows = grid()
    det = DriftDetector(rows, window_s=10.0, min_steps=3, skip_steps=0)
    t, p = 0.01 * 16 + 0.1, 2.0 + 0.002 * 16 * 300
    events = [det.observe(0.5 * i, 16, 300, 1.2 * t, p) for i in range(40)]
    fired = [e for e in events if e]
    assert len(fired) == 1
    assert fired[0]["t_s"] == pytest.approx(10.0)  # not before 10 s at the point


def test_refreshed_rows_never_have_mean_above_peak():
    """Window medians of peak and mean can cross by noise (a measured mean 2e-5 W over the
    measured peak): the refreshed row keeps mean <= peak, so the written profile loads."""
    rows = grid()
    old = {(r["batch_size"], r["freq_mhz"]): r for r in rows}
    peak = 1.2 * old[(16, 300)]["peak_power_w"]
    event = {
        "t_s": 5.0,
        "batch_size": 16,
        "freq_mhz": 300,
        "expected_time_s": old[(16, 300)]["time_per_batch_s"],
        "measured_time_s": old[(16, 300)]["time_per_batch_s"],
        "expected_peak_w": old[(16, 300)]["peak_power_w"],
        "measured_peak_w": peak,
        "measured_mean_w": peak + 2e-5,
        "kind": "power",
    }
    out = refresh_rows(rows, [event])
    for r in out:
        assert r["mean_power_w"] <= r["peak_power_w"], r
    fixed = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in out}[(16, 300.0)]
    assert fixed["mean_power_w"] == fixed["peak_power_w"] == pytest.approx(peak)


def test_refresh_carries_deviation_as_computed_by_hand():
    rows = grid()
    old = {(r["batch_size"], r["freq_mhz"]): r for r in rows}
    event = {
        "t_s": 5.0,
        "batch_size": 16,
        "freq_mhz": 300,
        "expected_time_s": old[(16, 300)]["time_per_batch_s"],
        "measured_time_s": 1.15 * old[(16, 300)]["time_per_batch_s"],
        "expected_peak_w": old[(16, 300)]["peak_power_w"],
        "measured_peak_w": 1.10 * old[(16, 300)]["peak_power_w"],
        "measured_mean_w": None,
        "kind": "both",
    }
    # the neighbour at the next lower clock was re-probed and did not move
    probe = dict(old[(16, 200)])
    out = refresh_rows(rows, [event], [probe])
    new = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in out}
    assert len(out) == 6
    # corrected point: measured values; mean power follows the peak's ratio
    c = new[(16, 300.0)]
    assert c["source"] == "measured"
    assert c["time_per_batch_s"] == pytest.approx(1.15 * old[(16, 300)]["time_per_batch_s"])
    assert c["peak_power_w"] == pytest.approx(1.10 * old[(16, 300)]["peak_power_w"])
    assert c["mean_power_w"] == pytest.approx(1.10 * old[(16, 300)]["mean_power_w"])
    assert new[(16, 200.0)]["source"] == "measured"
    assert new[(16, 200.0)]["time_per_batch_s"] == pytest.approx(old[(16, 200)]["time_per_batch_s"])
    # By hand: positions b 8->0, 16->1; f 100->0, 200->0.5, 300->1. Updates at (1, 1) with
    # log 1.15 (time) and at (1, 0.5) with log 1. Inverse squared distance weights.
    by_hand = {
        (8, 100.0): (1 / 2) / (1 / 2 + 1 / 1.25),
        (8, 200.0): (1 / 1.25) / (1 / 1.25 + 1 / 1),
        (8, 300.0): (1 / 1) / (1 / 1 + 1 / 1.25),
        (16, 100.0): (1 / 1) / (1 / 1 + 1 / 0.25),
    }
    for key, share in by_hand.items():
        r = new[key]
        assert r["source"] == "predicted"
        b, f = key
        assert r["time_per_batch_s"] == pytest.approx(
            old[(b, int(f))]["time_per_batch_s"] * 1.15**share, rel=1e-12
        )
        assert r["peak_power_w"] == pytest.approx(
            old[(b, int(f))]["peak_power_w"] * 1.10**share, rel=1e-12
        )


def test_refresh_flags_a_changed_choice_and_writes_the_profile(tmp_path):
    rows = grid()
    eff = Efficiency({8: 1000.0, 16: 1000.0})
    budget = 12.0  # 16@300 peaks at 11.6 W: fits before the drift, not at +10 %

    def choose(table):
        c = select(profile_from_rows(table), eff, budget)
        return c.batch_size, c.freq_mhz

    assert choose(rows) == (16, 300.0)
    t = 0.01 * 16 + 0.1
    p = 2.0 + 0.002 * 16 * 300
    det = DriftDetector(rows, window_steps=3, skip_steps=0)
    events = feed(det, 0, 10, 16, 300, t, 1.10 * p)
    assert [e["kind"] for e in events] == ["power"]
    reprobe = pick_reprobes(rows, events, k=4, budget_w=budget)
    # same batch lower clock, then smaller batch at the same clock; 16@300 has no higher clock,
    # and there is no larger batch size
    assert reprobe == [(16, 200.0), (8, 300.0)]
    probes = [dict(r) for r in rows if (r["batch_size"], float(r["freq_mhz"])) in reprobe]
    refreshed = refresh_rows(rows, events, probes)
    changed, before, after = choice_changes(rows, refreshed, choose)
    assert changed and before == (16, 300.0)
    assert after != (16, 300.0)
    det.set_rows(refreshed)  # the loop now compares against the refreshed table
    assert feed(det, 10, 10, 16, 300, t, 1.10 * p) == []

    path = tmp_path / "nano.csv"
    write_refreshed(str(path), refreshed, ["powerfleet profile", "source=measured"], events,
                    probes, when="2026-11-23T05:00:00Z")  # fmt: skip
    back, comments = read_profile(str(path))
    assert "source=refreshed" in comments and "source=measured" not in comments
    assert any(
        c.startswith("refreshed=2026-11-23T05:00:00Z reason=drift events=1") for c in comments
    )
    assert any(c.startswith("drift 16@300 ") and "kind=power" in c for c in comments)
    prof = load_profile(path)
    assert len(prof.points) == 6
    got = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in back}
    assert float(got[(16, 300.0)]["peak_power_w"]) == pytest.approx(1.10 * p, rel=1e-5)
    assert got[(16, 300.0)]["source"] == "measured"


def test_reprobes_skip_points_the_drift_may_push_over_budget():
    rows = grid()
    event = {
        "t_s": 1.0, "batch_size": 8, "freq_mhz": 200, "expected_time_s": 0.23,
        "measured_time_s": 0.23, "expected_peak_w": 5.2, "measured_peak_w": 5.2 * 1.2,
        "kind": "power",
    }  # fmt: skip
    # neighbours: 8@100 (3.6 W), 8@300 (6.8 W), 16@200 (8.4 W); x1.2 drift -> 4.32, 8.16, 10.08
    assert pick_reprobes(rows, [event], k=4) == [(8, 100.0), (8, 300.0), (16, 200.0)]
    assert pick_reprobes(rows, [event], k=4, budget_w=9.0) == [(8, 100.0), (8, 300.0)]
    assert pick_reprobes(rows, [event], k=1) == [(8, 100.0)]
    assert math.isclose(rows[0]["peak_power_w"], 3.6)


def test_training_run_on_a_warming_board_refreshes_the_lut():
    """A Nano ResNet18 LUT under 4.5 W; after 300 s the board draws 10 % more power everywhere
    (it warmed up). Steps are noisy (+-3 % time, +-2 % power, a 2x stall now and then). The
    detector fires once; the refresh (drifted point + re-probed neighbours under the budget, the
    rest carried) matches the warm board within 3 %, and re-selection on it picks the warm
    board's best."""
    import random

    from fleet.method.profile_io import read_rows as read_csv

    path = Path(__file__).resolve().parents[1] / "simulations/profiles/nano_resnet18.csv"
    rows = [row for _n, row in read_csv(str(path))[1]]
    cold = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in rows}

    def warm_row(key):
        r = dict(cold[key], source="measured")
        r["peak_power_w"] = 1.10 * float(r["peak_power_w"])
        r["mean_power_w"] = 1.10 * float(r["mean_power_w"])
        return r

    eff = Efficiency({b: 1000.0 * b**0.5 for b in sorted({k[0] for k in cold})})
    # 4.5 W: a case where the choice has neighbours a 10 % warmer board can re-probe within the
    # budget (under 5 W the reference's pick, b=8 at 691.2 MHz, has none: nothing to refresh).
    budget = 4.5

    def choose(table):
        c = select(profile_from_rows(table), eff, budget)
        return c.batch_size, c.freq_mhz

    b, f = choose(rows)
    t_cold, p_cold = float(cold[(b, f)]["time_per_batch_s"]), float(cold[(b, f)]["peak_power_w"])
    rng = random.Random(7)
    det = DriftDetector(rows)
    now, fired = 0.0, []
    while now < 900.0:
        warm = now >= 300.0
        step = t_cold * (1 + rng.uniform(-0.03, 0.03)) * (2.0 if rng.random() < 0.05 else 1.0)
        peak = p_cold * (1.10 if warm else 1.0) * (1 + rng.uniform(-0.02, 0.02))
        now += step
        ev = det.observe(now, b, f, step, peak)
        if ev:
            fired.append(ev)
    assert len(fired) == 1
    ev = fired[0]
    assert ev["kind"] == "power" and 300.0 < ev["t_s"] < 300.0 + 10 * t_cold
    assert ev["measured_peak_w"] == pytest.approx(1.10 * p_cold, rel=0.025)
    # the next segment boundary: re-probe up to 4 neighbours that stay under the budget
    keys = pick_reprobes(rows, fired, k=4, budget_w=budget)
    assert 1 <= len(keys) <= 4
    assert all(1.10 * float(cold[k]["peak_power_w"]) <= budget for k in keys)
    refreshed = refresh_rows(rows, fired, [warm_row(k) for k in keys])
    worst = max(
        abs(float(r["peak_power_w"]) / float(warm_row(k)["peak_power_w"]) - 1)
        for r in refreshed
        for k in [(int(r["batch_size"]), float(r["freq_mhz"]))]
    )
    assert worst < 0.03, worst
    changed, before, after = choice_changes(rows, refreshed, choose)
    truth = [warm_row(k) for k in cold]
    assert before == (b, f) and changed
    assert after == choose(truth)  # what a fresh profile of the warm board would pick


def test_choice_changes_accepts_the_choosers_return_shapes():
    from collections import namedtuple

    lut_point = namedtuple("LutPoint", "batch_size freq_mhz time_per_batch_s")
    rows, other = grid(), grid()[:3]
    picks = {id(rows): lut_point(16, 300.0, 0.26), id(other): None}
    assert choice_changes(rows, other, lambda t: picks[id(t)]) == (True, (16, 300.0), None)
    same = choice_changes(rows, other, lambda t: {"batch_size": "8", "freq_mhz": "200"})
    assert same == (False, (8, 200.0), (8, 200.0))
