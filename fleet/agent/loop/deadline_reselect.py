"""The deadline objective inside the closed loop: the point for the work and time left.

Why separate: under ``objective = "deadline"`` every choice the loop makes (at the start, at a
budget change, after a guard step-down, after a drift refresh) is the deadline point for the
*remaining* work and time, with a look-ahead over a known schedule, and after every step the
running point is re-priced (``check_behind``); when no point can finish in time the device runs
its fastest point and records when it fell behind. That bookkeeping is one concern, apart from
following the budget (``budgetwatch.py``) and from the loop's hooks (``closedloop.py``). The
arithmetic itself (rates, finish times, the per-step choice) is ``deadline.py``.

The functions take the ``ClosedLoop`` and run with its lock held, reading and updating its state
as its own methods do. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Optional

from fleet.agent.loop.budgetwatch import nothing_fits
from fleet.agent.loop.segments import REASON_DEADLINE, open_segment
from fleet.method.deadline import choose_deadline, finish_at, meets
from fleet.method.point import Point
from fleet.method.selection import choose

BEHIND_CHECK_S = 0.25  # how often the deadline objective re-prices the running point


def choose_deadline_point(
    loop: Any, budget: Optional[float], now: float, margin_only: bool = False
) -> Optional[Point]:
    """The deadline point at ``now`` for the work and time left (the loop's ``_choose`` under
    the deadline objective). After a guard event it keeps the rail's measured excess under the
    budget; when nothing fits that way, the plain budget (the guard watches), unless
    ``margin_only``: then None. The first choice records the plan the round was promised."""
    if loop.done >= 1.0:
        return _past_estimate(loop, budget, now, margin_only)
    schedule = loop._schedule or [(0.0, budget)]
    got = None
    if loop.rail_excess_w > 0:  # the rail runs hotter than the profile: keep the margin
        got = choose_deadline(
            loop.points, loop.efficiency, [(at, _derate(loop, w)) for at, w in schedule],
            now, loop.done, loop.deadline_s, _derate(loop, budget), loop.infeasible,
            loop.max_batch,
        )  # fmt: skip
        if got is None and margin_only:
            return None
    if got is None:
        got = choose_deadline(
            loop.points, loop.efficiency, schedule, now, loop.done, loop.deadline_s, budget,
            loop.infeasible, loop.max_batch,
        )  # fmt: skip
    if got is None:
        return None
    rate, late, f, e = got
    loop.last_finish_s = f
    if not loop.segments:  # the start: the plan the round was promised
        loop.late, loop.predicted_finish_s, loop.predicted_energy_j = late, f, e
        if late:
            loop._note(
                "deadline: predicted finish {:.1f} s misses the {:g} s deadline; running "
                "the fastest point".format(f, loop.deadline_s)
            )
    elif late:
        _mark_behind(loop, now)
    return rate.point


def _mark_behind(loop: Any, now: float) -> None:
    """Record (once, unless the start was already late) that the device fell behind."""
    if loop.late or loop.behind_at_s is not None:
        return
    loop.behind_at_s = now
    if loop.done >= 1.0:
        why = "the shipped estimate is used up at {:.1f} s ({:.1%} done, target not reached)"
        loop._note(("deadline: " + why + "; running the fastest point").format(now, loop.done))
    else:
        loop._note(
            "deadline: fell behind the {:g} s deadline at {:.1f} s ({:.1%} done); running "
            "the fastest point".format(loop.deadline_s, now, loop.done)
        )


def _past_estimate(
    loop: Any, budget: Optional[float], now: float, margin_only: bool
) -> Optional[Point]:
    """The shipped samples-to-accuracy are used up and the target is not reached: the data
    needs more than estimated, nothing is left to plan on, so the device is behind and runs
    its fastest point (the host's ``DeadlineChooser`` does the same). Costing the remaining
    work as zero instead would make every point "on time" and pick the slowest."""
    p = None
    if loop.rail_excess_w > 0:
        p = choose(
            loop.points, loop.efficiency, _derate(loop, budget), "time", loop.infeasible,
            loop.max_batch,
        )  # fmt: skip
        if p is None and margin_only:
            return None
    if p is None:
        p = choose(loop.points, loop.efficiency, budget, "time", loop.infeasible, loop.max_batch)
    if p is not None and loop.segments:
        _mark_behind(loop, now)
    return p


def check_behind(loop: Any, t: float) -> None:
    """Does the running point still finish by the deadline (from here, at the LUT's rate,
    with the look-ahead)? If not, re-select now, at the step boundary. Checked also after
    the device was late or fell behind: a later budget change may have put it on a slower
    point that must keep up too; only the fastest point has nothing to switch to."""
    if (
        t < loop._next_check
        or loop._pending is not None
        or loop.stop_reason is not None
        or (loop.drift is not None and loop.drift.active())
    ):
        return
    loop._next_check = t + BEHIND_CHECK_S
    p = loop._point(loop._batch, loop._freq)
    if p is None:
        return
    budget = _derate(loop, loop._budget) if loop.rail_excess_w > 0 else loop._budget
    fastest = choose(loop.points, loop.efficiency, budget, "time", loop.infeasible, loop.max_batch)
    at_fastest = fastest == p  # then there is nothing to switch to, only to record
    if loop.done >= 1.0:  # past the shipped estimate: the fastest point, now
        if at_fastest:
            _mark_behind(loop, t)
        else:
            reselect_for_deadline(loop, t, REASON_DEADLINE)
        return
    schedule = loop._schedule or [(0.0, loop._budget)]
    if loop.rail_excess_w > 0:
        schedule = [(at, _derate(loop, w)) for at, w in schedule]
    f, _ = finish_at(
        p, loop.points, loop.efficiency, schedule, t, loop.done, loop.infeasible,
        loop.max_batch,
    )  # fmt: skip
    loop.last_finish_s = f
    if meets(f, loop.deadline_s):
        return
    if at_fastest:
        _mark_behind(loop, t)
        return
    reselect_for_deadline(loop, t, REASON_DEADLINE)


def _derate(loop: Any, budget: Optional[float]) -> Optional[float]:
    return None if budget is None else max(budget - loop.rail_excess_w, 1e-9)


def reselect_for_deadline(loop: Any, t: float, reason: str) -> None:
    """At a step boundary: run the deadline point for the remaining work and time. When
    nothing fits once the rail's excess is kept under the budget, the running point (the
    guard's, or the one the budget change chose) stays."""
    p = loop._choose(loop._budget, t, margin_only=True)
    if p is None:
        if loop.rail_excess_w > 0:
            return
        loop._stop(nothing_fits(loop, loop._budget))
        return
    if (p.batch_size, p.freq_mhz) != (loop._batch, loop._freq):
        loop._apply_point(p, t)
        open_segment(loop, t, reason)
