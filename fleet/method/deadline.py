"""The deadline objective's arithmetic, once, for the board and the host.

Why it lives in the kernel: the closed loop (``closedloop.py``) re-selects on the board at every
budget change, guard exclusion and drift refresh, and with ``objective = "deadline"`` each of
those choices must be the deadline point for the *remaining* work and the *remaining* time; the
board may run Python 3.6 without the coordinator's package. The host (``fleet.core.deadline``: the
direct engine, the Flower client, the what-if sweep) imports these functions rather than keeping
a second copy, so a board and a simulation of it choose alike (docs/architecture.md, fleet
objectives).

The rule: a point is costed for the whole work (``Rate``: seconds and joules from 0 to the
target at its batch size's samples-to-accuracy). At step ``k`` of a budget schedule, with the
clock at ``clock_s`` and the fraction ``done`` of the target reached, a candidate is priced as
"run it until the step ends, then the fastest point under each later budget" (``finish``).
Among the candidates whose plan meets the deadline, the least energy wins (ties: earlier finish,
lower peak, lower clock, smaller batch); if none meets it, the fastest plan, and the device is
late. Progress is a *fraction* of the target, so a batch switch from b to b' leaves
``(1 - done) x N(b')`` samples to go.

Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from fleet.method.point import Point, tie_peak
from fleet.method.selection import ChooseError, allowed, choose

REL_TOL = 1e-9  # a predicted finish this close to the deadline meets it (summed segments)
DONE = 1.0 - 1e-12  # fraction of the target that counts as reached
_INF = float("inf")
_SCHEDULED = object()  # choose_deadline: take the running step's budget from the schedule

_RateFields = NamedTuple(
    "_RateFields",
    [
        ("point", Point),
        ("samples", float),  # samples-to-accuracy at this batch size
        ("full_time_s", float),
        ("full_energy_j", float),
    ],
)


class Rate(_RateFields):
    """A point costed for the whole work: seconds and joules to go from 0 to the target."""

    __slots__ = ()

    def key(self) -> Tuple[float, float, float, int]:
        """The time objective's order: time, peak (unmeasured last), clock, batch."""
        p = self.point
        return (self.full_time_s, tie_peak(p), p.freq_mhz, p.batch_size)


# (rate, late, predicted finish on the device's clock, predicted energy for the remaining work)
Pick = Tuple[Rate, bool, float, float]


def meets(finish_s: float, deadline_s: float) -> bool:
    """A finish (predicted or actual) meets the deadline, within ``REL_TOL``."""
    return finish_s <= deadline_s * (1.0 + REL_TOL)


def rate_of(point: Point, samples: float) -> Rate:
    """Cost ``point`` for the whole work (``samples`` to the target at its batch size)."""
    t = point.time_per_batch_s / point.batch_size * samples
    return Rate(point, samples, t, point.mean_power_w * t)


def check_deadline_s(value: Any, where: str = "deadline_s") -> float:
    """A deadline is a positive, finite number of seconds; anything else is a ChooseError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ChooseError("{}: expected a number of seconds, got {!r}".format(where, value))
    d = float(value)
    if not math.isfinite(d) or d <= 0:
        raise ChooseError(
            "{}: the deadline must be a positive number of seconds, got {}".format(where, d)
        )
    return d


def check_power(points: Sequence[Point], source: str = "profile") -> None:
    """The deadline objective prices energy: a point without power cannot be costed."""
    if any(math.isnan(p.mean_power_w) for p in points):
        raise ChooseError(
            "{}: the deadline objective needs power measurements; this profile is time-only".format(
                source
            )
        )


def finish(
    starts: Sequence[float],
    k: int,
    clock_s: float,
    done: float,
    first: Optional[Rate],
    later: Sequence[Optional[Rate]],
) -> Tuple[float, float]:
    """(finish time, energy) of the plan: ``first`` during step k, ``later[j]`` in step j > k.

    ``starts[j]`` is when step j begins; ``later[j]`` None means step j admits no point: the
    device pauses (no work, no power). Finish is ``inf`` when the schedule ends paused before
    the target. ``done`` at or past the target finishes now.
    """
    t, d, e = clock_s, min(done, 1.0), 0.0
    if d >= DONE:
        return t, e
    n = len(starts)
    for j in range(k, n):
        end = starts[j + 1] if j + 1 < n else _INF
        if starts[j] > t:
            t = starts[j]
        rate = first if j == k else later[j]
        if rate is None:
            t = end
            continue
        need = (1.0 - d) * rate.full_time_s
        run = need if need < end - t else end - t
        e += rate.point.mean_power_w * run
        d += run / rate.full_time_s
        t += run
        if d >= DONE:
            return t, e
    return _INF, e


def choose_among(
    candidates: Sequence[Rate],
    starts: Sequence[float],
    k: int,
    clock_s: float,
    done: float,
    deadline_s: float,
    later: Sequence[Optional[Rate]],
) -> Optional[Pick]:
    """The deadline choice at step k among ``candidates`` (the points feasible now), or None.

    Least predicted energy among the plans that meet the deadline (ties: finish, peak, clock,
    batch); else the fastest plan, late (ties: peak, clock, batch).
    """
    if not candidates:
        return None
    best_ok = None  # type: Optional[Tuple[Tuple[float, ...], Rate, float, float]]
    best_any = None  # type: Optional[Tuple[Tuple[float, ...], Rate, float, float]]
    for r in candidates:
        f, e = finish(starts, k, clock_s, done, r, later)
        tie = r.key()[1:]
        if meets(f, deadline_s):
            key = (e, f) + tie
            if best_ok is None or key < best_ok[0]:
                best_ok = (key, r, f, e)
        key_any = (f,) + tie
        if best_any is None or key_any < best_any[0]:
            best_any = (key_any, r, f, e)
    if best_ok is not None:
        return best_ok[1], False, best_ok[2], best_ok[3]
    assert best_any is not None
    return best_any[1], True, best_any[2], best_any[3]


# ------------------------------------------------------------------------- the board's LUT


def feasible_rates(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> List[Rate]:
    """Every allowed point that fits the budget, costed (``choose.allowed``)."""
    return [rate_of(p, n) for p, n in allowed(points, efficiency, budget_w, exclude, max_batch)]


def fastest_rate(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Optional[Rate]:
    """The time objective's choice under one budget, costed; None when nothing fits."""
    p = choose(points, efficiency, budget_w, "time", exclude, max_batch)
    return None if p is None else rate_of(p, efficiency[p.batch_size])


