"""Pacing: a closed loop asked to pace holds every step until the LUT's step time at the point
that ran it has passed, so a host faster than the board lives the board's timeline.

The loop's clock and sleep are injected: the verdicts are on the device's clock (the LUT), not
on how fast this machine trains.
"""

from __future__ import annotations

import pytest

from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.method.budget import FixedBudget
from fleet.method.selection import lut_from_rows
from tests.closedloop_helpers import FollowBackend, lut_rows, model_time

EFF = {8: 4000.0, 16: 4000.0, 32: 4400.0}


class FakeClock:
    """Monotonic seconds that move only when a step 'computes' or the loop sleeps."""

    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


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
