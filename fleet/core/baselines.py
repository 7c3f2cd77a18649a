"""The methods "ours" is compared against: the baseline registry.

A baseline runs at the *safe frequency cap* (the highest clock at which every profiled point
fits the budget, the way a power-capping governor works; ``SelectionIndex.safe_cap``) and
differs only in the batch size it takes, from what it would know in practice. Adding one is
one ``Baseline`` entry (``register_baseline``): ``powerfleet compare`` gets its rows and a
``speedup_vs_<name>`` column, the device round and the round report get ``<name>_time_s`` and
``speedup_vs_<name>``, the fleet totals a ``median_speedup_vs_<name>``. See
docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleet.common.registry import Registry
from fleet.core.choice import Choice, common_batches
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import capped_choice


@dataclass(frozen=True)
class Baseline:
    name: str  # column stem: <name>_time_s, speedup_vs_<name>
    label: str  # how reports title it
    batch: Callable[[Profile, Efficiency], int]  # the batch size it runs (profile x efficiency)


BASELINES: Registry[Baseline] = Registry("baseline")


def register_baseline(baseline: Baseline) -> Baseline:
    return BASELINES.register(baseline.name, baseline)


def unregister_baseline(name: str) -> None:
    BASELINES.unregister(name)


def run_baseline(
    name: str, profile: Profile, eff: Efficiency, budget_w: float | None, cap_mhz: float
) -> Choice:
    """The named baseline's choice under the cap (raises InfeasibleError when it cannot run)."""
    b = BASELINES[name].batch(profile, eff)
    return capped_choice(profile, eff, b, cap_mhz, budget_w, name)


def time_column(name: str) -> str:
    return f"{name}_time_s"


def speedup_column(name: str) -> str:
    return f"speedup_vs_{name}"


def _largest(profile: Profile, eff: Efficiency) -> int:
    return max(common_batches(profile, eff))


def _fewest_samples(profile: Profile, eff: Efficiency) -> int:
    return eff.restrict(common_batches(profile, eff)).best_batch()


register_baseline(Baseline("b1", "Baseline 1", _largest))  # the largest batch that fits memory
register_baseline(Baseline("b2", "Baseline 2", _fewest_samples))  # fewest samples (proxy)
