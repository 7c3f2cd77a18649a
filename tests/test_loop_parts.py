"""The closed loop's parts decide on their own, from arguments, without a loop around them.

Why: once each part owns its state and returns its decision, the decisions can be checked
directly against answers computed by hand from the board of tests/closedloop_helpers.py (peak
at (b, f) = 1.05 + 0.004 f (1 + b/64) W), without threads or a clock; the loop tests
(tests/test_closedloop.py and the rest) check that the coordinator applies them.

Peaks used below (W): batch 32: 2.25 @200, 3.45 @400, 4.65 @600, 5.85 @800; batch 16: 2.05
@200, 3.05 @400, 4.05 @600; batch 8: 1.95 @200, 2.85 @400, 3.75 @600.
"""

from __future__ import annotations

import pytest

from fleet.agent.loop.budgetwatch import BudgetFollower, Guard, guard_text
from fleet.agent.loop.segments import SegmentLog
from fleet.agent.loop.table import Table
from fleet.method.budget import FixedBudget, ScheduleBudget
from fleet.method.selection import lut_from_rows
from tests.closedloop_helpers import lut_rows

EFF = {8: 4000.0, 16: 4000.0, 32: 4400.0}


def table(excluded=()):
    return Table(lut_from_rows(lut_rows()), EFF, set(excluded), None)


def at(t, b, f):
    p = t.point(b, f)
    assert p is not None
    return p


def follower(watts):
    f = BudgetFollower(FixedBudget(watts))
    assert f.start() == watts
    return f


def test_a_lower_budget_brings_the_running_batch_down_before_the_switch():
    t = table()
    # running 32@800, the new budget 3 W chose 8@400 (2.85 W): until the step boundary batch 32
    # runs at its fastest point under 3 W and under 400 MHz, 200 MHz (2.25 W; 400 is 3.45 W)
    lock, pending = follower(3.0).move(at(t, 8, 400.0), t, 32, 800.0)
    assert (lock, pending) == (200.0, at(t, 8, 400.0))


def test_a_higher_clock_waits_for_the_batch_switch():
    t = table()
    # running 32@200, the new budget 6 W chose 16@600: the clock never goes up before the switch
    lock, pending = follower(6.0).move(at(t, 16, 600.0), t, 32, 200.0)
    assert (lock, pending) == (None, at(t, 16, 600.0))


def test_the_same_batch_locks_the_new_clock_at_once():
    t = table()
    assert follower(3.0).move(at(t, 32, 200.0), t, 32, 800.0) == (200.0, None)


def test_nothing_fits_runs_the_lowest_clock_until_the_stop():
    t = table()
    assert follower(1.0).move(None, t, 32, 800.0) == (200.0, None)
    assert t.nothing_fits(1.0) == (
        "no profiled point fits the 1 W budget; the lowest profiled peak is 1.95 W "
        "(batch 8, 200 MHz)"
    )


def test_the_follower_reports_a_change_only_while_the_loop_runs():
    f = BudgetFollower(ScheduleBudget([(0.0, 6.0), (10.0, 3.0)]))
    assert f.start() == 6.0 and f.ahead == [(0.0, 6.0), (10.0, 3.0)]
    assert not f.poll(5.0, stopped=False)
    assert f.poll(10.0, stopped=False) and f.budget == 3.0
    assert not f.poll(11.0, stopped=False)  # no change
    g = BudgetFollower(ScheduleBudget([(0.0, 6.0), (10.0, 3.0)]))
    g.start()
    assert not g.poll(10.0, stopped=True) and g.budget == 6.0
    assert BudgetFollower(FixedBudget(5.0)).ahead is None  # nothing known ahead


def test_the_guard_steps_down_after_its_window_and_rules_the_faster_points_out():
    points = table().points
    guard = Guard(0.2)

    def read(t, w, running=(32, 800.0)):
        return guard.sample(t, w, 3.0, 0.5, running, points, stopped=False)

    assert read(0.4, 4.0) is None  # before the clock settled: never counts
    assert read(0.6, 4.0) is None  # the window opens
    assert read(0.7, 2.0) is None  # under the budget: it closes again
    assert read(0.75, 4.0) is None
    assert read(0.9, 4.0) is None  # 0.15 s over: not yet
    event = read(0.96, 4.0)  # 0.21 s over
    assert event == {
        "t_s": 0.96,
        "from_mhz": 800.0,
        "to_mhz": 600.0,
        "measured_w": 4.0,
        "budget_w": 3.0,
        "batch_size": 32,
    }
    assert guard.infeasible == {(32, 800.0)} and guard.events == [event]
    assert guard_text(event) == (
        "guard: 4.00 W over 3 W at 800 MHz (batch 32); stepped down to 600 MHz"
    )
    # at 400 MHz the step rules out 400 and everything faster at batch 32
    assert read(1.0, 4.0, (32, 400.0)) is None
    got = read(1.3, 4.0, (32, 400.0))
    assert got["to_mhz"] == 200.0
    assert guard.infeasible == {(32, 400.0), (32, 600.0), (32, 800.0)}
    # at the lowest clock there is nowhere to go: the loop must stop
    assert read(1.4, 4.0, (32, 200.0)) is None
    last = read(1.7, 4.0, (32, 200.0))
    assert last["to_mhz"] is None
    assert guard_text(last).startswith("measured 4.00 W over the 3 W budget at the lowest")
    assert guard.infeasible == {(32, f) for f in (200.0, 400.0, 600.0, 800.0)}


