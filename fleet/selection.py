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
from dataclasses import asdict, dataclass

from fleet.efficiency import Efficiency
from fleet.errors import InfeasibleError, InputError
from fleet.profile import Point, Profile, check_budget, feasible, require_feasible

OBJECTIVES = ("time", "energy")


@dataclass(frozen=True)
class Choice:
    """A selected operating point and what it is predicted to cost to reach the target."""

    batch_size: int
    freq_mhz: float
    time_per_batch_s: float
    peak_power_w: float
    mean_power_w: float
    samples_to_accuracy: float
    predicted_time_s: float
    predicted_energy_j: float
    method: str = "ours"
    objective: str = "time"

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and math.isnan(v):
                d[k] = None
        return d


def _per_sample_cost(p: Point, objective: str) -> float:
    if objective == "time":
        return p.time_per_batch_s / p.batch_size
    return p.mean_power_w * p.time_per_batch_s / p.batch_size


def predict(p: Point, samples: float) -> tuple[float, float]:
    """(time_s, energy_j) to process ``samples`` at point p: eq. 2 and mean power x time."""
    t = p.time_per_batch_s / p.batch_size * samples
    return t, p.mean_power_w * t


def make_choice(p: Point, samples: float, method: str, objective: str) -> Choice:
    t, e = predict(p, samples)
    return Choice(
        p.batch_size,
        p.freq_mhz,
        p.time_per_batch_s,
        p.peak_power_w,
        p.mean_power_w,
        samples,
        t,
        e,
        method,
        objective,
    )


def _check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


def _check_energy_needs_power(profile: Profile, objective: str) -> None:
    if objective == "energy" and not profile.has_power:
        raise InputError(
            f"{profile.source}: the energy objective needs power measurements; this profile "
            "is time-only"
        )


def _tie_key(value: float, p: Point) -> tuple[float, float, float, int]:
    peak = p.peak_power_w if not math.isnan(p.peak_power_w) else math.inf
    return (value, peak, p.freq_mhz, p.batch_size)


def common_batches(profile: Profile, eff: Efficiency) -> list[int]:
    """Batch sizes both profiled and estimated; an empty intersection is an input error."""
    common = sorted(set(profile.batch_sizes) & set(eff.batch_sizes))
    if not common:
        raise InputError(
            f"no batch size is in both the profile {profile.source} ({_fmt(profile.batch_sizes)}) "
            f"and the efficiency {eff.source} ({_fmt(eff.batch_sizes)})"
        )
    return common


def align(profile: Profile, eff: Efficiency) -> tuple[Profile, Efficiency, str | None]:
    """Restrict both to their common batch sizes; the note says what was dropped, if anything."""
    common = common_batches(profile, eff)
    only_eff = sorted(set(eff.batch_sizes) - set(common))
    only_prof = sorted(set(profile.batch_sizes) - set(common))
    parts = []
    if only_eff:
        parts.append(f"batch sizes {_fmt(only_eff)} of {eff.source} are not in the profile")
    if only_prof:
        parts.append(f"batch sizes {_fmt(only_prof)} of {profile.source} have no efficiency")
    note = "; ".join(parts) + f"; using {_fmt(common)}" if parts else None
    return profile.restrict(common), eff.restrict(common), note


def _fmt(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs) or "none"


