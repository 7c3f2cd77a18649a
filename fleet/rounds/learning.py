"""Online efficiency learning on the virtual clock: a replay device that reads its own curve.

Why here: the board learns its samples-to-target from every evaluation the trainer makes
(``fleet/agent/learning/efficiency_learner.py``, in the closed loop); a simulated device must do
the same
from what it would have seen, so a simulation shows the effect (docs/architecture.md, "Efficiency
that learns"). The trace's recorded learning curves (``fleet.core.curves``: real training's
evaluations, or the device model's) give the accuracy at every evaluation, read at the fraction
of the target the device has reached on the virtual clock; the same learner fits them and the
same choosers re-select with its estimate. ``[run] learn_efficiency`` says what the device uses:
``none`` (the shipped vector only, Algorithm 1), ``online`` (its learning curve, the default),
``device`` (the gradient noise scale its training steps show, recorded with the curves), ``all``.

A segmented replay carries the learner's state in its progress (``Progress.learning``): what it
has seen so far and its latest fit, so the next segment goes on exactly where this one stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleet.agent.learning.efficiency_belief import trust_for
from fleet.agent.learning.efficiency_learner import (
    DEADLINE_Z,
    EfficiencyLearner,
    learning_mode,
    shape_from_noise,
    worth_switching,
)
from fleet.common.errors import InfeasibleError, InputError
from fleet.core.choice import Choice
from fleet.core.curves import (
    TraceCurves,
    agreed_target,
    curves_path,
    load_curves,
    trace_curves,
)
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import OBJECTIVES
from fleet.method.budget import step_index
from fleet.method.point import Point
from fleet.method.selection import energy_per_sample, time_per_sample
from fleet.rounds.device_round import Round
from fleet.rounds.progress import Progress


def mode_of(rnd: Round) -> str:
    """The run's ``learn_efficiency`` (checked: an unknown value is an input error)."""
    try:
        return learning_mode(rnd.run.learn_efficiency)
    except ValueError as exc:
        raise InputError(f"[run] learn_efficiency: {exc}") from None


def rel_std(eff: Efficiency) -> dict[int, float]:
    """Each batch size's seed spread relative to its mean (how sure the shipped count is)."""
    return {b: s / eff.samples[b] for b, s in eff.std.items() if eff.samples.get(b, 0) > 0}


def law_err(eff: Efficiency) -> float | None:
    """The noise scale law's error on the proxy's own curves (``noise_law_err``), if recorded."""
    try:
        v = float(eff.metadata.get("noise_law_err", "nan"))
    except ValueError:
        return None
    return v if 0 <= v < 100 else None


