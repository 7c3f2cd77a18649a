"""What the closed loop does at each power sample: follow the budget, and guard the rail.

Why separate: these run in the sampler thread, at every reading, while the trainer is inside a
step: the budget source is asked for the budget now, and a change re-selects and locks the new
clock (only ever *down* before the batch switch, see ``closedloop.py``); measured power over the
budget for longer than the guard window steps the clock down and rules the point out. That is
the loop's reaction to the outside world, apart from what it does at the trainer's step
boundaries (``closedloop.py``) and from the deadline's re-pricing (``deadline_reselect.py``).

The functions take the ``ClosedLoop`` and run with its lock held, reading and updating its state
as its own methods do. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Optional

from fleet.agent.loop.segments import REASON_BUDGET, REASON_GUARD, open_segment
from fleet.method.point import Point
from fleet.method.selection import fits, lowest_peak


def _label(w: Optional[float]) -> str:
    return "unlimited" if w is None else "{:g} W".format(w)


def nothing_fits(loop: Any, budget: Optional[float]) -> str:
    """One line saying that no profiled point fits ``budget``, with the lowest peak."""
    low = lowest_peak(loop.points)
    where = (
        "; the lowest profiled peak is {:.2f} W (batch {}, {:g} MHz)".format(
            low.guard_peak_w, low.batch_size, low.freq_mhz
        )
        if low is not None
        else ""
    )
    extra = " ({} point(s) excluded by the guard)".format(len(loop.infeasible))
    return "no profiled point fits the {} budget{}{}".format(
        _label(budget), where, extra if loop.infeasible else ""
    )


def follow_budget(loop: Any, t: float) -> None:
    """Read the budget at ``t``; at a change re-select, lock (down first) and open a segment.

    A new batch size waits for the step boundary (``_pending``, applied by ``before_step``)."""
    budget = loop.source.budget_at(t)
    if budget == loop._budget or loop.stop_reason is not None:
        return
    loop._budget = budget
    loop._over_since = None
    p = loop._choose(budget, t)
    if p is None:
        loop._stop(nothing_fits(loop, budget))
        lowest = _choose_for_batch(loop, loop._batch, budget, loop._freq)
        if lowest is not None and lowest.freq_mhz < loop._freq:
            loop._lock(lowest.freq_mhz, t)  # the least power until the step ends
        open_segment(loop, t, REASON_BUDGET)
        return
    if p.batch_size == loop._batch:
        loop._lock(p.freq_mhz, t)
    else:
        # Until the step boundary the running batch goes on at its fastest point that fits
        # the new budget, never above the new clock nor above the running one.
        bridge = _choose_for_batch(loop, loop._batch, budget, p.freq_mhz)
        interim = min(p.freq_mhz, loop._freq)
        if bridge is not None:
            interim = min(interim, bridge.freq_mhz)
        if interim != loop._freq:
            loop._lock(interim, t)
    loop._pending = p if p.batch_size != loop._batch else None
    open_segment(loop, t, REASON_BUDGET)


def _choose_for_batch(
    loop: Any, batch: int, budget: Optional[float], below_mhz: float
) -> Optional[Point]:
    """The running batch's fastest point that fits ``budget`` at or under ``below_mhz``."""
    cands = [
        p
        for p in loop.points
        if p.batch_size == batch
        and (batch, p.freq_mhz) not in loop.infeasible
        and p.freq_mhz <= below_mhz
    ]
    ok = [p for p in cands if fits(p, budget)]
    if ok:
        return min(ok, key=lambda p: (p.time_per_batch_s, p.freq_mhz))
    return min(cands, key=lambda p: p.freq_mhz) if cands else None


def guard(loop: Any, t: float, watts: float) -> None:
    """Over the budget for longer than the guard window: step the clock down, rule the point
    (and the faster ones at its batch size) out, or stop at the lowest clock."""
    budget = loop._budget
    if budget is None or t < loop._settle_until:
        loop._over_since = None
        return
    if watts <= budget:
        loop._over_since = None
        return
    if loop._over_since is None:
        loop._over_since = t
        return
    if t - loop._over_since < loop.guard_window_s or loop.stop_reason is not None:
        return
    loop._over_since = None
    b, f = loop._batch, loop._freq
    for p in loop.points:  # this point and every faster one at this batch size
        if p.batch_size == b and p.freq_mhz >= f:
            loop.infeasible.add((b, p.freq_mhz))
    lower = sorted(
        p.freq_mhz
        for p in loop.points
        if p.batch_size == b and p.freq_mhz < f and (b, p.freq_mhz) not in loop.infeasible
    )
    event = {
        "t_s": t,
        "from_mhz": f,
        "to_mhz": lower[-1] if lower else None,
        "measured_w": watts,
        "budget_w": budget,
        "batch_size": b,
    }
    loop.guard_events.append(event)
    if not lower:
        loop._stop(
            "measured {:.2f} W over the {} budget at the lowest profiled clock {:g} MHz "
            "(batch {})".format(watts, _label(budget), f, b)
        )
        return
    loop._lock(lower[-1], t)
    if loop._pending is not None and (
        (loop._pending.batch_size, loop._pending.freq_mhz) in loop.infeasible
    ):
        loop._pending = None
    if loop.deadline_s is not None:
        loop._reselect = True  # at the step boundary: the deadline point without these
        over = loop._point(b, f)
        if over is not None and over.peak_power_w == over.peak_power_w:  # not NaN
            loop.rail_excess_w = max(loop.rail_excess_w, watts - over.guard_peak_w)
    open_segment(loop, t, REASON_GUARD)
    loop._note(
        "guard: {:.2f} W over {} at {:g} MHz (batch {}); stepped down to {:g} MHz".format(
            watts, _label(budget), f, b, lower[-1]
        )
    )