class SelectionIndex:
    """Per batch size: points sorted by (peak, freq) with a running best for each objective."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self._peaks: dict[int, list[float]] = {}
        self._best: dict[str, dict[int, list[Point]]] = {o: {} for o in OBJECTIVES}
        by_batch: dict[int, list[Point]] = {}
        for p in profile.points:
            by_batch.setdefault(p.batch_size, []).append(p)
        for b, pts in by_batch.items():
            pts.sort(key=lambda p: (_peak(p), p.freq_mhz))
            self._peaks[b] = [_peak(p) for p in pts]
            for obj in OBJECTIVES:
                run: list[Point] = []
                for p in pts:
                    if not run or _per_sample_cost(p, obj) < _per_sample_cost(run[-1], obj):
                        run.append(p)
                    else:
                        run.append(run[-1])
                self._best[obj][b] = run
        self.batch_sizes = sorted(by_batch)
        self.has_power = profile.has_power
        self._min_peak = min(peaks[0] for peaks in self._peaks.values()) if by_batch else math.inf

    def best_point(self, batch_size: int, budget_w: float, objective: str = "time") -> Point | None:
        """The cheapest point of this batch size whose peak fits the budget, or None."""
        peaks = self._peaks.get(batch_size)
        if not peaks:
            return None
        k = len(peaks) if math.isinf(budget_w) else bisect.bisect_right(peaks, budget_w)
        return self._best[objective][batch_size][k - 1] if k else None

    def select(
        self,
        eff: Efficiency,
        budget_w: float | None,
        objective: str = "time",
        method: str = "ours",
    ) -> Choice:
        """Algorithm 1 over this profile; raises InfeasibleError when nothing fits."""
        _check_objective(objective)
        if objective == "energy" and not self.has_power:
            _check_energy_needs_power(self.profile, objective)
        budget = check_budget(budget_w)
        if budget < self._min_peak or (not math.isinf(budget) and not self.has_power):
            require_feasible(self.profile, budget_w)  # raises the precise message
        reached = eff.reached
        best: tuple | None = None
        batches = [b for b in self.batch_sizes if b in reached]
        if not batches:
            common_batches(self.profile, eff)  # raises if nothing is shared
        for b in batches:
            p = self.best_point(b, budget, objective)
            if p is None:
                continue
            value = _per_sample_cost(p, objective) * reached[b]
            key = _tie_key(value, p)
            if best is None or key < best[0]:
                best = (key, p)
        if best is None:
            raise _no_candidate(self.profile, eff, budget_w)
        return make_choice(best[1], reached[best[1].batch_size], method, objective)


def _peak(p: Point) -> float:
    return p.peak_power_w if not math.isnan(p.peak_power_w) else math.inf


def _no_candidate(profile: Profile, eff: Efficiency, budget_w: float | None) -> InfeasibleError:
    budget = "unlimited" if budget_w is None else f"{budget_w:g} W"
    return InfeasibleError(
        f"no batch size that reached the target in {eff.source} "
        f"({_fmt(list(eff.reached))}) has a point within {budget} in {profile.source}"
    )


def select(
    profile: Profile,
    eff: Efficiency,
    budget_w: float | None,
    objective: str = "time",
    method: str = "ours",
) -> Choice:
    """One-off selection (builds the index; reuse a SelectionIndex for many budgets)."""
    return SelectionIndex(profile).select(eff, budget_w, objective, method)


def select_brute_force(
    profile: Profile, eff: Efficiency, budget_w: float | None, objective: str = "time"
) -> Choice:
    """The reference: scan every (b, f) point. Kept for tests and the benchmark."""
    _check_objective(objective)
    _check_energy_needs_power(profile, objective)
    budget = check_budget(budget_w)
    require_feasible(profile, budget_w)
    reached = eff.reached
    best: tuple | None = None
    for p in profile.points:
        if p.batch_size not in reached or not feasible(p, budget):
            continue
        key = _tie_key(_per_sample_cost(p, objective) * reached[p.batch_size], p)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        raise _no_candidate(profile, eff, budget_w)
    return make_choice(best[1], reached[best[1].batch_size], "brute-force", objective)


# ------------------------------------------------------------------------------- baselines


def safe_frequency_cap(profiles: list[Profile], budget_w: float | None) -> float:
    """Baselines' cap: the highest frequency at or below which *every* profiled point fits.

    This is how the paper sets 307/614/921 MHz on the Nano: a clock cap that keeps any model at
    any batch size within the budget, the way a power-capping governor works. Pass several
    profiles (models) to get a fleet-wide cap. Raises InfeasibleError if even the lowest clock
    breaks the budget for some point.
    """
    budget = check_budget(budget_w)
    freqs = sorted({p.freq_mhz for prof in profiles for p in prof.points})
    if math.isinf(budget):
        return freqs[-1]
    cap = None
    for f in freqs:
        at_f = [p for prof in profiles for p in prof.points if p.freq_mhz == f]
        if all(feasible(p, budget) for p in at_f):
            cap = f
        else:
            break
    if cap is None:
        worst = max(
            (p for prof in profiles for p in prof.points if p.freq_mhz == freqs[0]), key=_peak
        )
        raise InfeasibleError(
            f"no frequency cap keeps every point within {budget:g} W: at the lowest clock "
            f"{freqs[0]:g} MHz batch_size={worst.batch_size} peaks at {worst.peak_power_w:g} W"
        )
    return cap


def _at_cap(profile: Profile, batch_size: int, cap_mhz: float, budget: float) -> Point | None:
    """The point a clock-capped governor would run: highest profiled frequency <= cap."""
    pts = [
        p
        for p in profile.points
        if p.batch_size == batch_size and p.freq_mhz <= cap_mhz and feasible(p, budget)
    ]
    return max(pts, key=lambda p: p.freq_mhz) if pts else None


def baseline_b1(
    profile: Profile, eff: Efficiency, budget_w: float | None, cap_mhz: float
) -> Choice:
    """B1: the largest batch size that fits in memory, at the safe frequency cap."""
    budget = check_budget(budget_w)
    b = max(common_batches(profile, eff))
    return _capped_choice(profile, eff, b, cap_mhz, budget, "b1")


def baseline_b2(
    profile: Profile, eff: Efficiency, budget_w: float | None, cap_mhz: float
) -> Choice:
    """B2: the batch size with the fewest samples-to-accuracy (on the proxy), at the cap."""
    budget = check_budget(budget_w)
    b = eff.restrict(common_batches(profile, eff)).best_batch()
    return _capped_choice(profile, eff, b, cap_mhz, budget, "b2")


def _capped_choice(
    profile: Profile, eff: Efficiency, b: int, cap: float, budget: float, method: str
) -> Choice:
    p = _at_cap(profile, b, cap, budget)
    if p is None:
        raise InfeasibleError(
            f"{method}: batch_size={b} has no profiled point at or below the {cap:g} MHz cap "
            f"within the budget in {profile.source}"
        )
    return make_choice(p, eff.samples.get(b, math.nan), method, "time")


def evaluate(choice: Choice, truth: Efficiency) -> Choice:
    """Re-cost a choice with another efficiency (e.g. the target's true N_s_acc).

    A batch size that never reached the target in ``truth`` costs infinite time: the choice
    would not have finished.
    """
    n = truth.samples.get(choice.batch_size, math.nan)
    if math.isnan(n):
        t = e = math.inf
    else:
        t = choice.time_per_batch_s / choice.batch_size * n
        e = choice.mean_power_w * t
    return Choice(
        choice.batch_size,
        choice.freq_mhz,
        choice.time_per_batch_s,
        choice.peak_power_w,
        choice.mean_power_w,
        n,
        t,
        e,
        choice.method,
        choice.objective,
    )
