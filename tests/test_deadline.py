"""The deadline objective against brute force, hand-computed schedules and the shipped fleet."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings, load_fleet
from fleet.core.deadline import DeadlineChooser, select_deadline, select_deadline_schedule
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import select
from fleet.method.budget import BudgetStep
from fleet.method.point import Point
from fleet.planning.deadline_plan import fastest_finish, plan_deadline
from fleet.planning.whatif import simulate_fleet
from fleet.rounds.device_round import run_device
from fleet.rounds.virtual_clock import VirtualClock
from tests.conftest import ROOT
from tests.test_virtual_clock import PROFILE, SHIPPED

BATCHES = (4, 8, 16, 32)
FREQS = (307.2, 460.8, 614.4, 921.6)


@st.composite
def profiles(draw):
    pts = []
    for b in BATCHES:
        for f in FREQS:
            if draw(st.booleans()):
                t = draw(st.floats(0.01, 2.0))
                mean = draw(st.floats(1.0, 10.0))
                peak = mean * draw(st.floats(1.0, 1.5))
                pts.append(Point(b, f, t, peak, mean))
    if not pts:
        pts.append(Point(8, 307.2, 0.1, 3.0, 2.5))
    n = {b: draw(st.one_of(st.just(math.nan), st.floats(1e3, 1e5))) for b in BATCHES}
    if all(math.isnan(v) for v in n.values()):
        n[pts[0].batch_size] = 5e3
    return Profile(pts, "rand.csv"), Efficiency(n, source="rand-eff.csv")


def brute_force(profile, eff, budget, deadline):
    """Every point: feasible, reached, predicted time and energy; the rule read literally."""
    cands = []
    for p in profile.points:
        n = eff.samples.get(p.batch_size, math.nan)
        if math.isnan(n) or (budget is not None and p.peak_power_w > budget):
            continue
        t = p.time_per_batch_s / p.batch_size * n
        cands.append((p, t, p.mean_power_w * t))
    if not cands:
        return None, None
    meets = [c for c in cands if c[1] <= deadline * (1 + 1e-9)]
    if meets:
        return min(
            meets, key=lambda c: (c[2], c[1], c[0].peak_power_w, c[0].freq_mhz, c[0].batch_size)
        ), False
    return min(cands, key=lambda c: (c[1], c[0].peak_power_w, c[0].freq_mhz, c[0].batch_size)), True


@settings(max_examples=300, deadline=None)
@given(
    profiles(),
    st.one_of(st.none(), st.floats(2.0, 16.0)),
    st.floats(0.5, 5e3),
)
@pytest.mark.slow
def test_choice_equals_brute_force_min_energy_meeting_deadline(pe, budget, deadline):
    profile, eff = pe
    got = select_deadline(profile.points, eff, budget, deadline)
    want, want_late = brute_force(profile, eff, budget, deadline)
    if want is None:
        assert got is None
        return
    assert got is not None
    p, t, e = want
    assert got.late is want_late
    assert got.choice.predicted_energy_j == pytest.approx(e, rel=1e-12)
    assert got.choice.predicted_time_s == pytest.approx(t, rel=1e-12)
    assert (got.choice.batch_size, got.choice.freq_mhz) == (p.batch_size, p.freq_mhz)
    # the objective registry's entry (what select/run_device use) picks the same point
    picked = select(profile, eff, budget, "deadline", deadline_s=deadline)
    assert (picked.batch_size, picked.freq_mhz) == (p.batch_size, p.freq_mhz)
    if budget is not None:
        assert got.choice.peak_power_w <= budget
    if not got.late:
        assert got.choice.predicted_time_s <= deadline * (1 + 1e-9)


# PROFILE, SHIPPED: the virtual-clock tests' hand-made profile and shipped efficiency;
# predicted (time s, energy J): 8@307: 12.5, 37.5 | 8@460: 10, 40 | 32@307: 12, 42 | 32@460: 6, 30


def test_hand_computed_choices_and_late():
    # deadline 11 s: 8@460 (10 s, 40 J) and 32@460 (6 s, 30 J) meet it; least energy 32@460
    c = select_deadline(PROFILE.points, SHIPPED, None, 11.0)
    assert (c.choice.batch_size, c.choice.freq_mhz, c.late) == (32, 460.8, False)
    # under 5 W: 32@460 is out; 8@460 (10 s, 40 J) is the only one within 11 s
    c = select_deadline(PROFILE.points, SHIPPED, 5.0, 11.0)
    assert (c.choice.batch_size, c.choice.freq_mhz, c.late) == (8, 460.8, False)
    # 13 s: 8@307 (12.5 s, 37.5 J) beats 8@460 (40 J) and 32@307 (42 J)
    c = select_deadline(PROFILE.points, SHIPPED, 5.0, 13.0)
    assert (c.choice.batch_size, c.choice.freq_mhz) == (8, 307.2)
    assert c.choice.predicted_energy_j == pytest.approx(37.5)


def test_unmeetable_deadline_is_late_on_the_fastest_point():
    for budget in (None, 5.0, 4.5, 4.0):
        c = select_deadline(PROFILE.points, SHIPPED, budget, 1.0)
        fast = select(PROFILE, SHIPPED, budget, "time")
        assert c.late
        assert (c.choice.batch_size, c.choice.freq_mhz) == (fast.batch_size, fast.freq_mhz)
    assert select_deadline(PROFILE.points, SHIPPED, 3.0, 100.0) is None  # nothing fits 3 W


def test_bad_deadline_and_time_only_profile_are_input_errors():
    with pytest.raises(InputError, match="positive"):
        select_deadline(PROFILE.points, SHIPPED, None, -1.0)
    with pytest.raises(InputError, match="positive"):
        select_deadline(PROFILE.points, SHIPPED, None, math.inf)
    timeonly = [Point(8, 307.2, 0.1, math.nan, math.nan)]
    with pytest.raises(InputError, match="time-only"):
        select_deadline(timeonly, SHIPPED, None, 10.0)


def test_schedule_look_ahead_prices_in_a_budget_drop():
    # 0-4 s unlimited, then 4.5 W (only 8@307 at 12.5 s/full, and 32@307 at 12 s/full).
    steps = (BudgetStep(0.0, None), BudgetStep(4.0, 4.5))
    # Deadline 11 s. Greedy (ignore the drop) would take 32@460 (6 s alone). Look-ahead:
    # 32@460 runs 4 s -> 2/3 done, then fastest under 4.5 W = 32@307 (12 s full): 1/3 x 12 = 4 s
    # -> finish 8 s, energy 4x5 + 4x3.5 = 34 J. 8@460: 4 s -> 0.4 done, then 0.6 x 12 = 7.2 s
    # -> 11.2 s: misses. 8@307 (4 s -> 0.32, 0.68 x 12 = 8.16 -> 12.16): misses. 32@307: 12 s.
    c = select_deadline_schedule(PROFILE.points, SHIPPED, steps, 11.0)
    assert (c.choice.batch_size, c.choice.freq_mhz, c.late) == (32, 460.8, False)
    assert c.predicted_finish_s == pytest.approx(8.0)
    assert c.predicted_energy_j == pytest.approx(34.0)
    assert fastest_finish(PROFILE.points, SHIPPED, steps) == pytest.approx(8.0)
    # Deadline 20 s: cheapest plan now 8@307 then 32@307? 8@307 for 4 s (0.32 done, 12 J) then
    # 32@307 0.68 x 12 = 8.16 s x 3.5 W = 28.56 J -> 40.56 J, finish 12.16. 32@307 alone: 42 J.
    # 32@460 then 32@307: 34 J. 8@460: 16 J + 7.2 x 3.5 = 41.2 J. -> 32@460 (34 J).
    c = select_deadline_schedule(PROFILE.points, SHIPPED, steps, 20.0)
    assert (c.choice.batch_size, c.choice.freq_mhz) == (32, 460.8)
    assert c.predicted_energy_j == pytest.approx(34.0)


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 4))
    times = sorted(draw(st.sets(st.floats(0.5, 200.0), min_size=n - 1, max_size=n - 1)))
    budgets = [draw(st.one_of(st.none(), st.floats(1.0, 12.0))) for _ in range(n)]
    return tuple(BudgetStep(t, b) for t, b in zip([0.0, *times], budgets, strict=True))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(profiles(), schedules(), st.floats(1.0, 500.0), st.sampled_from([1.0, 0.7, 1.6]))
def test_replay_with_deadline_never_exceeds_any_budget(pe, steps, deadline, truth_factor):
    profile, eff = pe
    truth = Efficiency({b: n * truth_factor for b, n in eff.samples.items()}, source="t.csv")
    spec = DeviceSpec("d", "jetson-nano", steps[0].budget_w, "rand.csv", "t.csv", steps)
    run = RunSettings("r", "m", "e.csv", 0.9, objective="deadline", deadline_s=deadline)
    res = run_device(spec, profile, eff, run, VirtualClock(truth))
    planned = DeadlineChooser(profile.points, eff, steps, deadline)
    first = planned(0, 0.0, 0.0)
    if first is None:  # the first budget admits nothing: the round says so
        assert res.status == "infeasible"
        return
    assert (res.batch_size, res.freq_mhz) == (first.batch_size, first.freq_mhz)
    for seg in res.segments:
        if seg.budget_w is not None and seg.peak_power_w is not None:
            assert seg.peak_power_w <= seg.budget_w
    # late is what happened: the plan already missed it, or the device finished after it
    # (its data needed more samples than shipped); never an infeasible device
    after = res.time_s is not None and res.time_s > deadline * (1 + 1e-9)
    trained = res.status not in ("infeasible", "not reached")
    assert (res.status == "late") == (trained and (planned.late or after))
    if res.status == "ok":
        assert res.time_s <= deadline * (1 + 1e-9)
    if truth_factor <= 1.0 and not planned.late and res.status != "infeasible":
        assert res.status == "ok"  # no more work than promised: the plan holds


def test_plan_deadline_is_the_slowest_fastest_finish():
    assert plan_deadline([10.0, None, 30.0, 20.0]) == 30.0
    assert plan_deadline([None, math.inf]) is None


@pytest.mark.slow
def test_default_fleet_deadline_objective_end_to_end():
    fleet = load_fleet(ROOT / "simulations" / "fleets" / "default.toml")
    t = simulate_fleet(fleet, "time")
    d = simulate_fleet(fleet, "deadline")
    # the planned deadline is the slowest device's fastest *predicted* finish
    predicted = [r["predicted_time_s"] for r in t.rows if r["status"] == "ok" and not r["message"]]
    assert d.deadline_s >= max(p for p in predicted if p is not None) - 1e-6
    by_name = {r["device"]: r for r in t.rows}
    schedules = {s.name for s in fleet.devices if s.schedule}
    for r in d.rows:
        ref = by_name[r["device"]]
        # nobody becomes infeasible; late is what happened: the devices' data needs more
        # samples than the proxy promised, and whoever finished after the deadline says so
        late = r["time_s"] is not None and r["time_s"] > d.deadline_s * (1 + 1e-9)
        want = "late" if ref["status"] == "ok" and late else ref["status"]
        assert r["status"] == want, (r["device"], r["status"], r["time_s"], d.deadline_s)
        if r["status"] not in ("ok", "late"):
            continue
        for seg in r["segments"]:
            if seg["budget_w"] is not None:
                assert seg["peak_power_w"] <= seg["budget_w"]
        if r["device"] in schedules:
            continue  # its prediction is a plan over the schedule (tested above)
        # the method's promise is on *predictions* (the shipped efficiency): it meets the
        # deadline and never predicts more energy than racing. Actual energy follows the
        # device's own trace, which may need more samples at the cooler point than shipped.
        assert r["predicted_time_s"] <= d.deadline_s * (1 + 1e-9)
        pred_e, ref_e = (x["predicted_time_s"] * x["mean_power_w"] for x in (r, ref))
        assert pred_e <= ref_e * (1 + 1e-9)


@pytest.mark.slow
def test_explicit_deadline_in_run_table_makes_devices_late(tmp_path):
    src = (ROOT / "simulations" / "fleets" / "default.toml").read_text()
    src = src.replace('objective = "time"', 'objective = "deadline"\ndeadline_s = 100')
    src = src.replace('"../', f'"{ROOT}/simulations/')
    f = tmp_path / "late.toml"
    f.write_text(src)
    fleet = load_fleet(f)
    d = simulate_fleet(fleet)
    t = simulate_fleet(fleet, "time")
    assert d.deadline_s == 100.0
    for r, ref in zip(d.rows, t.rows, strict=True):
        if ref["status"] == "ok":
            assert r["status"] == "late"
            assert (r["batch_size"], r["freq_mhz"]) == (ref["batch_size"], ref["freq_mhz"])
            assert r["time_s"] == pytest.approx(ref["time_s"])
    f.write_text(src.replace("deadline_s = 100", "deadline_s = -3"))
    with pytest.raises(
        InputError, match=r"\[run\]: field 'deadline_s' must be a finite number > 0"
    ):
        simulate_fleet(load_fleet(f))


@pytest.mark.slow
def test_select_cli_deadline_needs_a_deadline_and_picks_like_brute_force():
    import json

    from tests.conftest import run_cli

    prof = ROOT / "simulations" / "profiles" / "tx2nx_resnet18.csv"
    eff = ROOT / "simulations" / "efficiency" / "resnet18_cifar10-proxy.csv"
    base = ["select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "7"]
    r = run_cli(*base, "--objective", "deadline")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "powerfleet select: error: --objective deadline needs --deadline-s SECONDS"
    ]
    from fleet.core.choice import align
    from fleet.core.efficiency import load_efficiency
    from fleet.core.profile import load_profile

    p, e, _ = align(load_profile(str(prof)), load_efficiency(str(eff)))
    fastest = select(p, e, 7.0, "time").predicted_time_s
    for deadline, late in ((fastest * 1.4, False), (fastest * 0.5, True)):
        r = run_cli(*base, "--objective", "deadline", "--deadline-s", str(deadline), "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        want = select_deadline(p.points, e, 7.0, deadline)  # the schedule-aware brute force
        assert (got["batch_size"], got["freq_mhz"]) == (
            want.choice.batch_size,
            want.choice.freq_mhz,
        )
        assert got["late"] is late is want.late


@pytest.mark.slow
def test_planning_wire_and_device_plan_match_the_direct_planner():
    """What a device replies in the planning exchange (plan_for_device through the wire
    format) gives the direct engine's deadline, and the deadline travels in the instruction."""
    from clients import records
    from fleet.planning.deadline_plan import plan_for_device
    from fleet.planning.whatif import fastest_finishes
    from fleet.rounds.virtual_clock import cached_efficiency, cached_profile
    from strategies import coordinator

    fleet = load_fleet(ROOT / "simulations" / "fleets" / "default.toml")
    shipped = cached_efficiency(fleet.run.efficiency)
    got = []
    for spec in fleet.devices:
        plan = plan_for_device(spec, cached_profile(spec.profile)[0], shipped)
        content = records.plan_content(spec.name, plan.fastest_finish_s, plan.energy_j, "")
        name, fastest, _ = records.decode_plan(content)
        assert name == spec.name
        got.append(fastest)
    assert got == fastest_finishes(fleet.devices, shipped)
    assert got[-1] is None  # nano-starved cannot train: it does not set the deadline
    deadline = plan_deadline(got)
    assert deadline == simulate_fleet(fleet, "deadline", segment_s=0).deadline_s  # as planned
    assert deadline == simulate_fleet(fleet, "deadline").plan["revisions"][0]["deadline_s"]
    cfg = coordinator.with_deadline(coordinator.train_config(fleet, shipped), deadline)
    ins = records.decode_instruction(cfg)
    assert ins.run.deadline_s == deadline and ins.run.objective == fleet.run.objective
