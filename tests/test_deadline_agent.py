"""The board's deadline chooser (fleet/method/deadline.py) and the closed loop that follows it.

The chooser is checked against a brute force that reads the rule literally (remaining work,
remaining time, least energy among the plans that meet the deadline, else the fastest, late)
and against the host's ``fleet.core.deadline.choose_step`` on the same inputs; the closed loop runs
real training on a board whose power follows the clock (tests/closedloop_helpers.py).
"""

import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.agent.loop.closedloop import ClosedLoop, ClosedLoopError
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.agent.models.registry import build_model
from fleet.core.deadline import choose_step, rates
from fleet.core.efficiency import Efficiency
from fleet.method.budget import BudgetStep, FileBudget, FixedBudget
from fleet.method.deadline import choose_deadline
from fleet.method.point import Point
from fleet.method.selection import choose, lut_from_rows
from tests.closedloop_helpers import FakeClock, FollowBackend, at_step, lut_rows, under_budget
from tests.closedloop_helpers import slow_step as slow

BATCHES = (4, 8, 16, 32)
FREQS = (307.2, 460.8, 614.4, 921.6)
TOL = 1e-9


@st.composite
def luts(draw):
    pts = []
    for b in BATCHES:
        for f in FREQS:
            if draw(st.booleans()):
                mean = draw(st.floats(1.0, 10.0))
                pts.append(
                    Point(b, f, draw(st.floats(0.01, 2.0)), mean * draw(st.floats(1.0, 1.5)), mean)
                )
    if not pts:
        pts.append(Point(8, 307.2, 0.1, 3.0, 2.5))
    eff = {b: draw(st.floats(1e3, 1e5)) for b in BATCHES if draw(st.booleans())}
    eff.setdefault(pts[0].batch_size, 5e3)
    return pts, eff


def fits(p, budget):
    return budget is None or p.peak_power_w <= budget


def tie(p):
    return (p.peak_power_w, p.freq_mhz, p.batch_size)


def simulate(p, eff, steps, k, clock, done):
    """Run p until step k ends, then each later step's fastest point (pause if none): the plan
    written out segment by segment. Returns (finish, energy)."""
    t, d, e = clock, done, 0.0
    for j in range(k, len(steps)):
        end = steps[j + 1][0] if j + 1 < len(steps) else math.inf
        t = max(t, steps[j][0])
        q = p if j == k else fastest_point(eff["points"], eff["n"], steps[j][1])
        if q is None:
            t = end
            continue
        per_target = q.time_per_batch_s / q.batch_size * eff["n"][q.batch_size]
        run = min((1 - d) * per_target, end - t)
        e += q.mean_power_w * run
        d += run / per_target
        t += run
        if d >= 1 - 1e-12:
            return t, e
    return math.inf, e


def fastest_point(points, n, budget):
    cands = [p for p in points if p.batch_size in n and fits(p, budget)]
    if not cands:
        return None
    return min(cands, key=lambda p: (p.time_per_batch_s / p.batch_size * n[p.batch_size],) + tie(p))


def brute_force(points, n, steps, k, clock, done, deadline, exclude=()):
    """The rule read literally, over every allowed point fitting step k's budget."""
    allowed = [p for p in points if p.batch_size in n and (p.batch_size, p.freq_mhz) not in exclude]
    cands = []
    for p in allowed:
        if fits(p, steps[k][1]):
            f, e = simulate(p, {"points": allowed, "n": n}, steps, k, clock, done)
            cands.append((p, f, e))
    if not cands:
        return None
    meets = [c for c in cands if c[1] <= deadline * (1 + TOL)]
    if meets:
        p, f, e = min(meets, key=lambda c: (c[2], c[1]) + tie(c[0]))
        return p, False, f, e
    p, f, e = min(cands, key=lambda c: (c[1],) + tie(c[0]))
    return p, True, f, e


def host_choice(points, n, steps, k, clock, done, deadline):
    table = rates(
        [Point(p.batch_size, p.freq_mhz, p.time_per_batch_s, p.peak_power_w, p.mean_power_w)
         for p in points],
        Efficiency(dict(n), source="eff"),
    )  # fmt: skip
    got = choose_step(table, [BudgetStep(t, w) for t, w in steps], k, clock, done, deadline)
    return None if got is None else (got[0].point, got[1], got[2], got[3])


