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

Segmented rounds (docs/architecture.md, "Segmented rounds"): a round that lasts hours is run in
bounded segments, each a ``run_device`` call whose clock starts from the device's last
``Progress`` (``start``) and stops at a device-clock time (``stop_s``). A segment that crosses
``stop_s`` is cut there exactly as a budget step's end cuts it (samples and energy pro rata);
the row is then ``running`` with cumulative counters, and ``progress`` says where the device
stands. Resuming inside a budget step keeps the point the device was running (a segment
boundary is not a budget change, so nothing re-selects, as on a board); resuming at a step's
start chooses as the one-shot run does there. Chaining segments therefore gives the one-shot
run's final row (``tests/test_virtual_clock_segments.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.choice import Choice, make_choice
from fleet.core.curves import TraceCurves
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import Profile, load_profile
from fleet.core.selection import SelectionIndex
from fleet.method.budget import budget_limit, step_index
from fleet.method.selection import fits
from fleet.rounds.device_round import TRAINED, DeviceResult, Round, Segment, run_device
from fleet.rounds.learning import ReplayLearning, curves_for
from fleet.rounds.progress import MAX_SECONDS, Progress

DONE = 1.0 - 1e-12  # fraction of the target that counts as reached (float sums)


@dataclass
class VirtualClock:
    """Runner: advance a virtual clock along the trace, one budget step at a time.

    ``batch_size`` fixes the batch for every segment (host training already chose it; only
    the frequency follows the budget); ``learning`` labels the row (None: the fleet entry's).
    ``start``: resume from this progress (None: the round's start); ``stop_s``: stop at this
    device-clock time (None: run to the target). After ``run``, ``progress`` is where the
    device stands (cumulative, as it travels in a segment reply).
    """

    trace: Efficiency
    batch_size: int | None = None
    learning: str | None = None
    start: Progress | None = None
    stop_s: float | None = None
    curves: TraceCurves | None = None  # the trace's recorded learning curves, when it has any
    progress: Progress | None = field(default=None, init=False)

    @property
    def truth(self) -> Efficiency:
        return self.trace

    def run(self, rnd: Round, res: DeviceResult) -> None:
        res.trace = self.trace.source
        schedule = rnd.schedule
        clock = done = energy = samples = peak = 0.0  # done: fraction of the target reached
        start, first_k = self.start, 0
        stop = math.inf if self.stop_s is None else self.stop_s
        learning = ReplayLearning.begin(rnd, self.curves, start)
        if start is not None:
            clock, done = start.time_s, start.done
            energy, samples = start.energy_j, start.samples
            first_k = step_index(schedule, clock)
        now = _Now.of(start)  # the point running at the clock, for the progress
        stopped = finished = False
        for k in range(first_k, len(schedule)):
            step = schedule[k]
            end = schedule[k + 1].at_s if k + 1 < len(schedule) else math.inf
            clock = max(clock, step.at_s)  # paused through an infeasible segment: idle till now
            if clock >= stop:
                stopped = True
                break
            fixed = self.batch_size
            if start is not None and k == first_k and clock > step.at_s:
                choice = self._resumed(rnd, k, clock, done, learning)  # mid-step: keep its point
            elif k == 0 and fixed is None:
                choice = rnd.first
            elif learning is not None:
                choice = learning.choose(rnd, k, clock, fixed)
            else:
                choice = rnd.choose_step(k, clock, done, fixed)
            if choice is None:
                until = end if math.isinf(end) else min(end, stop)  # the last pause is final
                res.segments.append(Segment(clock, until, step.budget_w, None, None, 0, 0, None))
                now = _Now(None, step.budget_w, clock)
                clock = until
                if until < end:
                    stopped = True
                    break
                continue
            seg, reason = None, ""
            while True:  # stretches of this budget step, cut at evaluations when learning
                n_true = self.trace.samples.get(choice.batch_size, math.nan)
                if math.isnan(n_true):
                    res.status = "not reached"
                    res.message = (
                        f"batch_size={choice.batch_size} never reaches the target in "
                        f"{self.trace.source}"
                    )
                    finished = True
                    break
                per_sample = choice.time_per_batch_s / choice.batch_size
                left, to_end = stop - clock, end - clock
                to_eval = math.inf
                if learning is not None:
                    to_eval = max(learning.next_eval - samples, 0.0) * per_sample
                run = min((1.0 - done) * n_true * per_sample, to_end, left, to_eval)
                seg_samples, seg_energy = run / per_sample, choice.mean_power_w * run
                if seg is None:
                    seg = Segment(
                        clock, clock + run, step.budget_w, choice.batch_size, choice.freq_mhz,
                        seg_samples, seg_energy, choice.peak_power_w, reason,
                    )  # fmt: skip
                    res.segments.append(seg)
                else:  # an evaluation does not change the point: the same segment goes on
                    seg.end_s, seg.samples = clock + run, seg.samples + seg_samples
                    seg.energy_j += seg_energy
                clock += run
                energy += seg_energy
                samples += seg_samples
                peak = max(peak, choice.peak_power_w)
                done += seg_samples / n_true
                now = _Now(choice, step.budget_w, clock, n_true * per_sample)
                if learning is not None:
                    learning.trained(choice.batch_size, seg_samples)
                if done >= DONE:
                    finished = True
                    break
                if run == left:  # cut at the stop time, not at the step's end or the target
                    clock, stopped = stop, True
                    break
                if run == to_end:
                    break
                if (
                    learning is not None
                    and run == to_eval
                    and learning.evaluate(choice.batch_size, done, clock, samples)
                ):
                    new = learning.rechoose(rnd, k, clock, choice, fixed)
                    if (new.batch_size, new.freq_mhz) != (choice.batch_size, choice.freq_mhz):
                        choice, seg, reason = new, None, "learned"
            if finished or stopped:
                break
        if stopped:
            res.status = "running"
        elif res.status == "ok" and done < DONE:
            res.status = "infeasible"
            res.message = "the budget schedule left no feasible point before the target was reached"
        res.time_s, res.energy_j, res.samples = clock, energy, samples
        res.peak_power_w = peak if peak > 0 else res.peak_power_w
        if start is not None and res.peak_power_w is not None:  # the round's first point too
            res.peak_power_w = max(res.peak_power_w, rnd.first.peak_power_w)
        if res.status == "ok":
            res.accuracy, note = reached_accuracy(self.trace, rnd.run.target_accuracy)
            res.accuracy_source = "trace"
            res.message = note or res.message
        if learning is not None:
            learning.report(res)
        self.progress = now.progress(res, clock, done, start, _deadline_of(rnd), learning, rnd)

    def _resumed(
        self, rnd: Round, k: int, clock: float, done: float, learning: ReplayLearning | None
    ) -> Choice | None:
        """The point a device resumed inside budget step k runs: the one its progress names,
        when the profile has it and it fits the step's budget (and the fixed batch); else the
        step's own choice (what a device that lost its point would choose)."""
        s, fixed = self.start, self.batch_size
        replanned = s is not None and s.deadline_s != _deadline_of(rnd)
        if replanned:  # the coordinator moved the deadline: choose again from where it is
            if learning is not None:
                return learning.choose(rnd, k, clock, fixed)
            return rnd.choose_step(k, clock, done, fixed)
        if s is not None and s.end_batch_size is not None and s.end_freq_mhz is not None:
            p = rnd.profile.point(s.end_batch_size, s.end_freq_mhz)
            fits_now = p is not None and fits(p, budget_limit(rnd.schedule[k].budget_w))
            if p is not None and fits_now and fixed in (None, p.batch_size):
                n = rnd.shipped.samples.get(p.batch_size, math.nan)
                return make_choice(p, n, "ours", rnd.run.objective)
        if k == 0 and fixed is None:
            return rnd.first
        if learning is not None:
            return learning.choose(rnd, k, clock, fixed)
        return rnd.choose_step(k, clock, done, fixed)


