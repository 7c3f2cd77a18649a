"""A round run in segments on the virtual clock equals the same round run in one go.

Brute force: every device of the shipped fleets (the default fleet, with its budget schedule and
its starved device; the solar fleet, whose deadline objective re-plans over a trace-driven
schedule), the default fleet under the deadline objective, and hand-made schedules with pauses,
each run in segments of several lengths (some cutting across schedule steps) with every
segment starting from the previous one's progress as it travels on the wire (JSON), must give
the one-shot row, and the segments' deltas must add up to it.
"""

import dataclasses
import json
import math
from pathlib import Path

import pytest

from fleet.config.fleetfile import DeviceSpec, RunSettings, load_fleet
from fleet.core.efficiency import Efficiency
from fleet.method.budget import BudgetStep, step_index
from fleet.rounds.device_round import run_device
from fleet.rounds.progress import Progress
from fleet.rounds.virtual_clock import (
    VirtualClock,
    cached_efficiency,
    simulate_device,
    simulate_segment,
)
from tests.test_virtual_clock import PROFILE, SHIPPED, TRACE

REL = 1e-9
FLEETS = Path(__file__).resolve().parents[1] / "simulations" / "fleets"
SAME = ("status", "batch_size", "freq_mhz", "accuracy", "device", "budget_w")


def wire(p: Progress) -> Progress:
    """The progress as the coordinator sends it back: JSON text, read with its bounds."""
    return Progress.from_dict(json.loads(json.dumps(p.to_dict())))


def chain(segment, length_s: float, limit: int = 20000):
    """Run ``segment(start, length_s) -> (row, progress)`` until the row is final."""
    start, rows, steps = None, [], []
    for _ in range(limit):
        res, prog = segment(start, length_s)
        rows.append(res.to_dict())
        steps.append(prog)
        if res.status != "running":
            return rows, steps
        assert res.accuracy is None and prog.accuracy is None
        start = wire(prog)
    raise AssertionError(f"no final row after {limit} segments of {length_s} s")


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-9)


def assert_same_round(one, rows, steps, length_s):
    final = rows[-1]
    for key in SAME:
        assert final[key] == one[key], (key, final[key], one[key])
    for key in ("time_s", "energy_j", "samples"):
        assert close(final[key], one[key]), (key, final[key], one[key])
    assert all(r["status"] == "running" for r in rows[:-1])
    # cumulative counters: the deltas of the segments add up to the final value
    before = Progress()
    sums = {"time_s": 0.0, "energy_j": 0.0, "samples": 0.0}
    for p in steps:
        for key in sums:
            delta = getattr(p, key) - getattr(before, key)
            assert delta >= -1e-9 * max(1.0, getattr(p, key))
            sums[key] += delta
        before = p
    if one["time_s"] is not None:  # a device paused for good has no finite time
        for key, total in sums.items():
            assert close(total, one[key]), (key, total, one[key])
    assert steps[-1].segments == len(steps)
    # a running segment stops exactly where it was asked to
    for k, p in enumerate(steps[:-1]):
        assert p.time_s == pytest.approx((k + 1) * length_s, rel=1e-12)
    if one["status"] in ("ok", "late"):
        assert steps[-1].done == 1.0 and steps[-1].eta_s == 0.0
        assert steps[-1].accuracy == one["accuracy"]


def fleet_cases(path, objective=None, deadline_s=None):
    fleet = load_fleet(path)
    run = fleet.run
    if objective is not None:
        run = dataclasses.replace(run, objective=objective, deadline_s=deadline_s)
    return [(d, cached_efficiency(run.efficiency), run) for d in fleet.devices]


CASES = (
    fleet_cases(FLEETS / "default.toml")
    + fleet_cases(FLEETS / "solar.toml")
    + fleet_cases(FLEETS / "default.toml", "deadline", 6000.0)
    + fleet_cases(FLEETS / "default.toml", "deadline", 1500.0)
)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[2].objective}")
def test_fleet_devices_in_segments_equal_one_shot(case):
    spec, shipped, run = case
    one = simulate_device(spec, shipped, run).to_dict()
    total = one["time_s"] or 5000.0
    lengths = {997.3, 3000.0, total / 7.0, total / 2.5, total * 1.5}
    for length in sorted(lengths):
        rows, steps = chain(lambda s, L: simulate_segment(spec, shipped, run, s, L), length)
        assert_same_round(one, rows, steps, length)
        if one["time_s"] is not None and length < one["time_s"]:
            assert len(rows) >= 2


@pytest.mark.slow
def test_the_fleets_hold_what_the_brute_force_needs():
    """The cases above mean something: schedules cut across, deadlines late and on time."""
    statuses = {simulate_device(*c).status for c in CASES}
    assert {"ok", "late", "infeasible"} <= statuses
    dusk = next(c for c in CASES if c[0].name == "nano-dusk")
    assert len(dusk[0].schedule) == 2
    assert simulate_device(*dusk).time_s > 3000.0  # the 3000 s step is crossed mid-segment
    solar = [c for c in CASES if c[2].objective == "deadline" and len(c[0].schedule) > 5]
    assert solar


# ----------------------------------------------------------------- hand-made schedules