def same(got, want):
    if want is None:
        assert got is None
        return
    assert got is not None
    p, late, f, e = want
    assert (got[0].batch_size, got[0].freq_mhz) == (p.batch_size, p.freq_mhz)
    assert got[1] is late
    assert got[2] == pytest.approx(f, rel=1e-9) or (math.isinf(f) and math.isinf(got[2]))
    assert got[3] == pytest.approx(e, rel=1e-9)


@settings(max_examples=250, deadline=None)
@given(
    luts(),
    st.one_of(st.none(), st.floats(2.0, 16.0)),
    st.floats(0.0, 0.95),
    st.floats(0.0, 500.0),
    st.floats(1.0, 5e3),
    st.sets(st.tuples(st.sampled_from(BATCHES), st.sampled_from(FREQS)), max_size=4),
)
@pytest.mark.slow
def test_one_budget_equals_brute_force_for_the_remaining_work(lut, budget, done, clock, deadline,
                                                              exclude):  # fmt: skip
    points, n = lut
    steps = [(0.0, budget)]
    got = choose_deadline(points, n, steps, clock, done, deadline, exclude=set(exclude))
    want = brute_force(points, n, steps, 0, clock, done, deadline, exclude)
    same(got and (got[0].point,) + got[1:], want)
    if want is not None:
        # remaining work and time, read off directly: finish = clock + (1 - done) x full time
        p = want[0]
        full = p.time_per_batch_s / p.batch_size * n[p.batch_size]
        assert want[2] == pytest.approx(clock + (1 - done) * full, rel=1e-9)
    if not exclude:
        host = host_choice(points, n, steps, 0, clock, done, deadline)
        same(got and (got[0].point,) + got[1:], host)


@settings(max_examples=250, deadline=None)
@given(
    luts(),
    st.lists(st.one_of(st.none(), st.floats(2.0, 16.0)), min_size=2, max_size=4),
    st.floats(0.0, 0.95),
    st.floats(0.0, 300.0),
    st.floats(1.0, 5e3),
)
@pytest.mark.slow
def test_schedule_look_ahead_equals_brute_force_and_the_host(lut, budgets, done, clock, deadline):
    points, n = lut
    steps = [(60.0 * j, w) for j, w in enumerate(budgets)]
    k = max(j for j, (t, _) in enumerate(steps) if t <= clock)
    got = choose_deadline(points, n, steps, clock, done, deadline)
    got = got and (got[0].point,) + got[1:]
    same(got, brute_force(points, n, steps, k, clock, done, deadline))
    same(got, host_choice(points, n, steps, k, clock, done, deadline))


@settings(max_examples=300, deadline=None)
@given(luts(), st.one_of(st.none(), st.sampled_from([1.0, 3.0, 6.0]), st.floats(1.0, 16.0)))
def test_the_hosts_rate_table_is_a_fast_path_of_the_kernel(lut, budget):
    """``fleet.core.deadline.RateTable`` (binary search) answers what the kernel's
    ``feasible_rates``/``fastest_rate`` (a scan) answer: the same points, the same fastest."""
    from fleet.method.deadline import fastest_rate, feasible_rates

    points, n = lut
    table = rates(points, Efficiency(dict(n)))
    want = fastest_rate(points, n, budget)
    got = table.fastest(budget)
    assert (got and got.point) is (want and want.point) or got == want
    scan = sorted((r.point.batch_size, r.point.freq_mhz) for r in feasible_rates(points, n, budget))
    fast = sorted((r.point.batch_size, r.point.freq_mhz) for r in table.feasible(budget))
    assert fast == scan