def step_at(starts: Sequence[float], t_s: float) -> int:
    """The index of the schedule step running at ``t_s`` (the last one started)."""
    k = 0
    for j, s in enumerate(starts):
        if s <= t_s:
            k = j
    return k


def choose_deadline(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    schedule: Sequence[Tuple[float, Optional[float]]],
    clock_s: float,
    done: float,
    deadline_s: float,
    budget_w: Any = _SCHEDULED,
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Optional[Pick]:
    """The board's deadline choice now: the step of ``schedule`` running at ``clock_s``, the
    remaining work ``1 - done``, the remaining time to ``deadline_s``.

    ``schedule``: (start s, watts) steps; a fixed budget or a live budget file is one step from
    0 s (the current budget is assumed to hold). ``budget_w`` overrides the running step's
    budget (the loop's budget of record, which may trail the schedule by one power sample;
    None there means unlimited). None when no allowed point fits.
    """
    starts, k, later = _look_ahead(points, efficiency, schedule, clock_s, exclude, max_batch)
    now_budget = schedule[k][1] if budget_w is _SCHEDULED else budget_w
    candidates = feasible_rates(points, efficiency, now_budget, exclude, max_batch)
    return choose_among(candidates, starts, k, clock_s, done, deadline_s, later)


def finish_at(
    point: Point,
    points: Sequence[Point],
    efficiency: Dict[int, float],
    schedule: Sequence[Tuple[float, Optional[float]]],
    clock_s: float,
    done: float,
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Tuple[float, float]:
    """(finish, energy) predicted for running ``point`` from now, with the same look-ahead: the
    closed loop's check that the running point still meets the deadline."""
    n = efficiency.get(point.batch_size)
    if not n:
        return _INF, _INF
    starts, k, later = _look_ahead(points, efficiency, schedule, clock_s, exclude, max_batch)
    return finish(starts, k, clock_s, done, rate_of(point, n), later)


def _look_ahead(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    schedule: Sequence[Tuple[float, Optional[float]]],
    clock_s: float,
    exclude: Optional[Set[Tuple[int, float]]],
    max_batch: Optional[int],
) -> Tuple[List[float], int, List[Optional[Rate]]]:
    """The step starts, the running step and the fastest rate of every later step."""
    starts = [float(t) for t, _ in schedule]
    k = step_at(starts, clock_s)
    later = [
        None if j <= k else fastest_rate(points, efficiency, w, exclude, max_batch)
        for j, (_, w) in enumerate(schedule)
    ]  # type: List[Optional[Rate]]
    return starts, k, later


def fastest_finish_from(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    schedule: Sequence[Tuple[float, Optional[float]]],
    clock_s: float,
    done: float,
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Optional[float]:
    """The earliest the device can reach the target from here (its fastest point under every
    step from now on): what a learning device reports for the coordinator's re-plan. None when
    the running step admits nothing or the schedule ends first."""
    starts, k, later = _look_ahead(points, efficiency, schedule, clock_s, exclude, max_batch)
    now = fastest_rate(points, efficiency, schedule[k][1], exclude, max_batch)
    if now is None:
        return None
    f, _ = finish(starts, k, clock_s, done, now, later)
    return f if f < _INF else None
