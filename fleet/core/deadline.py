"""The deadline objective: finish with the round, not before it, on the least energy.

In a fleet round the slowest device sets the round time; a device that races at its fastest
clock and then waits has spent energy for nothing (docs/architecture.md, fleet objectives).
Under the deadline objective each device picks, among the profiled points feasible under its
budget, the one with the least predicted energy whose predicted finish meets the round
deadline; if none meets it, the fastest point, and the device is ``late``. Predictions are the
method's own (eq. 2 with the shipped samples-to-accuracy, energy = mean power x time), so the
choice can be made on the device before training, exactly like the time objective's.

Budget schedules (a budget that changes on the virtual clock) are handled by re-selecting at
every step against the *remaining* deadline, with a look-ahead that keeps the choice honest:
a candidate for the current step is costed as "run this point until the step ends, then run
the time objective's fastest point under each later budget". A candidate meets the deadline
only if that plan does. Because the fastest plan is always one of the next step's candidates
and predictions are consistent, a device that was on time under prediction stays on time at
every later step; a budget drop that the look-ahead already priced in never makes it late.
Progress carries across a change of batch size as the fraction of the target reached, as on
the virtual clock (``fleet.rounds.virtual_clock``).

Everything here is pure (points, efficiency, budget or schedule, deadline -> choice), so the
direct engine, the Flower client and the what-if sweep call the same code; the objective
registry's ``deadline`` entry (``fleet.core.objectives``) plugs it into the device round. The
arithmetic itself (``Rate``, the plan's ``finish``, the per-step choice ``choose_among``) is the
agent's (``fleet/method/deadline.py``, Python 3.6), which the board's closed loop runs at every
re-selection; this module adds the host's ``RateTable`` (a budget query is a binary search, which
the 1,000-device what-if sweep needs) and the fleet's planning.
The fleet-level part is ``plan_deadline``: given every device's fastest predicted finish, the
deadline is the slowest of them (what the coordinator does in the planning exchange).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fleet.core.choice import Choice, make_choice
from fleet.core.efficiency import Efficiency
from fleet.method.budget import BudgetStep, budget_limit
from fleet.method.deadline import Rate, check_deadline_s, check_power, choose_among, meets, rate_of
from fleet.method.deadline import finish as finish_from
from fleet.method.point import Point
from fleet.method.selection import ChooseIndex


@dataclass(frozen=True)
class DeadlineChoice:
    """One step's choice: the point, whether it misses the deadline, and what it predicts."""

    choice: Choice
    late: bool
    predicted_finish_s: float  # on the device's clock, with the look-ahead over the schedule
    predicted_energy_j: float  # for the remaining work, same plan
    deadline_s: float


class RateTable:
    """A profile's points costed with one efficiency, indexed by peak power.

    A budget query is a prefix (binary search on the peaks) and the fastest point under a
    budget the kernel's ``ChooseIndex.choose`` (eq. 4, time objective): the what-if sweep asks
    thousands of budgets of a handful of (profile, efficiency) pairs.
    """

    def __init__(self, all_rates: Sequence[Rate]):
        self.rates = list(all_rates)
        self._rate = {id(r.point): r for r in self.rates}  # the index returns these points
        self._samples = {r.point.batch_size: r.samples for r in self.rates}
        self._index = ChooseIndex([r.point for r in self.rates])

    def feasible(self, budget_w: float | None) -> Sequence[Rate]:
        """Every rate whose point fits the budget (the kernel's ``feasible_rates``)."""
        budget = budget_limit(budget_w)
        ix = self._index
        return [
            self._rate[id(p)] for b in ix.batch_sizes for p in ix.sorted[b][: ix.fitting(b, budget)]
        ]

    def fastest(self, budget_w: float | None) -> Rate | None:
        """The time objective's choice under one budget (the kernel's ``fastest_rate``)."""
        p = self._index.choose(self._samples, budget_limit(budget_w), "time")
        return None if p is None else self._rate[id(p)]


