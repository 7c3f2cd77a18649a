"""Real training on the host that learns its efficiency online: the trainer's controller.

Why: a simulated device that trains for real (``fleet.rounds.host_training``) is the analogue of a
board, and a board corrects the shipped samples-to-target from its own evaluations and switches
batch size when that pays (``fleet/agent/loop/loop_learning.py``). Here the trainer's controller
does
the same with the same learner and choosers (``fleet.rounds.learning``), but keeps time on the
*device's* clock: every step is priced at its point's profiled time, never the host's, so a laptop
simulates a Nano honestly. A budget schedule is followed on that clock (a step that admits
nothing is idled through: the clock runs on, nothing is trained or charged). The trainer applies
a batch switch at the next step, with the learning-rate rule, and counts samples across it.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.core.choice import Choice
from fleet.method.budget import step_index
from fleet.rounds.device_round import DeviceResult, Round, Segment
from fleet.rounds.learning import ReplayLearning


class LearnedBatch:
    """The trainer's controller: the batch size the learner's choice says, time from the LUT."""

    def __init__(self, rnd: Round, learning: ReplayLearning, first: Choice) -> None:
        self.rnd = rnd
        self.learning = learning
        self.learner = learning.learner
        self.choice: Choice | None = first
        self.clock = 0.0
        self.k = 0
        self.segments: list[Segment] = []
        self.reason = "start"
        self.noise_tracker = _tracker(self.learner)
        self._open()

    # -- the trainer's hooks ----------------------------------------------------------------------
    def before_step(self) -> tuple[int, bool]:
        self._follow_schedule()
        if self.choice is None:  # nothing fits now or later: stop (the row says why)
            return self.segments[-1].batch_size or 1, True
        return self.choice.batch_size, False

    def after_step(self) -> None:
        c = self.choice
        if c is None:
            return
        seg = self.segments[-1]
        seg.samples += c.batch_size
        run = seg.samples * c.time_per_batch_s / c.batch_size  # one product: no drift of sums
        seg.end_s = seg.start_s + run
        seg.energy_j = c.mean_power_w * run
        self.clock = seg.end_s
        self.learner.trained(c.batch_size, c.batch_size)

    def evaluated(self, samples: int, accuracy: float) -> None:
        changed = False
        if self.noise_tracker is not None:
            got = self.noise_tracker.estimate()
            if got is not None:
                changed = self.learning.noise_reading(got[0], got[1])
        changed = self.learner.evaluated(accuracy, self.clock) or changed
        if not changed or self.choice is None:
            return
        new = self.learning.rechoose(self.rnd, self.k, self.clock, self.choice, None)
        if (new.batch_size, new.freq_mhz) != (self.choice.batch_size, self.choice.freq_mhz):
            self.choice, self.reason = new, "learned"
            self._open()

    # -- helpers --------------------------------------------------------------------------------
    def _follow_schedule(self) -> None:
        sched = self.rnd.schedule
        while True:
            k = step_index(sched, self.clock)
            if k == self.k:
                return
            self.k = k
            self.choice = self.learning.choose(self.rnd, k, self.clock, None)
            self.reason = "budget"
            if self.choice is not None:
                self._open()
                return
            if k + 1 >= len(sched):  # the last step admits nothing: no more training
                return
            self.clock = sched[k + 1].at_s  # idle through the step

    def _open(self) -> None:
        c, budget = self.choice, self.rnd.schedule[self.k].budget_w
        if c is None:
            return
        self.segments.append(
            Segment(
                self.clock, self.clock, budget, c.batch_size, c.freq_mhz, 0.0, 0.0,
                c.peak_power_w, self.reason,
            )
        )  # fmt: skip

    def fill(self, res: DeviceResult) -> None:
        """The row's time, energy, samples, peak and segments from what ran."""
        segs = [s for s in self.segments if s.samples > 0]
        res.segments = segs
        res.time_s = self.clock
        res.energy_j = sum(s.energy_j for s in segs)
        res.samples = sum(s.samples for s in segs)
        peaks = [s.peak_power_w for s in segs if s.peak_power_w is not None]
        res.peak_power_w = max(peaks) if peaks else res.peak_power_w
        if segs:
            res.batch_size, res.freq_mhz = segs[0].batch_size, segs[0].freq_mhz


def _tracker(learner: Any) -> Any:
    from fleet.agent.loop.loop_learning import make_tracker

    return make_tracker(learner)


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