def test_an_unmeetable_deadline_is_late_on_the_fastest_point():
    points, n = lut_from_rows(lut_rows()), {8: 4000.0, 16: 4000.0, 32: 4400.0}
    fastest = choose(points, n, 4.0, "time")
    got = choose_deadline(points, n, [(0.0, 4.0)], 0.0, 0.0, 0.5)
    assert got is not None and got[1] is True
    assert (got[0].point.batch_size, got[0].point.freq_mhz) == (8, 600.0) == (
        fastest.batch_size, fastest.freq_mhz,
    )  # fmt: skip
    assert got[2] == pytest.approx(4000 / 8 * (0.002 + 0.0004 * 8) * 800 / 600)
    # the closed loop starts there, says it is late, and gives the clock back
    board = FollowBackend()
    loop = ClosedLoop(board, LoopPlan(points, n, FixedBudget(4.0), "deadline", deadline_s=0.5))
    with loop:
        assert (loop.batch_size, loop.freq_mhz, board.locked) == (8, 600.0, 600.0)
    summary = loop.summary()
    assert summary["late"] is True and summary["behind_at_s"] is None
    assert summary["predicted_finish_s"] == pytest.approx(got[2])
    assert any("misses the 0.5 s deadline" in m for m in summary["notes"])
    assert board.locked is None and board.restores == 1


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"objective": "deadline"}, "needs deadline_s"),
        ({"objective": "deadline", "deadline_s": 0.0}, "positive number of seconds"),
        ({"objective": "deadline", "deadline_s": -3}, "positive number of seconds"),
        ({"objective": "time", "deadline_s": 10.0}, "only for the deadline objective"),
    ],
)
def test_bad_deadline_inputs_are_one_line(kw, words):
    points = lut_from_rows(lut_rows())
    with pytest.raises(ClosedLoopError, match=words):
        ClosedLoop(FollowBackend(), LoopPlan(points, {16: 4000.0}, FixedBudget(5.0), **kw))


def test_a_time_only_profile_cannot_serve_the_deadline():
    rows = [dict(r, peak_power_w=None, mean_power_w=None) for r in lut_rows()]
    with pytest.raises(ClosedLoopError, match="time-only"):
        plan = LoopPlan(lut_from_rows(rows), {16: 4000.0}, FixedBudget(None), "deadline", 10.0)
        ClosedLoop(FollowBackend(), plan)
    # only the batch sizes shipped must have power, as on the host (fleet.core.deadline)
    mixed = [r if r["batch_size"] == 16 else dict(r, peak_power_w=None, mean_power_w=None)
             for r in lut_rows()]  # fmt: skip
    plan = LoopPlan(lut_from_rows(mixed), {16: 4000.0}, FixedBudget(6.0), "deadline", 10.0)
    loop = ClosedLoop(FollowBackend(), plan)
    with loop:
        assert loop.batch_size == 16


EFF = {8: 4000.0, 16: 4000.0, 32: 4400.0}


