"""Algorithm 1 / eq. 4: pick the (batch size, frequency) that reaches the target soonest.

For every batch size keep the feasible profiled points (measured peak within budget), predict
time-to-accuracy as ``time_per_sample(b, f) x N_s_acc(b)`` (eq. 2, with N from the efficiency
vector), and take the argmin. The ``energy`` objective predicts ``mean_power x time`` instead and
so may pick a slower, cooler point. Ties break deterministically: lower peak power, then lower
frequency, then smaller batch.

Selection is asked many times per profile (every budget in a comparison, every budget change in
a schedule, thousands of simulated devices sharing a reference profile), so ``SelectionIndex``
sorts each batch size's points by peak power once and keeps a running best; a query is then one
binary search per batch size: O(|B| log |F|) instead of O(|B| x |F|), exact without assuming
power is monotone in the frequency.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Any, Protocol

from fleet.budgets.codec import budget_limit, check_budget
from fleet.common.errors import InfeasibleError, InputError
from fleet.core.choice import Choice, common_batches, format_batches, make_choice
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import Objective, get_objective
from fleet.core.profile import Point, Profile, feasible, require_feasible


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


def _tie_key(value: float, p: Point) -> tuple[float, float, float, int]:
    peak = p.guard_peak_w if not math.isnan(p.peak_power_w) else math.inf
    return (value, peak, p.freq_mhz, p.batch_size)


class SelectionIndex:
    """Per batch size: points sorted by (peak, freq) with a running best for each objective.

    The running best of an objective is built on first use (so an objective registered later
    costs nothing until asked for), and the baselines' safe cap is memoised per budget: a
    device round asks both many times for the same profile.
    """

    def __init__(self, profile: Profile):
        self.profile = profile
        self._peaks: dict[int, list[float]] = {}
        self._sorted: dict[int, list[Point]] = {}
        self._best: dict[str, dict[int, list[Point]]] = {}
        self._caps: dict[float | None, float | InfeasibleError] = {}
        for p in profile.points:
            self._sorted.setdefault(p.batch_size, []).append(p)
        for b, pts in self._sorted.items():
            pts.sort(key=lambda p: (_peak(p), p.freq_mhz))
            self._peaks[b] = [_peak(p) for p in pts]
        self.batch_sizes = sorted(self._sorted)
        self.has_power = profile.has_power
        self._min_peak = min(pk[0] for pk in self._peaks.values()) if self._peaks else math.inf
        self._max_peak_at = max_peak_by_freq(profile.points)

    def _running_best(self, obj: Objective) -> dict[int, list[Point]]:
        best = self._best.get(obj.name)
        if best is None:
            best = {}
            for b, pts in self._sorted.items():
                run: list[Point] = []
                for p in pts:
                    run.append(p if not run or obj.cost(p) < obj.cost(run[-1]) else run[-1])
                best[b] = run
            self._best[obj.name] = best
        return best

    def best_point(self, batch_size: int, budget_w: float, objective: str = "time") -> Point | None:
        """The cheapest point of this batch size whose peak fits the budget, or None."""
        peaks = self._peaks.get(batch_size)
        if not peaks:
            return None
        k = self._fitting(batch_size, budget_w)
        return self._running_best(get_objective(objective))[batch_size][k - 1] if k else None

    def _fitting(self, batch_size: int, budget: float) -> int:
        """How many of this batch size's points (sorted by peak) fit the budget."""
        peaks = self._peaks[batch_size]
        return len(peaks) if math.isinf(budget) else bisect.bisect_right(peaks, budget)

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
                for p in self._sorted[b][: self._fitting(b, budget)]
            ]
            picked = obj.pick(cands, context) if cands else None
            if picked is None:
                raise _no_candidate(self.profile, eff, budget_w)
            return picked
        best: tuple | None = None
        running = self._running_best(obj)
        for b in batches:
            k = self._fitting(b, budget)
            if not k:
                continue
            p = running[b][k - 1]
            key = _tie_key(obj.cost(p) * reached[b], p)
            if best is None or key < best[0]:
                best = (key, p)
        if best is None:
            raise _no_candidate(self.profile, eff, budget_w)
        return make_choice(best[1], reached[best[1].batch_size], method, objective)


def _peak(p: _HasPeak) -> float:
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


def select_brute_force(
    profile: Profile, eff: Efficiency, budget_w: float | None, objective: str = "time"
) -> Choice:
    """The reference: scan every (b, f) point. Kept for tests and the benchmark."""
    obj = _objective_for(profile, objective, {})
    budget = budget_limit(budget_w, "budget")
    require_feasible(profile, budget_w)
    reached = eff.reached
    best: tuple | None = None
    for p in profile.points:
        if p.batch_size not in reached or not feasible(p, budget):
            continue
        key = _tie_key(obj.cost(p) * reached[p.batch_size], p)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        raise _no_candidate(profile, eff, budget_w)
    return make_choice(best[1], reached[best[1].batch_size], "brute-force", objective)


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
        if p.batch_size == batch_size and p.freq_mhz <= cap_mhz and feasible(p, budget)
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
