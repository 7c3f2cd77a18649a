"""What a profile measured, and whether a selection from it can be trusted at a budget.

A profile made by the staircase for 5 W stops each batch size one step above 5 W; used at 7 W it
answers from the points it has and quietly misses faster ones it never probed (issue 11: 16 @
691.2 MHz instead of 16 @ 921.6 MHz, 32 % slower). So a profile carries its intended grid and
how it was made (``#`` comment lines ``grid_batch_sizes=``, ``grid_freqs=``, ``plan=``,
``budget_w=``; rows may say ``source=predicted``), and :func:`missing_points` asks, for a
choice at a budget: is there a grid point the file lacks that *could* fit the budget and beat
the choice? It uses only what power and time do along the knob (power does not fall and time
does not rise as the knob goes up), never a model. The CLI refuses such a selection (exit 2);
the device round can profile exactly the returned points instead. See docs/architecture.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fleet.common.errors import InputError
from fleet.core.choice import Choice
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.method.budget import BudgetError, parse_budget
from fleet.method.profile_io import PREDICTED, ProfileFormatError, cell_number, read_rows

Key = tuple[int, float]
MEASURED_KNOB = "sm_clock_measured"  # the header's knob= when freq_mhz is a measured clock


class CoverageError(InputError):
    """A selection could be beaten by points the profile never measured (CLI: exit 2)."""


@dataclass
class Coverage:
    """The intended grid of a profile, which of its points exist, and which were predicted."""

    source: str
    batch_sizes: list[int]
    knobs: list[float]
    present: set[Key] = field(default_factory=set)  # rows in the file, any status
    predicted: set[Key] = field(default_factory=set)  # rows with source=predicted
    plan: str | None = None  # "grid", "staircase", "predict", or unknown
    staircase_budget_w: float | None = None
    # The knob was not set but measured (NVML current clocks: each row's freq_mhz is the clock
    # the card chose): the grid is one column, a batch size with any row is covered.
    measured_knob: bool = False
    # Each row's peak_forecast_w where it records one (measured points): the budget statistic's
    # highest value expected over ten times the point (fleet/method/power_window.py).
    forecast: dict[Key, float] = field(default_factory=dict)

    def longer_run_over(self, batch_size: int, knob: float, budget: float | None) -> float | None:
        """The point's ``peak_forecast_w`` where it lies above ``budget``, else None. Why: a
        point whose own peak fits right under the budget may still, over a longer run, reach
        above it (the highest of a noisy statistic grows with the time watched); a user
        choosing it should hear so before the run, not only in its report."""
        value = self.forecast.get((int(batch_size), float(knob)))
        if budget is None or value is None or not value > budget:
            return None
        return value

    def is_predicted(self, batch_size: int, knob: float) -> bool:
        return (int(batch_size), float(knob)) in self.predicted

    def lacking(self) -> list[Key]:
        """Grid points the file has no row for."""
        if self.measured_knob:
            have = {b for b, _f in self.present}
            label = self.knobs[0] if self.knobs else 0.0
            return [(b, label) for b in self.batch_sizes if b not in have]
        return [(b, f) for b in self.batch_sizes for f in self.knobs if (b, f) not in self.present]


def _meta(comments: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in comments:
        if "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), value.strip())
    return out


def _floats(raw: str | None) -> list[float]:
    if not raw:
        return []
    try:
        return sorted({float(x) for x in raw.split(",") if x.strip()})
    except ValueError:
        return []


def read_coverage(path: str) -> Coverage:
    """Coverage of a profile CSV: its rows plus the grid and plan its comments record.

    Without a recorded grid, the grid is the file's own batch sizes x knobs (a rectangle: a
    point missing from it was never measured).
    """
    try:
        _header, rows, comments = read_rows(str(path))
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    present: set[Key] = set()
    predicted: set[Key] = set()
    forecast: dict[Key, float] = {}
    for _lineno, row in rows:
        try:
            key = (int(float(row["batch_size"])), float(row["freq_mhz"]))
        except (KeyError, ValueError):
            continue  # load_profile reports malformed rows with their line number
        present.add(key)
        value = cell_number(row.get("peak_forecast_w"))
        if value is not None and math.isfinite(value) and value > 0:
            forecast[key] = value
        if row.get("source") == PREDICTED:  # read_rows checked and lowercased it
            predicted.add(key)
    meta = _meta(comments)
    bs = [int(b) for b in _floats(meta.get("grid_batch_sizes"))] or sorted({k[0] for k in present})
    fs = _floats(meta.get("grid_freqs")) or sorted({k[1] for k in present})
    budget = None
    if meta.get("plan") == "staircase":
        try:
            budget = parse_budget(meta.get("budget_w", ""), "budget_w")
        except BudgetError:
            budget = None
    measured = meta.get("knob") == MEASURED_KNOB
    if measured:
        fs = _floats(meta.get("grid_freqs"))[:1]
    plan = meta.get("plan")
    return Coverage(str(path), bs, fs, present, predicted, plan, budget, measured, forecast)


def _bounds(profile: Profile, b: int, f: float) -> tuple[float, float, float]:
    """(peak, mean) power lower bounds and a time lower bound at an unmeasured (b, f).

    Power does not fall as the knob rises, so any point of the same batch size at a lower knob
    bounds it from below; time does not rise, so a point at a higher knob bounds its time.
    Nothing known: 0.
    """
    peak_lb = mean_lb = 0.0
    time_lb = 0.0
    faster = []
    for p in profile.points:
        if p.batch_size != b:
            continue
        if p.freq_mhz < f:
            if not math.isnan(p.peak_power_w):
                peak_lb = max(peak_lb, p.peak_power_w)
            if not math.isnan(p.mean_power_w):
                mean_lb = max(mean_lb, p.mean_power_w)
        elif p.freq_mhz > f:
            faster.append(p.time_per_batch_s)
    if faster:
        time_lb = max(faster)  # the nearest higher knob: the tightest bound
    return peak_lb, mean_lb, time_lb


def missing_points(
    profile: Profile,
    coverage: Coverage,
    eff: Efficiency,
    budget_w: float | None,
    choice: Choice | None,
) -> list[Key]:
    """Grid points the profile lacks that could fit ``budget_w`` and beat ``choice``.

    ``choice`` None (nothing feasible was found) counts any point that could fit. Only batch
    sizes that reached the target in ``eff`` matter. Sorted by batch size, then knob.
    """
    budget = math.inf if budget_w is None else float(budget_w)
    reached = eff.reached
    out: list[Key] = []
    for b, f in coverage.lacking():
        if b not in reached:
            continue
        peak_lb, mean_lb, time_lb = _bounds(profile, b, f)
        if peak_lb > budget:
            continue
        if choice is not None:
            t_lb = time_lb / b * reached[b]
            if choice.objective == "time":
                cost_lb, best = t_lb, choice.predicted_time_s
            else:
                cost_lb, best = t_lb * mean_lb, choice.predicted_energy_j
            if cost_lb >= best:
                continue
        out.append((b, f))
    return out


def covered_budget(profile: Profile, coverage: Coverage) -> float:
    """The budget up to which the profile is known to be complete.

    A staircase profile covers the budget it was made for. Otherwise: the lowest power that
    any lacking point is known to reach (0 when a lacking point has nothing below it).
    """
    if coverage.staircase_budget_w is not None:
        return coverage.staircase_budget_w
    lows = [_bounds(profile, b, f)[0] for b, f in coverage.lacking()]
    return min(lows) if lows else math.inf


def check_coverage(
    profile: Profile,
    coverage: Coverage,
    eff: Efficiency,
    budget_w: float | None,
    choice: Choice | None,
) -> None:
    """Raise CoverageError (one line naming the covered budget) if points the profile lacks
    could be feasible and better than ``choice`` at ``budget_w``."""
    gaps = missing_points(profile, coverage, eff, budget_w, choice)
    if not gaps:
        return
    if choice is not None:  # name a point of the chosen batch size first: the likeliest win
        gaps.sort(key=lambda k: (k[0] != choice.batch_size, -k[1]))
    b, f = gaps[0]
    label = "no budget" if budget_w is None else f"{budget_w:g} W"
    what = "a point"
    if choice is not None:
        what = f"the choice {choice.batch_size} @ {choice.freq_mhz:g}"
    cover = covered_budget(profile, coverage)
    if coverage.staircase_budget_w is not None:
        stair = coverage.staircase_budget_w
        if budget_w is None or budget_w > stair:
            head = f"made by the staircase for {stair:g} W, it covers budgets up to {stair:g} W"
        else:
            head = f"made by the staircase for {stair:g} W, it covers only that budget"
    elif cover > 0:
        head = f"it covers budgets up to {cover:g} W"
    else:
        head = "it lacks grid points at every budget"
    raise CoverageError(
        f"{coverage.source}: {head}; at {label} {len(gaps)} unmeasured point(s) such as "
        f"batch_size={b}, freq_mhz={f:g} could fit and beat {what}; re-profile at this budget "
        "or fill the grid with --predict"
    )
