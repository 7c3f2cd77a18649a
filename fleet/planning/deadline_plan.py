"""Planning a round's deadline: every device's fastest finish, and the slowest of them.

The deadline objective (``fleet.core.deadline``) needs a deadline. Without ``[run]
deadline_s`` the coordinator plans one: it asks every device for its fastest predicted finish
under its own budget or schedule (no training, the profile is enough) and takes the slowest,
so the round lasts no longer than it would under the time objective while every faster device
may slow down and save energy. The direct engine and the what-if sweep plan the same way
in-process. See docs/architecture.md, "Adding an objective or a baseline".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from fleet.agent.learning.efficiency_learner import DEADLINE_Z
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec
from fleet.core.choice import align
from fleet.core.deadline import RateTable, fastest_per_step, finish, rates
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.method.budget import BudgetStep
from fleet.method.point import Point
from fleet.rounds.device_round import check_device_type


def fastest_finish(
    points: Sequence[Point], eff: Efficiency, steps: Sequence[BudgetStep]
) -> float | None:
    """The time objective's predicted finish under the schedule (what a device reports when
    the coordinator plans the round); None when it cannot finish (first step infeasible, or the
    schedule ends paused)."""
    return fastest_finish_rates(rates(points, eff), steps)


def fastest_finish_rates(all_rates: RateTable, steps: Sequence[BudgetStep]) -> float | None:
    later = fastest_per_step(all_rates, steps)
    if later[0] is None:
        return None
    f, _ = finish(steps, 0, 0.0, 0.0, later[0], later)
    return f if math.isfinite(f) else None


def plan_deadline(fastest_finishes: Iterable[float | None]) -> float | None:
    """The coordinator's planning step: the round deadline is the slowest device's fastest
    predicted finish (devices that cannot train report None and do not count). None when no
    device can train."""
    finite = [float(f) for f in fastest_finishes if f is not None and math.isfinite(f)]
    return max(finite) if finite else None


@dataclass(frozen=True)
class DevicePlan:
    """A device's answer in the planning exchange: its fastest predicted finish for the
    round's work under its own budget (or schedule), and that plan's predicted energy; None
    when it cannot finish (the coordinator then plans without it), with the reason."""

    fastest_finish_s: float | None
    energy_j: float | None
    message: str = ""


def planning_efficiency(eff: Efficiency) -> Efficiency:
    """The samples a deadline is planned on: a vector the fleet learnt (``source = learned``,
    its std the posterior's) priced ``DEADLINE_Z`` standard deviations up, as a learning
    device prices its own work left; else the vector as shipped. Why: planned on the posterior
    median, the slowest devices of a 1,000-device fleet each finished about a second after a
    deadline their own median set (200 devices ``late`` by 0.02 %)."""
    if eff.metadata.get("source") != "learned" or not eff.std:
        return eff
    up = {}
    for b, n in eff.samples.items():
        sd = eff.std.get(b, 0.0)
        ok = n > 0 and math.isfinite(n) and sd >= 0 and math.isfinite(sd)
        up[b] = n * math.exp(DEADLINE_Z * sd / n) if ok else n
    return replace(eff, samples=up)


def plan_device(
    schedule: Sequence[BudgetStep], points: Sequence[Point], shipped: Efficiency
) -> DevicePlan:
    """What a device reports before training (no training, the profile is enough): the time
    objective's predicted finish under its schedule, costed with the shipped efficiency.
    ``points`` and ``shipped`` are aligned on their common batch sizes by the caller."""
    table = rates(points, planning_efficiency(shipped))
    later = fastest_per_step(table, schedule)
    if later[0] is None:
        return DevicePlan(None, None, "no operating point fits the first budget")
    f, e = finish(schedule, 0, 0.0, 0.0, later[0], later)
    if not math.isfinite(f):
        return DevicePlan(None, None, "the budget schedule ends before the target is reached")
    return DevicePlan(f, e)


def plan_for_device(spec: DeviceSpec, profile: Profile, shipped: Efficiency) -> DevicePlan:
    """``plan_device`` from a device's fleet entry and its profile, checked as the device round
    checks them (type, common batch sizes); a problem is the plan's message, never a raise,
    so one device cannot stop the planning exchange."""
    try:
        check_device_type(spec, profile)
        aligned, shipped_a, _ = align(profile, shipped)
        return plan_device(
            spec.schedule or (BudgetStep(0.0, spec.budget_w),), aligned.points, shipped_a
        )
    except InputError as exc:
        return DevicePlan(None, None, str(exc))
