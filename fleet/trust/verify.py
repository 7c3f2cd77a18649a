"""Verify before trusting: a choice that lands on a predicted point is probed before training.

A predicted point is a model's guess (``fleet.agent.prediction.predict``). Training for hours at a
point
that really draws more than the budget, or runs slower than predicted, is what the profile was
meant to prevent, so :func:`select_verified` measures the chosen point when it is predicted,
puts the measurement into the table and carries the deviation to the neighbouring predicted
points (``deviation.carry_deviation``), and selects again, until the choice is a measured point.
Pure apart from the ``measure`` callback, so the device round runs it against the board and
tests run it against a recorded table. See docs/architecture.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.agent.measure.deviation import carry_deviation
from fleet.common.errors import InfeasibleError
from fleet.core.choice import Choice
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import select
from fleet.method.point import Point
from fleet.method.profile_io import MEASURED, PREDICTED, VIRTUAL

Row = dict[str, Any]
MeasureFn = Callable[[int, float], Row]


@dataclass
class Correction:
    """One predicted point that was probed: what was predicted and what was measured."""

    batch_size: int
    freq_mhz: float
    predicted_time_s: float
    measured_time_s: float
    predicted_peak_w: float
    measured_peak_w: float
    reason: str  # "ok", "over budget", "slower", "over budget, slower"


@dataclass
class Verified:
    choice: Choice
    rows: list[Row]  # the table after corrections (probed points now measured)
    corrections: list[Correction] = field(default_factory=list)


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def probed(row: Row) -> Row:
    """A point just probed on the board, as a profile row: ``source=measured``, or ``virtual``
    when the board that measured it is a virtual one (its times are the host's: a probe there
    makes a point no more the board's than before)."""
    got = dict(row)
    got["source"] = VIRTUAL if got.get("source") == VIRTUAL else MEASURED
    return got


def profile_from_rows(rows: Sequence[Row], source: str = "<table>") -> Profile:
    """The selectable view of profile rows (ok rows with a time)."""
    points = []
    for r in rows:
        if str(r.get("status") or "ok").lower() != "ok":
            continue
        t = _num(r.get("time_per_batch_s"))
        if not t > 0:
            continue
        peak = _num(r.get("peak_power_w"))
        mean = _num(r.get("mean_power_w"))
        points.append(
            Point(
                int(_num(r["batch_size"])),
                _num(r["freq_mhz"]),
                t,
                peak,
                peak if math.isnan(mean) else mean,
                _num(r.get("peak_power_bound_w")),
            )
        )
    return Profile(points, source)


def _key(r: Row) -> tuple[int, float]:
    return int(_num(r["batch_size"])), _num(r["freq_mhz"])


def _near_miss(
    table: Sequence[Row], eff: Efficiency, budget: float, choice: Choice, margin: float
) -> tuple[int, float] | None:
    """The best predicted point that is predicted just over the budget (within ``margin``), or
    under it but with its upper bound (``peak_power_bound_w``) over it, yet would beat
    ``choice``: a prediction error of that size could be hiding a better point."""
    if math.isinf(budget) or margin <= 0:
        return None
    reached = eff.reached
    best = None
    for r in table:
        if r.get("source") != PREDICTED or str(r.get("status") or "ok").lower() != "ok":
            continue
        b, f = _key(r)
        peak, t = _num(r.get("peak_power_w")), _num(r.get("time_per_batch_s"))
        bound = _num(r.get("peak_power_bound_w"))
        straddles = peak <= budget < bound  # fits as predicted, not as bounded: probe it
        if b not in reached or not (budget < peak <= budget * (1 + margin) or straddles):
            continue
        cost = t / b * reached[b]
        if choice.objective == "energy":
            mean = _num(r.get("mean_power_w"))
            cost *= peak if math.isnan(mean) else mean
            ref = choice.predicted_energy_j
        else:
            ref = choice.predicted_time_s
        if cost < ref and (best is None or cost < best[0]):
            best = (cost, (b, f))
    return None if best is None else best[1]


def select_verified(
    rows: Sequence[Row],
    eff: Efficiency,
    budget_w: float | None,
    measure: MeasureFn,
    objective: str = "time",
    time_tol: float = 0.10,
    max_probes: int = 6,
    margin: float = 0.03,
) -> Verified:
    """Select; while the choice is a predicted row, probe it, correct the table, select again.

    ``measure(b, f)`` returns a measured profile row for that point. A probe that is over the
    budget or slower than predicted by more than ``time_tol`` is a correction (carried to the
    neighbouring predicted points); within both, the measured row simply replaces the
    prediction. Once the choice is measured, a predicted point that would beat it but is
    predicted over the budget by less than ``margin`` is probed too (a small prediction error
    must not hide the best point). Raises InfeasibleError when nothing is left or more than
    ``max_probes`` probes were needed.
    """
    table = [dict(r) for r in rows]
    budget = math.inf if budget_w is None else float(budget_w)
    corrections: list[Correction] = []
    for _ in range(max_probes + 1):
        choice = select(profile_from_rows(table), eff, budget_w, objective)
        key = (choice.batch_size, choice.freq_mhz)
        row = next(r for r in table if _key(r) == key)
        if row.get("source") != PREDICTED:
            near = _near_miss(table, eff, budget, choice, margin)
            if near is None:
                return Verified(choice, table, corrections)
            key, row = near, next(r for r in table if _key(r) == near)
        if len(corrections) >= max_probes:
            break
        got = probed(measure(*key))
        t_old, p_old = _num(row.get("time_per_batch_s")), _num(row.get("peak_power_w"))
        t_new, p_new = _num(got.get("time_per_batch_s")), _num(got.get("peak_power_w"))
        reasons = []
        if not math.isnan(p_new) and p_new > budget and not p_old > budget:
            reasons.append("over budget")
        if t_new > t_old * (1 + time_tol):
            reasons.append("slower")
        reason = ", ".join(reasons) or "ok"
        corrections.append(Correction(key[0], key[1], t_old, t_new, p_old, p_new, reason))
        if reasons:
            table = carry_deviation(table, [got], scale_measured=False)
        else:
            table = [got if _key(r) == key else r for r in table]
    raise InfeasibleError(
        f"verification: more than {max_probes} predicted points needed probing at "
        f"{'no budget' if budget_w is None else f'{budget_w:g} W'}; profile the grid instead"
    )
