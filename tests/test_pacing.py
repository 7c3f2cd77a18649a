"""Pacing: a closed loop asked to pace holds every step until the LUT's step time at the point
that ran it has passed, so a host faster than the board lives the board's timeline.

The loop's clock and sleep are injected: the verdicts are on the device's clock (the LUT), not
on how fast this machine trains.
"""

from __future__ import annotations

import pytest

from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.method.budget import BudgetStep, FixedBudget, ScheduleBudget
from fleet.method.selection import lut_from_rows
from tests.closedloop_helpers import (
    EFF,
    FakeClock,
    FollowBackend,
    lut_rows,
    model_power,
    model_time,
)


def loop_with(clock: FakeClock, pace: bool) -> ClosedLoop:
    plan = LoopPlan(lut_from_rows(lut_rows()), EFF, FixedBudget(None), pace=pace)
    return ClosedLoop(FollowBackend(), plan, hooks=LoopHooks(clock=clock, sleep=clock.sleep))


@pytest.mark.parametrize("compute_s", [0.0, 0.004, 0.5])
def test_a_paced_step_lasts_the_lut_time_of_its_point(compute_s):
    clock = FakeClock()
    with loop_with(clock, pace=True) as loop:
        b, f = loop.batch_size, loop.freq_mhz
        lut_s = model_time(b, f)
        starts = []
        for _ in range(5):
            starts.append(clock())
            loop.before_step()
            clock.t += compute_s  # the host's own time for the step
            loop.after_step()
        end = clock()
    steps = [b2 - a for a, b2 in zip(starts, starts[1:] + [end], strict=True)]
    # each step lasts the LUT's time when the host is faster, its own when it is slower
    assert steps == pytest.approx([max(lut_s, compute_s)] * 5)
    if compute_s >= lut_s:
        assert clock.slept == []  # a slower host is never held back further
    else:
        assert clock.slept == pytest.approx([lut_s - compute_s] * 5)


def test_without_pacing_the_loop_never_sleeps():
    clock = FakeClock()
    with loop_with(clock, pace=False) as loop:
        for _ in range(3):
            loop.before_step()
            loop.after_step()
    assert clock.slept == []


@pytest.mark.parametrize("objective", ["time", "deadline"])
def test_a_step_boundary_after_a_schedule_step_decides_under_the_new_budget(objective):
    """A sampler slower than the step (here: one reading, at the start) has not read the 3 W
    step due at 2 s when the first step after it ends at 2.004 s: the boundary reads the budget
    itself, so what runs from there (the time point, or the deadline's re-selection) is chosen
    under 3 W, and the segment says 3 W. Without it the loop ran the 5 W point until the next
    sample."""
    clock = FakeClock()
    source = ScheduleBudget([BudgetStep(0.0, 5.0), BudgetStep(2.0, 3.0)])
    plan = LoopPlan(
        lut_from_rows(lut_rows()), EFF, source, objective, 30.0 if objective == "deadline" else None
    )
    hooks = LoopHooks(hz=0.001, clock=clock, sleep=clock.sleep)
    with ClosedLoop(FollowBackend(), plan, hooks=hooks) as loop:
        loop.sampler.stop()  # its one reading, if any, at 0 s: the boundary reads 3 W itself
        first = (loop.batch_size, loop.freq_mhz)
        loop.before_step()
        clock.t += 1.0
        loop.after_step()
        assert loop.budget_w == 5.0 and (loop.batch_size, loop.freq_mhz) == first
        loop.before_step()
        clock.t += 1.004
        loop.after_step()
        assert loop.budget_w == 3.0
        loop.before_step()  # a new batch size waits for this boundary
        now = (loop.batch_size, loop.freq_mhz)
        segments = loop.segments
    assert model_power(*first) > 3.0  # the 5 W point does not fit 3 W
    assert model_power(*now) + 0.05 <= 3.0  # what runs after the step fits it
    after = [s for s in segments if s["start_s"] >= 2.0]
    assert after and all(s["budget_w"] == 3.0 for s in after)
    assert after[0]["start_s"] == pytest.approx(2.004) and after[0]["reason"] == "budget-change"