_TABLES: dict[tuple, RateTable] = {}


def rates(points: Sequence[Point], eff: Efficiency) -> RateTable:
    """Cost every point whose batch size reached the target in the shipped efficiency.

    Tables are kept per (points, samples-to-accuracy) content, so devices sharing a reference
    profile and the shipped efficiency share one table whatever their budgets.
    """
    reached = eff.reached
    key = (tuple(points), tuple(reached.items()))
    table = _TABLES.get(key)
    if table is not None:
        return table
    out = []
    for p in points:
        n = reached.get(p.batch_size)
        if n is None:
            continue
        out.append(rate_of(p, n))
    if len(_TABLES) >= 256:
        _TABLES.clear()
    table = _TABLES[key] = RateTable(out)
    return table


def feasible_rates(table: RateTable, budget_w: float | None) -> Sequence[Rate]:
    """Points whose measured peak fits the budget (an unmeasured peak fits only no limit)."""
    return table.feasible(budget_w)


def fastest(table: RateTable, budget_w: float | None) -> Rate | None:
    """The time objective's choice under one budget (same tie-break), or None."""
    return table.fastest(budget_w)


def finish(
    steps: Sequence[BudgetStep],
    k: int,
    clock_s: float,
    done: float,
    first: Rate | None,
    later: Sequence[Rate | None],
) -> tuple[float, float]:
    """(finish time, energy) of the plan: ``first`` during step k, ``later[j]`` in step j > k.

    ``later[j]`` None means step j admits no point: the device pauses (no work, no power).
    Finish is ``inf`` when the schedule ends paused before the target.
    """
    return finish_from(_starts(steps), k, clock_s, done, first, later)


def _starts(steps: Sequence[BudgetStep]) -> list[float]:
    return [s.at_s for s in steps]


def choose_step(
    all_rates: RateTable,
    steps: Sequence[BudgetStep],
    k: int,
    clock_s: float,
    done: float,
    deadline_s: float,
    later: Sequence[Rate | None] | None = None,
) -> tuple[Rate, bool, float, float] | None:
    """The deadline objective at step k of a schedule: (rate, late, finish, energy) or None.

    None when step k's budget admits no point (the device pauses). ``later`` is the fastest
    rate per step (``fastest_per_step``); pass it when calling for many steps.
    """
    fits = feasible_rates(all_rates, steps[k].budget_w)
    if not fits:
        return None
    if later is None:
        later = fastest_per_step(all_rates, steps)
    return choose_among(fits, _starts(steps), k, clock_s, done, deadline_s, later)


def fastest_per_step(all_rates: RateTable, steps: Sequence[BudgetStep]) -> list[Rate | None]:
    return [fastest(all_rates, s.budget_w) for s in steps]


def select_deadline(
    points: Sequence[Point],
    eff: Efficiency,
    budget_w: float | None,
    deadline_s: float,
    done: float = 0.0,
    clock_s: float = 0.0,
    source: str = "<profile>",
) -> DeadlineChoice | None:
    """One budget: least predicted energy among feasible points finishing by ``deadline_s``.

    ``done`` is the fraction of the target already reached and ``clock_s`` the device's clock
    (both 0 at the start of a round). None when no point fits the budget. If no point meets the
    deadline, the fastest feasible point with ``late=True``.
    """
    return select_deadline_schedule(
        points, eff, (BudgetStep(0.0, budget_w),), deadline_s, 0, clock_s, done, source
    )


def select_deadline_schedule(
    points: Sequence[Point],
    eff: Efficiency,
    steps: Sequence[BudgetStep],
    deadline_s: float,
    k: int = 0,
    clock_s: float = 0.0,
    done: float = 0.0,
    source: str = "<profile>",
) -> DeadlineChoice | None:
    """Step k of a budget schedule, with the look-ahead described in the module docstring."""
    deadline = check_deadline_s(deadline_s)
    all_rates = rates(points, eff)
    check_power([r.point for r in all_rates.rates], source)
    got = choose_step(all_rates, steps, k, clock_s, done, deadline)
    if got is None:
        return None
    r, late, f, e = got
    return DeadlineChoice(_as_choice(r), late, f, e, deadline)


