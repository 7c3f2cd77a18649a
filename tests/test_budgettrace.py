"""Power trace -> budget schedule: never above what is available, no rise sooner than the dwell."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.budgets.trace import NO_POWER_W, load_trace, trace_to_schedule
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.method.budget import BudgetStep, format_budget
from tests.conftest import ROOT


def budget_at(steps, t):
    return [s.budget_w for s in steps if s.at_s <= t][-1]


def available_at(readings, t):
    """The conservative availability: the lower end of the interval holding t."""
    t0 = readings[0][0]
    times = [r[0] - t0 for r in readings]
    i = max(k for k, x in enumerate(times) if x <= t)
    nxt = readings[i + 1][1] if i + 1 < len(readings) else readings[i][1]
    return min(readings[i][1], nxt)


def test_hand_computed_dip_and_rise():
    # 0-100 s: 5 W, 100-130: 2 W (a cloud), then 6 W. Dwell 60.
    readings = [(0, 5.0), (100, 5.0), (101, 2.0), (130, 2.0), (131, 6.0), (400, 6.0)]
    steps = trace_to_schedule(readings, 60.0)
    # intervals take the lower end: [100,101) is 2 W -> drop at 100 (not 101)
    # [130,131) lower end 2 W; 6 W from 131; rise once [t-60, t] is all >= 6 W: t = 191
    assert steps == (BudgetStep(0.0, 5.0), BudgetStep(100.0, 2.0), BudgetStep(191.0, 6.0))


def test_rise_waits_for_the_level_held_the_whole_window():
    # steadily rising every 30 s with dwell 60: each rise reaches the level of 60 s ago
    readings = [(30 * k, float(k + 1)) for k in range(6)]  # 1,2,...,6 W at 0,30,...,150
    steps = trace_to_schedule(readings, 60.0)
    assert steps[0] == BudgetStep(0.0, 1.0)
    for a, b in zip(steps, steps[1:], strict=False):
        assert b.at_s - a.at_s >= 60.0
        assert b.budget_w > a.budget_w
    assert all(s.budget_w <= available_at(readings, s.at_s) for s in steps)


def test_zero_power_pauses_and_start_offset():
    readings = [(0, 0.0), (60, 0.0), (120, 3.0), (600, 3.0)]
    steps = trace_to_schedule(readings, 30.0)
    assert steps[0] == BudgetStep(0.0, NO_POWER_W)
    assert budget_at(steps, 10_000) == 3.0
    late = trace_to_schedule(readings, 30.0, start_s=300)
    assert late == (BudgetStep(0.0, 3.0),)
    with pytest.raises(InputError, match="outside the trace"):
        trace_to_schedule(readings, 30.0, start_s=900)


@st.composite
def traces(draw):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.floats(1.0, 300.0), min_size=n - 1, max_size=n - 1))
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g)
    watts = draw(st.lists(st.floats(0.0, 15.0), min_size=n, max_size=n))
    return list(zip(times, watts, strict=True))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(traces(), st.floats(0.0, 600.0))
def test_schedule_properties(readings, dwell):
    steps = trace_to_schedule(readings, dwell)
    assert steps[0].at_s == 0.0
    assert all(b.at_s > a.at_s for a, b in zip(steps, steps[1:], strict=False))
    # never above what is available: check at every step and every reading (piecewise const)
    probe = sorted({s.at_s for s in steps} | {t - readings[0][0] for t, _ in readings})
    for t in probe:
        assert budget_at(steps, t) <= max(available_at(readings, t), NO_POWER_W) + 1e-12
    # when the available power falls below the budget, the budget falls at that instant
    for t in probe:
        a = max(available_at(readings, t), NO_POWER_W)
        if a < budget_at(steps, t - 1e-9 if t > 0 else 0) - 1e-12:
            assert any(s.at_s == t for s in steps)
    # a rise comes at least a dwell after the step before, and only to a level available
    # over the whole window before it
    for a, b in zip(steps, steps[1:], strict=False):
        if b.budget_w > a.budget_w:
            assert b.at_s - a.at_s >= dwell - 1e-9
            window = [t for t in probe if b.at_s - dwell <= t <= b.at_s]
            lo = b.at_s - dwell
            window.append(max(lo, 0.0))
            assert all(b.budget_w <= available_at(readings, t) + 1e-12 for t in window)
            assert b.budget_w > NO_POWER_W or dwell == 0


def test_load_trace_errors_name_file_and_line(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("# synthetic\ntime_s,available_w\n0,5\n60,-1\n")
    with pytest.raises(InputError, match=r"t.csv: line 4: available_w='-1'"):
        load_trace(f)
    f.write_text("time_s,watts\n0,5\n")
    with pytest.raises(InputError, match="missing column"):
        load_trace(f)
    f.write_text("time_s,available_w\n0,5\n0,6\n")
    with pytest.raises(InputError, match="not after"):
        load_trace(f)


def _fleet(tmp_path, extra):
    f = tmp_path / "solar.toml"
    f.write_text(
        f"""
