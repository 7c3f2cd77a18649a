"""Algorithm 1 / eq. 4 on the host: a fast path of the kernel's ``fleet.method.selection.choose``.

The rule is the kernel's, written once (``fleet/method/selection.py``): per batch size the
cheapest feasible point per sample (ties: lower peak, lower frequency), then the argmin of
``cost_per_sample x N_s_acc(b)`` (ties: lower peak, lower frequency, smaller batch). This module
adds what the host needs around it: the objective registry's checks, the precise infeasibility
messages, and a ``Choice`` with the predictions.

Selection is asked many times per profile (every budget in a comparison, every budget change in
a schedule, thousands of simulated devices sharing a reference profile), so ``SelectionIndex``
sorts each batch size's points by (peak, frequency) once and keeps a running best per objective;
a query is then one binary search per batch size: O(|B| log |F|) instead of O(|B| x |F|), exact
without assuming power is monotone in the frequency. The running best of a prefix is exactly the
kernel's first stage on the points that fit (the first strictly cheaper point in peak order is
the argmin of (cost, peak, frequency)), and the second stage is the kernel's own key;
``tests/test_selection.py`` checks the two agree on random profiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from fleet.common.errors import InfeasibleError, InputError
from fleet.core.choice import Choice, common_batches, format_batches, make_choice
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import Objective, get_objective
from fleet.core.profile import Profile, require_feasible
from fleet.method.budget import budget_limit, check_budget
from fleet.method.point import Point
from fleet.method.selection import ChooseIndex, fits


def _objective_for(profile: Profile, name: str, context: dict[str, Any]) -> Objective:
    """The registered objective, checked against the profile and the caller's context."""
    obj = get_objective(name)
    if obj.needs_power and not profile.has_power:
        raise InputError(
            f"{profile.source}: the {name} objective needs power measurements; this profile "
            "is time-only"
        )
    missing = [k for k in obj.context if k not in context]
    if missing:
        raise InputError(f"the {name} objective needs {', '.join(missing)}")
    return obj


class SelectionIndex:
    """The kernel's ``ChooseIndex`` over one profile, plus the host's checks and memos.

    The running best of an objective is built on first use (so an objective registered later
    costs nothing until asked for), and the baselines' safe cap is memoised per budget: a
    device round asks both many times for the same profile.
    """

    def __init__(self, profile: Profile):
        self.profile = profile
        self.index = ChooseIndex(profile.points)
        self._caps: dict[float | None, float | InfeasibleError] = {}
        self.batch_sizes = self.index.batch_sizes
        self.has_power = profile.has_power
        peaks = self.index.peaks.values()
        self._min_peak = min(pk[0] for pk in peaks) if self.index.peaks else math.inf
        self._max_peak_at = max_peak_by_freq(profile.points)

    def best_point(self, batch_size: int, budget_w: float, objective: str = "time") -> Point | None:
        """The cheapest point of this batch size whose peak fits the budget, or None."""
        return self.index.best_point(batch_size, budget_w, get_objective(objective).cost)

    def safe_cap(self, budget_w: float | None) -> float:
        """The baselines' safe frequency cap for this profile alone, once per budget."""
        hit = self._caps.get(budget_w)
        if hit is None:
            try:
                hit = cap_from_peaks(self._max_peak_at, budget_w)
            except InfeasibleError as exc:
                hit = exc
            self._caps[budget_w] = hit
        if isinstance(hit, InfeasibleError):
            raise hit
        return hit

    def select(
        self,
        eff: Efficiency,
        budget_w: float | None,
        objective: str = "time",
        method: str = "ours",
        **context: Any,
    ) -> Choice:
        """Algorithm 1 over this profile; raises InfeasibleError when nothing fits.

        ``context`` is what an objective with parameters needs (``Objective.context``, e.g. a
        deadline in seconds); objectives without parameters ignore it.
        """
        obj = _objective_for(self.profile, objective, context)
        budget = budget_limit(budget_w, "budget")
        if budget < self._min_peak or (not math.isinf(budget) and not self.has_power):
            require_feasible(self.profile, budget_w)  # raises the precise message
        reached = eff.reached
        batches = [b for b in self.batch_sizes if b in reached]
        if not batches:
            common_batches(self.profile, eff)  # raises if nothing is shared
        if obj.pick is not None:
            cands = [
                make_choice(p, reached[b], method, objective)
                for b in batches
                for p in self.index.sorted[b][: self.index.fitting(b, budget)]
            ]
            picked = obj.pick(cands, context) if cands else None
            if picked is None:
                raise _no_candidate(self.profile, eff, budget_w)
            return picked
        best = self.index.choose(reached, budget, obj.cost)
        if best is None:
            raise _no_candidate(self.profile, eff, budget_w)
        return make_choice(best, reached[best.batch_size], method, objective)