def test_the_segment_log_counts_energy_by_trapezoids_per_segment():
    log = SegmentLog()
    assert log.open(0.0, 32, 800.0, 6.0, "start")
    for t, w in [(0.0, 4.0), (1.0, 6.0), (2.0, 8.0)]:
        log.account(t, w, 6.0)
    assert not log.open(2.0, 32, 800.0, 6.0, "budget-change")  # nothing changed: one segment
    assert log.open(2.0, 32, 600.0, 6.0, "guard")
    log.account(3.0, 4.0, 6.0)
    assert log.end(3.0) and not log.end(4.0)
    this = log.this_call(99.0, [], [])
    # 0-1 s: (4+6)/2 = 5 J; 1-2 s: 7 J; 2-3 s: (8+4)/2 = 6 J in the second segment
    assert [s["energy_j"] for s in this["segments"]] == pytest.approx([12.0, 6.0])
    assert this["energy_j"] == pytest.approx(18.0) and this["time_s"] == 3.0
    assert (log.power_samples, log.over.samples, this["peak_power_w"]) == (4, 1, 8.0)
    # the reading at 2 s (8 W) stands for 1-2 s: 1 s over the 6 W budget, 2 J above its line
    assert (this["over_budget_s"], this["over_budget_j"]) == (1.0, 2.0)
    assert this["over_budget_excursions"] == 1


def test_a_trapezoid_across_a_segment_start_is_split_at_it():
    """Samples 1 s apart (a loaded machine) around a switch at 1.5 s: the 1-2 s trapezoid's
    first half is the old segment's energy, the second half the new one's, so each segment's
    energy over its own span is its own power, however the samples fall."""
    log = SegmentLog()
    log.open(0.0, 32, 800.0, 6.0, "start")
    log.account(0.0, 5.0, 6.0)
    log.account(1.0, 5.0, 6.0)
    log.open(1.5, 32, 600.0, 6.0, "guard")
    log.account(2.0, 3.0, 6.0)  # the 1-2 s trapezoid: (5 + 3) / 2 x 1 s = 4 J
    log.account(3.0, 3.0, 6.0)
    log.end(3.0)
    segs = log.this_call(99.0, [], [])["segments"]
    assert [s["energy_j"] for s in segs] == pytest.approx([5.0 + 2.0, 2.0 + 3.0])
    assert [(s["start_s"], s["end_s"]) for s in segs] == [(0.0, 1.5), (1.5, 3.0)]


def test_the_segment_log_judges_the_budget_statistic_not_the_reading():
    """NVML's instantaneous field averaged over 1 s (the backend's window): a 0.15 s spike to
    8 W over a steady 5 W never takes the 1 s mean over a 6 W budget; a lasting step to 7 W
    does, once its mean passes 6 W. Hand-computed: readings every 0.05 s."""
    log = SegmentLog(average_s=1.0, window_s=1.0)
    log.open(0.0, 32, 800.0, 6.0, "start")
    stats = []
    for i in range(81):  # 0..4 s
        t = 0.05 * i
        w = 8.0 if 1.0 < t <= 1.15 + 1e-9 else (7.0 if t > 2.0 + 1e-9 else 5.0)
        stats.append(log.account(t, w, 6.0))
    # the spike: three readings of 8 W in a 1 s window of 20: 5 + 3 x 3 / 20 = 5.45 W
    assert max(stats[:40]) == pytest.approx(5.45)
    # the step: the mean passes 6 W once more than half of the window is at 7 W (t > 2.5 s)
    over = [0.05 * i for i, v in enumerate(stats) if v > 6.0 + 1e-9]
    assert over[0] == pytest.approx(2.55)
    this = log.this_call(4.0, [], [])
    assert this["peak_power_w"] == pytest.approx(7.0)  # the statistic's peak, not 8 W
    assert this["over_budget_s"] == pytest.approx(4.0 - 2.55 + 0.05)
    # above the line: k readings of 7 W in the window give 5 + 0.1 k W; k = 11..20 stand 0.1..1 W
    # over for 0.05 s each (0.275 J), then 20 readings at 7 W stand 1 W over (1 J)
    assert this["over_budget_j"] == pytest.approx(1.275)
    assert this["over_budget_excursions"] == 1


@pytest.mark.parametrize(
    "was,seconds,status,said",
    [
        ("reached", 0.4, "over-budget", "training reached the target"),
        ("not reached", 0.4, "over-budget", "training ended: not reached"),
        ("error", 0.4, "error", "training ended: error"),  # the refusal is why: it stays
        ("paused", 0.4, "paused", None),  # a segment: the round goes on, the record carries
        ("reached", 0.0, "reached", None),
    ],
)
def test_time_above_the_budget_makes_the_status_and_a_note(was, seconds, status, said):
    from fleet.agent.loop.underbudget import over_budget

    summary = {
        "status": was, "notes": [], "over_budget_s": seconds, "over_budget_j": 1.2,
        "over_budget_excursions": 1, "longest_over_budget_s": seconds, "power_window_s": 1.0,
    }  # fmt: skip
    over_budget(summary)
    assert summary["status"] == status
    if said is None:
        assert summary["notes"] == []
    else:
        (note,) = summary["notes"]
        assert note == (
            "over budget: 0.4 s and 1.2 J above the budget in 1 excursion(s) (longest 0.4 s) "
            "of the power averaged over 1 s; " + said
        )