[run]
model = "resnet18"
efficiency = "{ROOT}/simulations/efficiency/resnet18_cifar10-proxy.csv"
target_accuracy = 0.92
[[devices]]
name = "n"
type = "jetson-nano"
budget_trace = "{ROOT}/simulations/traces/clear_day_10w.csv"
profile = "{ROOT}/simulations/profiles/nano_resnet18.csv"
data = "{ROOT}/simulations/efficiency/resnet18_svhn.csv"
{extra}
"""
    )
    return f


def test_fleet_toml_budget_trace(tmp_path):
    spec = load_fleet(_fleet(tmp_path, "budget_dwell_s = 300")).devices[0]
    readings = load_trace(ROOT / "simulations" / "traces" / "clear_day_10w.csv")
    assert spec.schedule == trace_to_schedule(readings, 300.0)
    assert spec.budget_w == spec.schedule[0].budget_w
    with pytest.raises(
        InputError, match=r"budget_dwell_s' must be a finite number >= 0 \(seconds\), got 'long'"
    ):
        load_fleet(_fleet(tmp_path, 'budget_dwell_s = "long"'))
    # the trace is read through the one budget reader: a budget_w beside it must agree, and a
    # schedule beside it is refused
    first = format_budget(spec.schedule[0].budget_w)
    same = load_fleet(_fleet(tmp_path, f"budget_w = {first}\nbudget_dwell_s = 300")).devices[0]
    assert same == spec
    with pytest.raises(InputError, match="budget_w 99 disagrees with budget_trace's first step"):
        load_fleet(_fleet(tmp_path, "budget_w = 99"))
    with pytest.raises(InputError, match="budget_schedule or budget_trace, not both"):
        load_fleet(_fleet(tmp_path, "budget_schedule = [[0, 5]]"))


def test_shipped_solar_scenario_follows_the_sun():
    fleet = load_fleet(ROOT / "simulations" / "fleets" / "solar.toml")
    solar = [d for d in fleet.devices if d.name.endswith("solar")]
    readings = load_trace(ROOT / "simulations" / "traces" / "clear_day_10w.csv")
    for d in solar:
        for s in d.schedule:
            assert s.budget_w <= max(available_at(readings, s.at_s + 10800), NO_POWER_W)
        assert len(d.schedule) > 5
        assert not math.isinf(d.schedule[-1].at_s)


@pytest.mark.slow
def test_solar_round_stays_under_the_sun(tmp_path):
    from simulations.runner import run_direct

    fleet = load_fleet(ROOT / "simulations" / "fleets" / "solar.toml")
    rep = run_direct(fleet, tmp_path / "run")
    assert rep["fleet"]["budget_violations"] == []
    readings = load_trace(ROOT / "simulations" / "traces" / "clear_day_10w.csv")
    for row in rep["devices"]:
        assert row["status"] in ("ok", "late")
        if not row["device"].endswith("solar"):
            continue
        assert len(row["segments"]) > 1  # the budget rose with the sun and it re-selected
        for seg in row["segments"]:
            if seg["peak_power_w"] is not None:
                avail = available_at(readings, seg["start_s"] + 10800)
                assert seg["peak_power_w"] <= seg["budget_w"] <= avail + 1e-12