def _peak(p: _HasPeak) -> float:
    """The safe cap's peak: a Point's ``tie_peak``; the calibration's plain rows
    (``simulations/devicemodel``) have no bound and are held to their measured peak."""
    return (
        getattr(p, "guard_peak_w", p.peak_power_w) if not math.isnan(p.peak_power_w) else math.inf
    )


def _no_candidate(profile: Profile, eff: Efficiency, budget_w: float | None) -> InfeasibleError:
    budget = "unlimited" if budget_w is None else f"{budget_w:g} W"
    return InfeasibleError(
        f"no batch size that reached the target in {eff.source} "
        f"({format_batches(list(eff.reached))}) has a point within {budget} in {profile.source}"
    )


def select(
    profile: Profile,
    eff: Efficiency,
    budget_w: float | None,
    objective: str = "time",
    method: str = "ours",
    **context: Any,
) -> Choice:
    """One-off selection (builds the index; reuse a SelectionIndex for many budgets)."""
    return SelectionIndex(profile).select(eff, budget_w, objective, method, **context)


# ------------------------------------------------------------------------------- baselines


class _HasPeak(Protocol):  # read-only: a Point (NamedTuple) and a Choice both have these
    @property
    def batch_size(self) -> int: ...

    @property
    def freq_mhz(self) -> float: ...

    @property
    def peak_power_w(self) -> float: ...


def max_peak_by_freq(points: Iterable[_HasPeak]) -> dict[float, _HasPeak]:
    """Per frequency, the point with the highest peak there (an unmeasured peak counts as +inf).

    One pass over the points: the safe cap is then a walk up the frequencies, O(F x B) in all
    instead of rescanning every point at every frequency.
    """
    worst: dict[float, _HasPeak] = {}
    for p in points:
        cur = worst.get(p.freq_mhz)
        if cur is None or _peak(p) > _peak(cur):
            worst[p.freq_mhz] = p
    return worst


def cap_from_peaks(worst_at: dict[float, _HasPeak], budget_w: float | None) -> float:
    """The highest frequency at or below which every point (of every frequency) fits."""
    freqs = sorted(worst_at)
    if budget_w is None:
        return freqs[-1]
    cap = None
    for f in freqs:
        if _peak(worst_at[f]) > budget_w:
            break
        cap = f
    if cap is None:
        low = worst_at[freqs[0]]
        raise InfeasibleError(
            f"no frequency cap keeps every point within {budget_w:g} W: at the lowest clock "
            f"{freqs[0]:g} MHz batch_size={low.batch_size} peaks at {low.peak_power_w:g} W"
        )
    return cap


def safe_frequency_cap(profiles: list[Profile], budget_w: float | None) -> float:
    """Baselines' cap: the highest frequency at or below which *every* profiled point fits.

    This is how the paper sets 307/614/921 MHz on the Nano: a clock cap that keeps any model at
    any batch size within the budget, the way a power-capping governor works. Pass several
    profiles (models) to get a fleet-wide cap. Raises InfeasibleError if even the lowest clock
    breaks the budget for some point. O(F x B) per call; ``SelectionIndex.safe_cap`` memoises
    it per budget for one profile.
    """
    return cap_from_peaks(
        max_peak_by_freq(p for prof in profiles for p in prof.points),
        check_budget("budget", budget_w),
    )


def _at_cap(profile: Profile, batch_size: int, cap_mhz: float, budget: float) -> Point | None:
    """The point a clock-capped governor would run: highest profiled frequency <= cap."""
    pts = [
        p
        for p in profile.points
        if p.batch_size == batch_size and p.freq_mhz <= cap_mhz and fits(p, budget)
    ]
    return max(pts, key=lambda p: p.freq_mhz) if pts else None


def capped_choice(
    profile: Profile, eff: Efficiency, b: int, cap: float, budget_w: float | None, method: str
) -> Choice:
    """Batch size ``b`` at the capped governor's clock, costed with ``eff`` (a baseline's run)."""
    p = _at_cap(profile, b, cap, budget_limit(budget_w))
    if p is None:
        raise InfeasibleError(
            f"{method}: batch_size={b} has no profiled point at or below the {cap:g} MHz cap "
            f"within the budget in {profile.source}"
        )
    return make_choice(p, eff.samples.get(b, math.nan), method, "time")