def train_deadline(board, source, deadline_s, max_samples=4000, **kw):
    g = torch.Generator().manual_seed(1)
    train = (torch.randn(512, 1, 8, 8, generator=g), torch.randint(0, 2, (512,), generator=g))
    test = (torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
    return under_budget(
        board, model, train, test, lut_from_rows(lut_rows()), EFF, source, 16, 1e-3,
        objective="deadline", deadline_s=deadline_s, target_accuracy=1.0,
        max_samples=max_samples, **{"eval_every_samples": max_samples, "augment": slow, **kw},
    )  # fmt: skip


def point_of(seg):
    return seg["batch_size"], seg["freq_mhz"]


def picked(got):
    return got[0].point.batch_size, got[0].point.freq_mhz


@pytest.mark.slow
def test_a_live_budget_file_re_selects_for_the_work_and_time_left(tmp_path):
    """6 W, then the file says 4.2 W: the new point is the deadline point for the remaining
    work and time with the current budget assumed to hold (no look-ahead for a live file)."""
    budget = tmp_path / "budget"
    budget.write_text("6\n")
    board = FollowBackend()
    write = at_step(60, lambda: budget.write_text("4.2\n"))  # about 1 s in; 140 steps to go
    source = FileBudget(str(budget), reread_s=0.05)
    _result, summary = train_deadline(board, source, 30.0, 3200, augment=write)
    segs = summary["segments"]
    points = lut_from_rows(lut_rows())
    assert point_of(segs[0]) == picked(choose_deadline(points, EFF, [(0.0, 6.0)], 0, 0, 30.0))
    drop = [s for s in segs if s["budget_w"] == 4.2]
    assert drop and drop[0]["reason"] == "budget-change" and 0 <= drop[0]["done"] < 1
    for s in segs[1:]:
        want = choose_deadline(points, EFF, [(0.0, s["budget_w"])], s["start_s"], s["done"], 30.0)
        assert point_of(s) == picked(want) and not want[1]
    assert point_of(segs[0]) == (16, 800.0) and point_of(drop[0]) == (16, 600.0)
    assert summary["late"] is False and summary["behind_at_s"] is None
    assert summary["guard_events"] == [] and board.locked is None


@pytest.mark.slow
def test_after_a_guard_step_down_the_deadline_re_selects_with_the_rail_margin():
    """The rail runs 1.5 W hot from the 60th step (about 1 s): the guard steps 16@600 down to
    16@400 and rules out the faster clocks at b=16; the loop's deadline re-selection then keeps
    the measured excess (5.5 W read at a 4.05 W point) under the budget, so it does not try
    8@800 or 32@600 (in the profile under 5 W, over it on this rail): one guard event, no
    cascade."""
    board = FollowBackend()
    hot = at_step(60, lambda: setattr(board, "drift_w", 1.5))  # about 1 s in; 140 to go
    _result, summary = train_deadline(board, FixedBudget(5.0), 30.0, 3200, augment=hot)
    segs, events = summary["segments"], summary["guard_events"]
    points = lut_from_rows(lut_rows())
    assert point_of(segs[0]) == (16, 600.0)  # least energy under 5 W meeting 30 s
    assert len(events) == 1, events
    first = events[0]
    assert (first["batch_size"], first["from_mhz"], first["to_mhz"]) == (16, 600.0, 400.0)
    excess = first["measured_w"] - 4.05
    excluded = {(16, 600.0), (16, 800.0)}
    done_then = [s for s in segs if s["start_s"] <= first["t_s"]][-1]["done"]
    want = choose_deadline(
        points, EFF, [(0.0, 5.0 - excess)], first["t_s"], done_then, 30.0, 5.0 - excess, excluded
    )
    assert picked(want) == (16, 400.0) == point_of(segs[-1])  # the guard's point, kept
    for s in segs:
        if s["reason"] == "deadline":  # a later re-selection keeps the same margin
            got = choose_deadline(
                points, EFF, [(0.0, 5.0 - excess)], s["start_s"], s["done"], 30.0,
                5.0 - excess, excluded,
            )  # fmt: skip
            assert point_of(s) == picked(got)
    assert summary["rail_excess_w"] == pytest.approx(excess)
    assert board.locked is None


@pytest.mark.slow
def test_a_board_slower_than_its_lut_falls_behind_and_runs_its_fastest_point():
    """Steps take 15 ms (the LUT says 8 ms): 16@800, the least-energy point meeting 2.5 s at the
    start, falls behind; the loop re-selects for the remaining work (32@800, the fastest) and
    records when it fell behind; the budget is never exceeded."""
    points, n = lut_from_rows(lut_rows()), EFF
    board = FollowBackend()
    result, summary = train_deadline(board, FixedBudget(6.0), 2.5)
    segs = summary["segments"]
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"], segs[0]["done"]) == (16, 800.0, 0.0)
    assert summary["late"] is False and summary["predicted_finish_s"] == pytest.approx(2.1)
    behind = [s for s in segs if s["reason"] == "deadline"]
    assert behind, segs
    for s in behind:  # each re-selection is the chooser's, for the work and time left then
        want = choose_deadline(points, n, [(0.0, 6.0)], s["start_s"], s["done"], 2.5, 6.0)
        assert (s["batch_size"], s["freq_mhz"]) == (
            want[0].point.batch_size,
            want[0].point.freq_mhz,
        )
        assert 0 < s["done"] < 1
    assert (segs[-1]["batch_size"], segs[-1]["freq_mhz"]) == (32, 800.0)  # the fastest at 6 W
    assert summary["behind_at_s"] is not None and summary["behind_at_s"] >= behind[0]["start_s"]
    assert any("fell behind the 2.5 s deadline" in m for m in summary["notes"])
    assert summary["over_budget_samples"] == 0 and summary["guard_events"] == []
    # progress carries across the switch as a fraction of the target: b=16 then b=32
    assert len(segs) == 2
    d1 = segs[1]["done"]
    assert summary["done_fraction"] == pytest.approx(d1 + (result.samples - d1 * 4000) / 4400)
    assert board.locked is None


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"objective": "deadline"}, "objective deadline needs 'deadline_s'"),
        ({"objective": "deadline", "deadline_s": 0}, "positive number of seconds"),
        ({"objective": "deadline", "deadline_s": "soon"}, "expected a number of seconds"),
        ({"objective": "time", "deadline_s": 30}, "'deadline_s' is only for objective deadline"),
        ({"objective": "fastest"}, "must be time, energy or deadline"),
    ],
)
def test_the_agent_refuses_bad_deadline_arguments_in_one_line(extra, words):
    from fleet.agent.protocol.train_args import closed_loop_args
    from fleet.agent.protocol.wire import ProtocolError

    req = {"cmd": "train", "budget_w": "5", "profile": lut_rows(), "efficiency": {"16": 4000}}
    with pytest.raises(ProtocolError, match=words):
        closed_loop_args(dict(req, **extra))
    ok = closed_loop_args(dict(req, objective="deadline", deadline_s=30))
    assert ok is not None and (ok.objective, ok.deadline_s) == ("deadline", 30.0)
    timeless = [
        {k: r[k] for k in ("batch_size", "freq_mhz", "time_per_batch_s")} for r in lut_rows()
    ]
    with pytest.raises(ProtocolError, match="time-only"):
        closed_loop_args(dict(req, profile=timeless, objective="deadline", deadline_s=30))