def _as_choice(r: Rate) -> Choice:
    return make_choice(r.point, r.samples, "ours", "deadline")


class DeadlineChooser:
    """The deadline objective's per-step chooser for the device round
    (``fleet.rounds.device_round``).

    Called with (step index, clock, fraction done) it returns the step's Choice, or None when
    the step's budget admits nothing. ``late`` is the planned choice's verdict (step 0: what the
    coordinator learns before training); a device that later falls behind its prediction
    (its data needs more samples than the shipped estimate) switches to its fastest point and
    records when in ``behind_at_s``. The row's status is what happened (``verdict``): ``late``
    when the device reached the target after the deadline, whatever the plan said.
    """

    def __init__(
        self,
        points: Sequence[Point],
        eff: Efficiency,
        steps: Sequence[BudgetStep],
        deadline_s: float,
        source: str = "<profile>",
    ):
        self.deadline_s = check_deadline_s(deadline_s)
        self.steps = tuple(steps)
        self.rates = rates(points, eff)
        check_power([r.point for r in self.rates.rates], source)
        self.later = fastest_per_step(self.rates, self.steps)
        self.late = False
        self.predicted_finish_s: float | None = None  # planned at the start of the round
        self.behind_at_s: float | None = None  # when the device fell behind mid-round

    def __call__(self, k: int, clock_s: float, done: float) -> Choice | None:
        got = choose_step(self.rates, self.steps, k, clock_s, done, self.deadline_s, self.later)
        if got is None:
            return None
        r, late, f, _ = got
        if k == 0:
            self.predicted_finish_s, self.late = f, late
        elif late and not self.late and self.behind_at_s is None:
            self.behind_at_s = clock_s
        return _as_choice(r)

    def verdict(self, finish_s: float | None = None) -> tuple[str | None, str]:
        """``late`` when the device finished after the deadline (``finish_s``, its actual
        clock at the target) or its planned choice already missed it; else a note if it fell
        behind mid-round. What happened decides, not what was predicted: a device whose data
        needs more samples than shipped finishes late although its plan was on time."""
        after = (
            finish_s is not None
            and math.isfinite(finish_s)
            and not meets(finish_s, self.deadline_s)
        )
        if self.late:
            return "late", (
                f"predicted finish {self.predicted_finish_s:.0f} s misses the deadline "
                f"{self.deadline_s:.0f} s; ran its fastest point"
            )
        if after:
            planned = self.predicted_finish_s
            why = f"finished at {finish_s:.0f} s, after the {self.deadline_s:.0f} s deadline" + (
                f" (planned {planned:.0f} s)" if planned is not None else ""
            )
            if self.behind_at_s is not None:
                why += f"; fell behind at {self.behind_at_s:.0f} s and ran its fastest point"
            return "late", why
        if self.behind_at_s is not None:
            return None, (
                f"fell behind the {self.deadline_s:.0f} s deadline at {self.behind_at_s:.0f} s "
                "(slower than predicted); ran its fastest point from then"
            )
        return None, ""


def pick_deadline(candidates: Sequence[Choice], deadline_s: object) -> Choice | None:
    """One budget, no schedule: the kernel's ``choose_among`` on one step from 0 s (least
    predicted energy among candidates whose predicted time meets the deadline, else the
    fastest; the device is then late)."""
    deadline = check_deadline_s(deadline_s)
    if not candidates:
        return None
    costed = [
        rate_of(
            Point(c.batch_size, c.freq_mhz, c.time_per_batch_s, c.peak_power_w, c.mean_power_w),
            c.samples_to_accuracy,
        )
        for c in candidates
    ]
    got = choose_among(costed, [0.0], 0, 0.0, 0.0, deadline, [None])
    if got is None:
        return None
    return next(c for c, r in zip(candidates, costed, strict=True) if r is got[0])
