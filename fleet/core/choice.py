"""A chosen operating point and what it is predicted to cost: the vocabulary of selection.

Every selector (Algorithm 1's argmin, the baselines at their clock cap, the deadline
objective's per-step plan) answers with a ``Choice``, and every one of them first aligns the
profile with the efficiency vector on their common batch sizes. Both live here, below the
selectors, so that an objective's picker can build choices without importing the selection
index that ranks with it (docs/architecture.md, "Dependencies point one way").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.method.deadline import rate_of
from fleet.method.point import Point


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


def predict(p: Point, samples: float) -> tuple[float, float]:
    """(time_s, energy_j) to process ``samples`` at point p: eq. 2 and mean power x time (the
    kernel's ``rate_of``, which the deadline arithmetic prices with too)."""
    r = rate_of(p, samples)
    return r.full_time_s, r.full_energy_j


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


def common_batches(profile: Profile, eff: Efficiency) -> list[int]:
    """Batch sizes both profiled and estimated; an empty intersection is an input error."""
    common = sorted(set(profile.batch_sizes) & set(eff.batch_sizes))
    if not common:
        raise InputError(
            f"no batch size is in both the profile {profile.source} "
            f"({format_batches(profile.batch_sizes)}) and the efficiency {eff.source} "
            f"({format_batches(eff.batch_sizes)})"
        )
    return common


def align(profile: Profile, eff: Efficiency) -> tuple[Profile, Efficiency, str | None]:
    """Restrict both to their common batch sizes; the note says what was dropped, if anything."""
    common = common_batches(profile, eff)
    only_eff = sorted(set(eff.batch_sizes) - set(common))
    only_prof = sorted(set(profile.batch_sizes) - set(common))
    parts = []
    if only_eff:
        parts.append(
            f"batch sizes {format_batches(only_eff)} of {eff.source} are not in the profile"
        )
    if only_prof:
        parts.append(
            f"batch sizes {format_batches(only_prof)} of {profile.source} have no efficiency"
        )
    note = "; ".join(parts) + f"; using {format_batches(common)}" if parts else None
    return profile.restrict(common), eff.restrict(common), note


def format_batches(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs) or "none"


def evaluate(choice: Choice, truth: Efficiency) -> Choice:
    """Re-cost a choice with another efficiency (e.g. the target's true N_s_acc).

    A batch size that never reached the target in ``truth`` costs infinite time: the choice
    would not have finished.
    """
    n = truth.samples.get(choice.batch_size, math.nan)
    if math.isnan(n):
        t = e = math.inf
    else:
        t, e = predict(
            Point(choice.batch_size, choice.freq_mhz, choice.time_per_batch_s,
                  choice.peak_power_w, choice.mean_power_w),
            n,
        )  # fmt: skip
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