def _deadline_of(rnd: Round) -> float | None:
    """The deadline this segment's choices are made for (None: the objective has none)."""
    raw = rnd.context.get("deadline_s") if rnd.run.objective == "deadline" else None
    return float(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else None


@dataclass(frozen=True)
class _Now:
    """What the device runs at the clock: the point (None: paused), the budget in force, and
    the point's seconds for the whole target (its truth), for the ETA."""

    choice: Choice | None
    budget_w: float | None
    since_s: float
    full_s: float | None = None
    start: Progress | None = None

    @classmethod
    def of(cls, start: Progress | None) -> _Now:
        return cls(None, None, 0.0, None, start)

    def progress(
        self,
        res: DeviceResult,
        clock: float,
        done: float,
        start: Progress | None,
        deadline_s: float | None = None,
        learning: ReplayLearning | None = None,
        rnd: Round | None = None,
    ) -> Progress:
        """The cumulative progress a segment reply carries (``fleet.rounds.progress``). A
        learning device also reports what it believes (the samples its batch size needs, its
        own ETA and fastest finish), as a board would, and carries its learner's state;
        ``done`` stays the replay's true fraction, which the next segment resumes from."""
        if math.isfinite(clock):
            time_s = min(clock, MAX_SECONDS)
        else:  # paused for good (the schedule's last step admits nothing): the clock stopped
            time_s = self.since_s
        finished = res.status in TRAINED
        c = self.choice
        if c is None and self.start is not None:  # nothing ran this segment: as it was
            s = self.start
            b, f, budget, power, eta = (
                s.end_batch_size,
                s.end_freq_mhz,
                s.budget_w,
                s.power_w,
                s.eta_s,
            )
        else:
            b = c.batch_size if c else None
            f = c.freq_mhz if c else None
            budget, power = self.budget_w, c.mean_power_w if c else None
            eta = max(0.0, 1.0 - done) * self.full_s if c and self.full_s is not None else None
        power = power if power is not None and math.isfinite(power) else None
        extra: dict = {}
        if learning is not None:
            extra["learning"] = learning.state()
            n_hat, sd = learning.estimate()
            extra["samples_to_target"], extra["samples_to_target_sd"] = n_hat, sd
            if not finished and rnd is not None and math.isfinite(clock):
                extra["fastest_finish_s"] = learning.fastest_finish(rnd, clock)
            if not finished and c is not None and n_hat is not None:  # the device's own view
                left = max(0.0, 1.0 - learning.learner.done())
                eta = left * n_hat * c.time_per_batch_s / c.batch_size
        return Progress(
            time_s=time_s,
            samples=res.samples or 0.0,
            energy_j=res.energy_j or 0.0,
            accuracy=res.accuracy if finished else None,
            end_batch_size=b,
            end_freq_mhz=f,
            budget_w=budget,
            power_w=power,
            done=1.0 if done >= DONE else min(max(done, 0.0), 1.0),
            eta_s=0.0 if finished else eta,
            segments=(start.segments if start is not None else 0) + 1,
            deadline_s=deadline_s,
            **extra,
        )


def reached_accuracy(trace: Efficiency, target: float) -> tuple[float, str]:
    """The accuracy the trace recorded reaching, and a note when it is not the fleet's target.

    A trace file says which target its samples-to-accuracy are for (its ``target_accuracy``
    column, an accuracy checked by the reader); without one it is taken to be the fleet's.
    """
    recorded = trace.target_accuracy
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
        profile, index, trace = _device_files(spec)
        curves = device_curves(spec, trace, run)
    except InputError as exc:
        return DeviceResult.for_device(spec, shipped.source, message=str(exc))
    clock = VirtualClock(trace, curves=curves)
    return run_device(spec, profile, shipped, run, clock, index=index)


def _device_files(spec: DeviceSpec) -> tuple[Profile, SelectionIndex, Efficiency]:
    """The device's profile (with its index) and convergence trace, each parsed once."""
    profile, index = cached_profile(spec.profile)
    if spec.data is None:
        raise InputError(f"device {spec.name}: no convergence trace (data) to run on")
    return profile, index, cached_efficiency(spec.data)


def device_curves(spec: DeviceSpec, trace: Efficiency, run: RunSettings) -> TraceCurves | None:
    """The learning curves a replay device reads (None: it has none, or it does not learn)."""
    if spec.data is None or run.learn_efficiency == "none":
        return None
    return cached_curves(spec.data, run.target_accuracy, run.seed, trace)


@functools.lru_cache(maxsize=256)
def _curves(path: str, target: float, seed: int, key: tuple) -> TraceCurves | None:
    return curves_for(path, cached_efficiency(path), target, seed)


def cached_curves(path: str, target: float, seed: int, trace: Efficiency) -> TraceCurves | None:
    """A trace's curves, parsed once per process (thousands of devices share a few traces)."""
    return _curves(path, target, seed, tuple(sorted(trace.reached.items())))


def simulate_segment(
    spec: DeviceSpec,
    shipped: Efficiency,
    run: RunSettings,
    start: Progress | None,
    segment_s: float,
) -> tuple[DeviceResult, Progress]:
    """One segment of a simulated device's round: from ``start`` (None: the round's start) for
    ``segment_s`` device seconds, or to the target if that comes first.

    The row is cumulative since the round began (``running`` until the target); chaining
    segments, each from the previous one's progress, gives ``simulate_device``'s row. A bad
    ``segment_s`` raises ``InputError`` (the instruction's fault); a problem of this device is
    its row, as in ``simulate_device``, with the progress where it was.
    """
    if isinstance(segment_s, bool) or not isinstance(segment_s, (int, float)):
        raise InputError(f"segment_s: expected a number of seconds, got {segment_s!r}")
    if not math.isfinite(segment_s) or not 0 < segment_s <= MAX_SECONDS:
        raise InputError(f"segment_s: must be in (0, {MAX_SECONDS:g}] seconds, got {segment_s}")
    begin = start if start is not None else Progress()
    unchanged = begin.replace(segments=begin.segments + 1)
    try:
        profile, index, trace = _device_files(spec)
        curves = device_curves(spec, trace, run)
    except InputError as exc:
        return DeviceResult.for_device(spec, shipped.source, message=str(exc)), unchanged
    clock = VirtualClock(trace, start=begin, stop_s=begin.time_s + float(segment_s), curves=curves)
    res = run_device(spec, profile, shipped, run, clock, index=index)
    return res, clock.progress if clock.progress is not None else unchanged
