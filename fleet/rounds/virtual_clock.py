"""The virtual clock: a simulated device runs on its recorded profile instead of a board.

The device does what a real one does (``fleet.rounds.device_round.run_device``: select (b, f) under
its budget with the efficiency the coordinator shipped, then train until the target) but time
only advances by the profiled step time at the chosen point and energy is charged at the
profiled mean power. How many samples the training takes comes from the device's own
convergence trace (its true samples-to-accuracy per batch size), which is what makes "ours"
differ from the oracle; the accuracy it reports is the one that trace recorded reaching.

Budgets that change during training (``budget_schedule``) are handled segment by segment: at
each change the device re-selects (``Round.choose_step``: the objective's per-step chooser,
which for ``deadline`` weighs the remaining deadline against the fraction done); progress
carries over as the *fraction* of the target reached, so switching from b to b' leaves ``(1 -
done) x N(b')`` samples to go. If a segment's budget admits no point, the device pauses (no
work, no GPU power charged) until the next step; it never runs over budget.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import Profile, load_profile
from fleet.core.selection import SelectionIndex
from fleet.rounds.device_round import DeviceResult, Round, Segment, run_device

DONE = 1.0 - 1e-12  # fraction of the target that counts as reached (float sums)


@dataclass
class VirtualClock:
    """Runner: advance a virtual clock along the trace, one budget step at a time.

    ``batch_size`` fixes the batch for every segment (host training already chose it; only
    the frequency follows the budget); ``learning`` labels the row (None: the fleet entry's).
    """

    trace: Efficiency
    batch_size: int | None = None
    learning: str | None = None

    @property
    def truth(self) -> Efficiency:
        return self.trace

    def run(self, rnd: Round, res: DeviceResult) -> None:
        res.trace = self.trace.source
        schedule = rnd.schedule
        clock = done = energy = samples = peak = 0.0  # done: fraction of the target reached
        for k, step in enumerate(schedule):
            end = schedule[k + 1].at_s if k + 1 < len(schedule) else math.inf
            clock = max(clock, step.at_s)  # paused through an infeasible segment: idle till now
            fixed = self.batch_size
            if k == 0 and fixed is None:
                choice = rnd.first
            else:
                choice = rnd.choose_step(k, clock, done, fixed)
            if choice is None:
                res.segments.append(Segment(clock, end, step.budget_w, None, None, 0, 0, None))
                clock = end
                continue
            n_true = self.trace.samples.get(choice.batch_size, math.nan)
            if math.isnan(n_true):
                res.status = "not reached"
                res.message = (
                    f"batch_size={choice.batch_size} never reaches the target in "
                    f"{self.trace.source}"
                )
                break
            per_sample = choice.time_per_batch_s / choice.batch_size
            run = min((1.0 - done) * n_true * per_sample, end - clock)
            seg_samples, seg_energy = run / per_sample, choice.mean_power_w * run
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
            if done >= DONE:
                break
        if res.status == "ok" and done < DONE:
            res.status = "infeasible"
            res.message = "the budget schedule left no feasible point before the target was reached"
        res.time_s, res.energy_j, res.samples = clock, energy, samples
        res.peak_power_w = peak if peak > 0 else res.peak_power_w
        if res.status == "ok":
            res.accuracy, note = reached_accuracy(self.trace, rnd.run.target_accuracy)
            res.message = note or res.message


def reached_accuracy(trace: Efficiency, target: float) -> tuple[float, str]:
    """The accuracy the trace recorded reaching, and a note when it is not the fleet's target.

    A trace file says which target its samples-to-accuracy are for (its ``target_accuracy``
    column); without one it is taken to be the fleet's.
    """
    raw = trace.metadata.get("target_accuracy")
    try:
        recorded = float(raw) if raw not in (None, "") else None
    except ValueError:
        recorded = None
    if recorded is None or math.isclose(recorded, target, abs_tol=1e-9):
        return target if recorded is None else recorded, ""
    return recorded, (
        f"the trace {trace.source} reaches accuracy {recorded:g}, not the fleet's target "
        f"{target:g}: its time and energy are to {recorded:g}"
    )


# ------------------------------------------------------------------- files, loaded once per process


@functools.lru_cache(maxsize=256)
def cached_profile(path: str) -> tuple[Profile, SelectionIndex]:
    """Thousands of simulated devices share a handful of reference profiles: parse each once."""
    prof = load_profile(path)
    return prof, SelectionIndex(prof)


@functools.lru_cache(maxsize=256)
def cached_efficiency(path: str) -> Efficiency:
    return load_efficiency(path)


def simulate_device(spec: DeviceSpec, shipped: Efficiency, run: RunSettings) -> DeviceResult:
    """Everything a simulated device does in a round, from its fleet entry and what it received.

    Both the Flower ClientApp and the direct engine call this, so a 1,000-device what-if run
    and a Flower run give the same rows. Bad files become an ``error`` row (the round goes on
    without that device) rather than an exception that would stop the fleet.
    """
    try:
        profile, index = cached_profile(spec.profile)
        if spec.data is None:
            raise InputError(f"device {spec.name}: no convergence trace (data) to run on")
        trace = cached_efficiency(spec.data)
    except InputError as exc:
        return DeviceResult.for_device(spec, shipped.source, message=str(exc))
    return run_device(spec, profile, shipped, run, VirtualClock(trace), index=index)