def test_a_resumed_checkpoint_counts_and_the_loop_re_selects_for_what_is_left():
    """Energy per sample least at the lowest clock, time ~ f^-0.3: with 3 s for the whole work
    the start runs 600 MHz (2.72 s predicted); told that a checkpoint holds half the work, the
    loop re-selects at the next step and 200 MHz (1.9 s for the half left) meets the deadline."""
    rows = [
        {
            "batch_size": 16,
            "freq_mhz": f,
            "time_per_batch_s": 0.01 * (800 / f) ** 0.3,
            "peak_power_w": 1.55 + 0.004 * f,
            "mean_power_w": 1.5 + 0.004 * f,
        }
        for f in (200.0, 400.0, 600.0, 800.0)
    ]
    points, n = lut_from_rows(rows), {16: 4000.0}
    board = FollowBackend()
    loop = ClosedLoop(board, LoopPlan(points, n, FixedBudget(6.0), "deadline", deadline_s=3.0))
    with loop:
        assert (loop.batch_size, loop.freq_mhz, board.locked) == (16, 600.0, 600.0)
        loop.resumed(2000, 16)
        assert loop.before_step() == (16, False)
        assert (loop.freq_mhz, board.locked) == (200.0, 200.0)
    seg = loop.summary()["segments"][-1]
    assert (seg["reason"], seg["done"]) == ("deadline", 0.5)
    want = choose_deadline(points, n, [(0.0, 6.0)], seg["start_s"], 0.5, 3.0)
    assert point_of(seg) == picked(want) == (16, 200.0) and not want[1]
    assert board.locked is None


@pytest.mark.slow
def test_the_trainer_tells_the_loop_what_a_checkpoint_holds(tmp_path):
    """Capped after 1,600 samples with a checkpoint; the next run resumes there and trains
    1,600 more at b=16: the loop counts both halves (0.8 of the 4,000-sample target)."""
    kw = {"checkpoint_path": str(tmp_path / "checkpoint.pt"), "eval_every_samples": 1600}
    train_deadline(FollowBackend(), FixedBudget(6.0), 30.0, 1600, **kw)
    board = FollowBackend()
    result, summary = train_deadline(board, FixedBudget(6.0), 30.0, 3200, **kw)
    assert (result.resumed_from_samples, result.samples) == (1600, 3200)
    assert {point_of(s) for s in summary["segments"]} == {(16, 800.0)}
    assert summary["done_fraction"] == pytest.approx(3200 / EFF[16])
    assert board.locked is None