@dataclass
class ReplayLearning:
    """A replay device's learner and the recorded curves it reads its evaluations from."""

    learner: EfficiencyLearner
    curves: TraceCurves
    mode: str
    next_eval: float = 0.0  # samples trained at the next evaluation

    @classmethod
    def create(cls, rnd: Round, curves: TraceCurves | None = None) -> ReplayLearning | None:
        """The learning of this round (None: ``learn_efficiency = "none"``)."""
        mode = mode_of(rnd)
        if mode == "none":
            return None
        learner = EfficiencyLearner(
            rnd.shipped.reached,
            rnd.run.target_accuracy,
            rel_std(rnd.shipped),
            trust_for(rnd.shipped.metadata.get("source")),
            online=mode in ("online", "all"),
            noise=mode in ("device", "all"),
            law_err=law_err(rnd.shipped),
        )
        return cls(learner, curves or TraceCurves(), mode)

    @classmethod
    def begin(
        cls, rnd: Round, curves: TraceCurves | None, start: Progress | None
    ) -> ReplayLearning | None:
        """A replay device's learning, resumed from its progress; None when it does not learn
        (mode ``none``, or no recorded curve for the batch sizes it may run)."""
        if curves is None or not curves.by_batch:
            return None
        out = cls.create(rnd, curves)
        if out is None:
            return None
        if start is not None and start.learning:
            try:
                out.learner.restore(start.learning)
            except ValueError as exc:
                raise InputError(f"resume progress: {exc}") from None
            nxt = start.learning.get("next_eval")
            out.next_eval = float(nxt) if isinstance(nxt, (int, float)) else out.learner.samples
        return out

    def noise_reading(self, b_noise: float, se: float) -> bool:
        """A gradient-noise-scale reading (its law's shape; True when the belief changed)."""
        if not self.learner.noise:
            return False
        shape = shape_from_noise(b_noise, self.learner.belief.batch_sizes)
        return shape is not None and self.learner.noise_shape(shape, se)

    def every(self, batch_size: int) -> float | None:
        trace = self.curves.by_batch.get(batch_size)
        return trace.every if trace is not None else None

    def trained(self, batch_size: int, samples: float) -> None:
        self.learner.trained(batch_size, samples)

    def evaluate(self, batch_size: int, done_true: float, clock_s: float, samples: float) -> bool:
        """The evaluation due now (``samples`` trained in the round), read from the curve at
        the true fraction done; True when the belief changed. Schedules the next evaluation."""
        trace = self.curves.by_batch.get(batch_size)
        self.next_eval = samples + (trace.every if trace else math.inf)
        if trace is None:
            return False
        reading = trace.noise_at(done_true)
        changed = reading is not None and self.noise_reading(reading[0], reading[1])
        self.learner.every = trace.every
        return self.learner.evaluated(trace.accuracy_at(done_true), clock_s) or changed

    def efficiency(self, rnd: Round, z: float = 0.0) -> Efficiency:
        """The learned samples-to-target as an efficiency the choosers read (``z``: that many
        standard deviations up, for a deadline)."""
        return Efficiency(self.learner.efficiency(z), source=f"learned:{rnd.shipped.source}")

    def choose(self, rnd: Round, k: int, clock_s: float, fixed: int | None) -> Choice | None:
        """The choice at a budget step (or a re-planned deadline) with the learned estimate:
        what ``Round.choose_step`` does with the shipped one; None when nothing fits."""
        eff = self.efficiency(rnd)
        if rnd.chooser is not None and fixed is None:
            return self._step_chooser(rnd)(k, clock_s, self.learner.done())
        pick = eff if fixed is None else eff.restrict([fixed])
        try:
            return rnd.index.select(
                pick, rnd.schedule[k].budget_w, rnd.run.objective, **rnd.context
            )
        except InfeasibleError:
            return None

    def rechoose(
        self, rnd: Round, k: int, clock_s: float, running: Choice, fixed: int | None
    ) -> Choice:
        """The point to run from here with what the device now believes; ``running`` when a
        switch is not worth it. The deadline objective's chooser decides for itself (it weighs
        the deadline against the learned work left); the others switch only when the learned
        estimate says the new point saves enough (``worth_switching``)."""
        eff = self.efficiency(rnd)
        step = rnd.schedule[k]
        if rnd.chooser is not None and fixed is None:
            return self._deadline_switch(rnd, k, clock_s, running)
        pick = eff if fixed is None else eff.restrict([fixed])
        try:
            new = rnd.index.select(pick, step.budget_w, rnd.run.objective, **rnd.context)
        except (InfeasibleError, InputError):
            return running
        if (new.batch_size, new.freq_mhz) == (running.batch_size, running.freq_mhz):
            return running
        cost = energy_per_sample if rnd.run.objective == "energy" else time_per_sample
        now = (running.batch_size, cost(_point(running)))
        then = (new.batch_size, cost(_point(new)))
        z = self.learner.switch_z(new.batch_size)
        return new if worth_switching(self.learner.belief, now, then, z) else running

    def _deadline_switch(self, rnd: Round, k: int, clock_s: float, running: Choice) -> Choice:
        """The deadline objective's re-choice on the learnt work, taken with the same caution
        as a time or energy switch: while the running point still meets the deadline on the
        learnt work (``DEADLINE_Z`` up), only a confidently cheaper one replaces it; once it
        does not, only a confidently faster one (the chooser's own verdict is on medians of a
        belief that may still be wide)."""
        new = self._step_chooser(rnd)(k, clock_s, self.learner.done())
        if new is None or (new.batch_size, new.freq_mhz) == (running.batch_size, running.freq_mhz):
            return running
        slow = self.learner.efficiency(DEADLINE_Z).get(running.batch_size, math.inf)
        per = running.time_per_batch_s / running.batch_size
        finish = clock_s + max(0.0, 1.0 - self.learner.done()) * slow * per
        deadline = rnd.context.get("deadline_s")
        on_time = isinstance(deadline, (int, float)) and finish <= float(deadline)
        cost = energy_per_sample if on_time else time_per_sample
        now = (running.batch_size, cost(_point(running)))
        then = (new.batch_size, cost(_point(new)))
        z = self.learner.switch_z(new.batch_size)
        return new if worth_switching(self.learner.belief, now, then, z) else running

    def _step_chooser(self, rnd: Round) -> Any:
        """The objective's per-step chooser on the learned work, priced ``DEADLINE_Z`` sd up:
        a deadline is met with some confidence, not by a coin toss."""
        obj = OBJECTIVES.get_entry(rnd.run.objective)
        assert obj.steps is not None  # rnd.chooser is set: the objective has its steps
        eff = self.efficiency(rnd, DEADLINE_Z)
        return obj.steps(rnd.profile.points, eff, rnd.schedule, rnd.context, "learned")

    def fastest_finish(self, rnd: Round, clock_s: float) -> float | None:
        """The earliest this device can reach its target from here: its fastest point under
        each budget step from now on, priced with what it learnt (None: it cannot finish)."""
        from fleet.core.deadline import fastest_per_step, finish, rates

        table = rates(rnd.profile.points, self.efficiency(rnd))
        later = fastest_per_step(table, rnd.schedule)
        k = step_index(rnd.schedule, clock_s)
        if later[k] is None:
            return None
        f, _ = finish(rnd.schedule, k, clock_s, self.learner.done(), later[k], later)
        return f if math.isfinite(f) else None

    def report(self, res: Any) -> None:
        """The row's learning columns: what the device learnt, and every fit. A device that met
        its target knows its count exactly."""
        if res.status in ("ok", "late"):
            self.learner.reached()
        ev = self.learner.evidence()
        if ev is not None:
            res.learned_batch_size = ev["batch_size"]
            res.learned_samples = ev["samples_to_target"]
            res.learned_log_sd = ev["log_sd"]
        res.efficiency_fits = [
            {k: v for k, v in e.items() if v is not None} for e in self.learner.events
        ]

    def state(self) -> dict[str, Any]:
        out = self.learner.state()
        out["next_eval"] = self.next_eval if math.isfinite(self.next_eval) else None
        return out

    def estimate(self) -> tuple[float | None, float | None]:
        """(samples to target at the running batch size, sd of its log) as believed now."""
        got = self.learner.estimate()
        return (None, None) if got is None else (got[1], got[2])


def _point(c: Choice) -> Point:
    return Point(c.batch_size, c.freq_mhz, c.time_per_batch_s, c.peak_power_w, c.mean_power_w)


def curves_for(trace_path: str, trace: Efficiency, target: float, seed: int) -> TraceCurves | None:
    """The recorded curves beside a trace file (``X.curves.csv``), or None when there are none.
    A malformed curves file, or one recorded to another target than the trace's, is an input
    error naming it."""
    path = curves_path(trace_path)
    if not path.is_file():
        return None
    curves = load_curves(path)
    recorded = agreed_target(curves, trace)
    if recorded is None:  # neither file says: the fleet's target
        recorded = target
    return trace_curves(curves, trace.reached, recorded, seed)
