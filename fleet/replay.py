"""A simulated device: replay a recorded profile on a virtual clock.

The device does what a real one does (select (b, f) under its budget with the efficiency the
coordinator shipped, then train until the target) but time only advances by the profiled step
time at the chosen point and energy is charged at the profiled mean power. How many samples the
training takes comes from the device's own convergence trace (its true samples-to-accuracy per
batch size), which is what makes "ours" differ from the oracle.

Budgets that change during training (``budget_schedule``) are handled segment by segment: at
each change the device re-selects; progress carries over as the *fraction* of the target
reached, so switching from b to b' leaves ``(1 - done) x N(b')`` samples to go. If a segment's
budget admits no point, the device pauses (no work, no GPU power charged) until the next step;
it never runs over budget.

The learning side is a seam: ``learn`` may be a trace (this module) or real training (a later
trainer supplies samples and accuracy), while the clock and the power accounting stay here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from fleet.efficiency import Efficiency, load_efficiency
from fleet.errors import InfeasibleError, InputError
from fleet.fleetconfig import DEVICE_TYPES, BudgetStep, DeviceSpec
from fleet.profile import Profile, load_profile
from fleet.selection import (
    Choice,
    SelectionIndex,
    align,
    baseline_b1,
    baseline_b2,
    evaluate,
    safe_frequency_cap,
)


@dataclass
class Segment:
    start_s: float
    end_s: float
    budget_w: float | None
    batch_size: int | None
    freq_mhz: float | None
    samples: float
    energy_j: float
    peak_power_w: float | None


@dataclass
class DeviceResult:
    """What a device reports back after a round (one row of the round report)."""

    device: str
    device_type: str
    budget_w: float | None
    profile: str
    efficiency: str
    status: str  # ok | infeasible | not reached
    batch_size: int | None = None
    freq_mhz: float | None = None
    predicted_time_s: float | None = None
    time_s: float | None = None
    energy_j: float | None = None
    peak_power_w: float | None = None
    mean_power_w: float | None = None
    accuracy: float | None = None
    samples: float | None = None
    b1_time_s: float | None = None
    b2_time_s: float | None = None
    speedup_vs_b1: float | None = None
    speedup_vs_b2: float | None = None
    message: str = ""
    learning: str = "trace"
    trace: str | None = None  # the convergence trace (true samples-to-accuracy) replayed
    segments: list[Segment] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


def _choose(index: SelectionIndex, shipped: Efficiency, budget: float | None, objective: str):
    try:
        return index.select(shipped, budget, objective)
    except InfeasibleError:
        return None


def replay_device(
    spec: DeviceSpec,
    profile: Profile,
    shipped: Efficiency,
    trace: Efficiency,
    target_accuracy: float,
    objective: str = "time",
    index: SelectionIndex | None = None,
    baselines: bool = True,
    chooser: Callable[[int, float, float], Choice | None] | None = None,
) -> DeviceResult:
    """Run one device's round on the virtual clock; never exceeds any budget in force.

    ``baselines=False`` skips the B1/B2 columns: they need the true samples-to-accuracy of
    batch sizes the device did not train (known for a trace, not after real training).
    """
    index = index or SelectionIndex(profile)
    schedule = spec.schedule or (BudgetStep(0.0, spec.budget_w),)
    res = DeviceResult(
        spec.name,
        spec.device_type,
        spec.budget_w,
        spec.profile,
        shipped.source,
        "ok",
        learning=spec.learning,
        trace=trace.source,
    )
    # chooser(step, clock, done): another objective's per-step choice (fleet.deadline)
    first = (
        chooser(0, 0.0, 0.0)
        if chooser
        else _choose(index, shipped, schedule[0].budget_w, objective)
    )
    if first is None:
        res.status = "infeasible"
        try:
            index.select(shipped, schedule[0].budget_w, "time" if chooser else objective)
        except InfeasibleError as exc:
            res.message = str(exc)
        return res
    res.batch_size, res.freq_mhz = first.batch_size, first.freq_mhz
    res.predicted_time_s = first.predicted_time_s
    res.peak_power_w, res.mean_power_w = first.peak_power_w, first.mean_power_w
    if baselines:
        _baselines(res, profile, shipped, trace, spec.budget_w)

    clock = done = energy = samples = 0.0  # done: fraction of the target reached
    peak = 0.0
    for k, step in enumerate(schedule):
        end = schedule[k + 1].at_s if k + 1 < len(schedule) else math.inf
        if clock < step.at_s:  # paused through an infeasible segment: idle until now
            clock = step.at_s
        if k == 0:
            choice = first
        elif chooser:
            choice = chooser(k, clock, done)
        else:
            choice = _choose(index, shipped, step.budget_w, objective)
        if choice is None:
            res.segments.append(Segment(clock, end, step.budget_w, None, None, 0.0, 0.0, None))
            clock = end
            continue
        n_true = trace.samples.get(choice.batch_size, math.nan)
        if math.isnan(n_true):
            res.status = "not reached"
            res.message = (
                f"batch_size={choice.batch_size} never reaches the target in {trace.source}"
            )
            break
        per_sample = choice.time_per_batch_s / choice.batch_size
        need = (1.0 - done) * n_true  # samples left at this batch size
        span = end - clock
        run = min(need * per_sample, span)
        seg_samples = run / per_sample
        seg_energy = choice.mean_power_w * run
        res.segments.append(
            Segment(
                clock,
                clock + run,
                step.budget_w,
                choice.batch_size,
                choice.freq_mhz,
                seg_samples,
                seg_energy,
                choice.peak_power_w,
            )
        )
        clock += run
        energy += seg_energy
        samples += seg_samples
        peak = max(peak, choice.peak_power_w)
        done += seg_samples / n_true
        if done >= 1.0 - 1e-12:
            break
    if res.status == "ok" and done < 1.0 - 1e-12:
        res.status = "infeasible"
        res.message = "the budget schedule left no feasible point before the target was reached"
    res.time_s, res.energy_j, res.samples = clock, energy, samples
    res.peak_power_w = peak if peak > 0 else res.peak_power_w
    if res.status == "ok":
        res.accuracy = target_accuracy
        if res.b1_time_s:
            res.speedup_vs_b1 = res.b1_time_s / clock
        if res.b2_time_s:
            res.speedup_vs_b2 = res.b2_time_s / clock
    return res


def _baselines(
    res: DeviceResult, profile: Profile, shipped: Efficiency, trace: Efficiency, budget
) -> None:
    """B1/B2 time on the same truth, for the speed-up columns (None when they can't run)."""
    try:
        cap = safe_frequency_cap([profile], budget)
    except InfeasibleError:
        return
    for name, fn in (("b1", baseline_b1), ("b2", baseline_b2)):
        try:
            c: Choice = evaluate(fn(profile, shipped, budget, cap), trace)
        except InfeasibleError:
            continue
        if math.isfinite(c.predicted_time_s):
            setattr(res, f"{name}_time_s", c.predicted_time_s)


# ------------------------------------------------------------------- files, loaded once per process


@functools.lru_cache(maxsize=256)
def cached_profile(path: str) -> tuple[Profile, SelectionIndex]:
    """Thousands of simulated devices share a handful of reference profiles: parse each once."""
    prof = load_profile(path)
    return prof, SelectionIndex(prof)


@functools.lru_cache(maxsize=256)
def cached_efficiency(path: str) -> Efficiency:
    return load_efficiency(path)


def simulate_device(
    spec: DeviceSpec,
    shipped: Efficiency,
    target_accuracy: float,
    objective: str = "time",
    deadline_s: float | None = None,
) -> DeviceResult:
    """Everything a simulated device does in a round, from its fleet entry and what it received.

    Both the Flower replay ClientApp and the direct engine call this, so a 1,000-device what-if
    run and a Flower run give the same rows. Bad files become an ``error`` row (the round goes
    on without that device) rather than an exception that would stop the fleet.
    """
    try:
        profile, index = cached_profile(spec.profile)
        recorded = profile.metadata.get("device")
        if recorded in DEVICE_TYPES and recorded != spec.device_type:
            raise InputError(
                f"device {spec.name}: type {spec.device_type!r} but its profile {spec.profile} "
                f"was recorded on {recorded!r}"
            )
        if spec.data is None:
            raise InputError(f"device {spec.name}: no convergence trace (data) to replay")
        trace = cached_efficiency(spec.data)
        profile_a, shipped_a, _ = align(profile, shipped)
        if profile_a.points != profile.points:
            index = SelectionIndex(profile_a)
        if objective == "deadline":
            from fleet.deadline import simulate_with_deadline

            return simulate_with_deadline(
                spec, profile_a, shipped_a, trace, target_accuracy, index, deadline_s
            )
        return replay_device(spec, profile_a, shipped_a, trace, target_accuracy, objective, index)
    except InputError as exc:
        return DeviceResult(
            spec.name,
            spec.device_type,
            spec.budget_w,
            spec.profile,
            shipped.source,
            "error",
            message=str(exc),
            learning=spec.learning,
        )