def hand_chain(spec, target, length_s, batch_size=None):
    run = RunSettings("t", "m", SHIPPED.source, target)

    def segment(start, length):
        begin = start or Progress()
        clock = VirtualClock(TRACE, batch_size, start=begin, stop_s=begin.time_s + length)
        return run_device(spec, PROFILE, SHIPPED, run, clock), clock.progress

    one = run_device(spec, PROFILE, SHIPPED, run, VirtualClock(TRACE, batch_size))
    return one.to_dict(), chain(segment, length_s)


SCHEDULES = {
    # unlimited then 4.5 W (re-selects b=32@307.2 at 3 s)
    "drop": (None, [BudgetStep(0, None), BudgetStep(3, 4.5)]),
    # 5 W, a pause (nothing fits 1 W) from 2 to 10 s, 5 W again
    "pause": (5.0, [BudgetStep(0, 5.0), BudgetStep(2, 1.0), BudgetStep(10, 5.0)]),
    # the schedule ends in a pause: infeasible, with no finite time
    "starved": (5.0, [BudgetStep(0, 5.0), BudgetStep(4, 1.0)]),
    "single": (None, []),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("length", [0.37, 1.0, 2.0, 2.5, 3.0, 4.1, 50.0])
@pytest.mark.parametrize("batch_size", [None, 8])
def test_hand_schedules_in_segments(name, length, batch_size):
    budget, sched = SCHEDULES[name]
    spec = DeviceSpec("d1", "jetson-nano", budget, "hand.csv", "trace.csv", tuple(sched))
    one, (rows, steps) = hand_chain(spec, 0.9, length, batch_size)
    assert_same_round(one, rows, steps, length)
    if name == "starved":
        assert one["status"] == "infeasible" and one["time_s"] is None
        assert steps[-1].time_s == pytest.approx(4.0) and steps[-1].end_batch_size is None


def test_progress_at_a_stop_names_the_point_budget_power_and_eta():
    # unlimited: b=32@460.8, 0.005 s/sample, 5 W mean, 1500 true samples = 7.5 s in all
    spec = DeviceSpec("d1", "jetson-nano", None, "hand.csv", "trace.csv")
    run = RunSettings("t", "m", SHIPPED.source, 0.9)
    clock = VirtualClock(TRACE, start=Progress(), stop_s=3.0)
    res = run_device(spec, PROFILE, SHIPPED, run, clock)
    p = clock.progress
    assert res.status == "running" and res.time_s == 3.0 and res.accuracy is None
    assert (p.end_batch_size, p.end_freq_mhz, p.budget_w, p.power_w) == (32, 460.8, None, 5.0)
    assert p.samples == pytest.approx(600) and p.energy_j == pytest.approx(15.0)
    assert p.done == pytest.approx(0.4) and p.eta_s == pytest.approx(4.5)
    assert p.segments == 1
    # resumed from there, it finishes at the one-shot time with the target's accuracy
    clock2 = VirtualClock(TRACE, start=wire(p), stop_s=6.0 + 3.0)
    res2 = run_device(spec, PROFILE, SHIPPED, run, clock2)
    assert res2.status == "ok" and res2.time_s == pytest.approx(7.5)
    assert res2.energy_j == pytest.approx(37.5) and res2.accuracy == 0.9
    assert clock2.progress.done == 1.0 and clock2.progress.segments == 2


def test_resuming_mid_step_keeps_the_running_point_not_a_new_choice():
    """A segment boundary is not a budget change: the device goes on at the point its
    progress names even where a fresh selection would pick another (here a slower one)."""
    spec = DeviceSpec("d1", "jetson-nano", 5.0, "hand.csv", "trace.csv")
    run = RunSettings("t", "m", SHIPPED.source, 0.9)
    # 5 W admits b=8@460.8 (fresh choice) and b=32@307.2; resume at the latter
    start = Progress(time_s=1.0, samples=100.0, energy_j=3.5, end_batch_size=32, end_freq_mhz=307.2)
    start.done = 100.0 / 1500.0
    clock = VirtualClock(TRACE, start=start, stop_s=2.0)
    res = run_device(spec, PROFILE, SHIPPED, run, clock)
    assert (res.segments[0].batch_size, res.segments[0].freq_mhz) == (32, 307.2)
    assert res.samples == pytest.approx(100.0 + 1.0 / 0.01)
    # a point over the step's budget (or unknown) is not trusted: the step's own choice runs
    bad = start.replace(end_batch_size=32, end_freq_mhz=460.8)  # 5.6 W peak > 5 W
    clock = VirtualClock(TRACE, start=bad, stop_s=2.0)
    res = run_device(spec, PROFILE, SHIPPED, run, clock)
    assert (res.segments[0].batch_size, res.segments[0].freq_mhz) == (8, 460.8)


def test_step_index_and_one_shot_fields_unchanged():
    sched = (BudgetStep(0, 5.0), BudgetStep(2, 1.0), BudgetStep(10, 5.0))
    assert [step_index(sched, t) for t in (0.0, 1.9, 2.0, 9.99, 10.0, 1e9)] == [0, 0, 1, 1, 2, 2]
    clock = VirtualClock(Efficiency({8: 1.0}))
    assert clock.start is None and clock.stop_s is None and clock.progress is None


def test_bad_segment_length_is_an_input_error():
    from fleet.common.errors import InputError

    spec, shipped, run = CASES[0]
    for bad in (0.0, -1.0, math.inf, math.nan, True, "10"):
        with pytest.raises(InputError, match="segment_s"):
            simulate_segment(spec, shipped, run, None, bad)