def test_past_the_shipped_estimate_the_loop_runs_its_fastest_point(tmp_path):
    """The data needs more samples than shipped (done passes 1 before the target): with no work
    left to plan on, a budget change re-selects the fastest point that fits, not the slowest
    (which a plan costing the remaining work at zero would pick)."""
    budget = tmp_path / "budget"
    budget.write_text("6\n")
    points, n = lut_from_rows(lut_rows()), {16: 400.0}
    board = FollowBackend()
    plan = LoopPlan(points, n, FileBudget(str(budget), reread_s=0.01), "deadline", 5.0)
    loop = ClosedLoop(board, plan)
    with loop:
        assert (loop.batch_size, loop.freq_mhz) == (16, 800.0)
        for _ in range(26):  # 26 x 16 = 416 samples > 400 shipped, target not reached
            loop.before_step()
            loop.after_step()
        assert loop.done > 1.0
        budget.write_text("5.5\n")  # 16@800 (5.05 W peak) fits, 32@800 (5.85 W) does not
        for _ in range(6000):  # until the sampler has read the new budget (a hang guard)
            if any(seg["budget_w"] == 5.5 for seg in loop.segments):
                break
            time.sleep(0.01)
        loop.before_step()
        want = choose(points, n, 5.5, "time")
        assert (want.batch_size, want.freq_mhz) == (16, 800.0)
        assert (loop.batch_size, loop.freq_mhz, board.locked) == (16, 800.0, 800.0)
    summary = loop.summary()
    assert summary["behind_at_s"] is not None
    assert any("shipped estimate is used up" in m for m in summary["notes"])
    assert board.locked is None


def test_a_late_start_is_still_checked_after_the_budget_rises(tmp_path):
    """Only 200 MHz fits at first (late from the start); the live budget then rises and the
    deadline point is 400 MHz, but the board runs 1.6x slower than its LUT: the check keeps
    running after the late start and moves it up again instead of letting it finish later.
    On the loop's own clock (steps and the file's re-read), so the choice at each step is the
    same on any host."""
    rows = [
        {
            "batch_size": 16,
            "freq_mhz": f,
            "time_per_batch_s": 6.72 / f,
            "peak_power_w": 0.55 + 6e-6 * f * f,
            "mean_power_w": 0.5 + 6e-6 * f * f,
        }
        for f in (200.0, 400.0, 600.0, 800.0)
    ]
    points, n = lut_from_rows(rows), {16: 1000.0}
    lut = {p.freq_mhz: p.time_per_batch_s for p in points}
    budget = tmp_path / "budget"
    budget.write_text("1.0\n")
    board = FollowBackend(freqs=[200.0, 400.0, 600.0, 800.0])
    clock = FakeClock()
    source = FileBudget(str(budget), reread_s=0.01, clock=clock)
    plan = LoopPlan(points, n, source, "deadline", 1.5)
    loop = ClosedLoop(board, plan, hooks=LoopHooks(hz=0.001, clock=clock, sleep=clock.sleep))
    with loop:
        loop.sampler.stop()  # its one reading, if any, at 0 s: the steps read the budget
        assert (loop.freq_mhz, loop.late) == (200.0, True)
        clock.t += 0.05
        budget.write_text("10\n")
        clock.t += 0.05
        for _ in range(1000):  # ~63 steps of 16 reach the 1,000 samples
            if loop.done >= 1.0:
                break
            loop.before_step()
            clock.t += 1.6 * lut[loop.freq_mhz]
            loop.after_step()
    reasons = [(s["reason"], s["freq_mhz"]) for s in loop.summary()["segments"]]
    assert reasons[:2] == [("start", 200.0), ("budget-change", 400.0)]
    assert any(r == "deadline" and f > 400.0 for r, f in reasons[2:]), reasons
