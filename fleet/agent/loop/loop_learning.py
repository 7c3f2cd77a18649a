"""The closed loop learning its samples-to-target while it trains (the board's online correction).

Why separate: at every evaluation the trainer makes, the loop hands the accuracy to the device's
``EfficiencyLearner`` (and, with ``device`` learning, the gradient noise scale its training
steps show, ``noise_scale.NoiseTracker``). The ``LearnerHook`` owns that learner, the shipped
samples-to-target (the learner's prior) and the ones the loop chooses with. When the learner's
belief changes, the loop chooses again with it: under ``time``/``energy`` it takes the new point
only when the switch is worth it with confidence (``efficiency_learner.worth_switching``,
``LearnerHook.switch``), and at the next step boundary like any batch switch; under ``deadline``
the work left is re-priced (``DEADLINE_Z`` up) and the deadline re-selection runs at the next
step (``deadline_reselect``). Either way the new segment's reason is ``learned``. Following the
budget, the guard and the drift watch are untouched: a learnt choice is still made among the
points that fit the budget in force and the guard allows (the ``table.Table`` the loop hands).

The learner's state travels in the loop's record (``ClosedLoop.history``), so a resumed or
segmented run goes on learning where it stopped. Python 3.6 compatible.
"""

from typing import Any, Dict, List, Optional, Tuple

from fleet.agent.learning.efficiency_learner import (
    DEADLINE_Z,
    EfficiencyLearner,
    shape_from_noise,
    worth_switching,
)
from fleet.agent.loop.table import Key, Table
from fleet.method.point import Point

REASON_LEARNED = "learned"


def make_tracker(learner: Optional[EfficiencyLearner]) -> Any:
    """A noise tracker when the learner takes the noise scale's shape (torch is imported only
    then: the loop itself is stdlib)."""
    if learner is None or not learner.noise:
        return None
    from fleet.agent.learning.noise_scale import NoiseTracker

    return NoiseTracker()


class LearnerHook(object):
    """``learner`` (None: no learning), ``shipped`` (what the coordinator shipped, the learner's
    prior), ``efficiency`` (what the loop chooses with: learnt, when learning; ``DEADLINE_Z`` up
    for a deadline, on time with some confidence), ``noise_tracker`` (fed by the trainer)."""

    def __init__(
        self, learner: Optional[EfficiencyLearner], shipped: Dict[int, float], deadline: bool
    ) -> None:
        self.learner = learner
        self.shipped = dict(shipped)
        self.efficiency = dict(shipped)
        self.noise_tracker = make_tracker(learner)
        self._z = DEADLINE_Z if deadline else 0.0

    def active(self) -> bool:
        return self.learner is not None

    def _active(self) -> EfficiencyLearner:
        """The learner, for what only an active hook is asked (the loop checks ``active()``)."""
        assert self.learner is not None
        return self.learner

    def _learnt(self) -> Dict[int, float]:
        eff = self._active().efficiency(self._z)
        return dict((b, n) for b, n in eff.items() if b in self.shipped)

    def stepped(self, batch: int) -> None:
        """A training step at ``batch`` finished."""
        if self.learner is not None:
            self.learner.trained(batch, batch)

    def evaluated(self, accuracy: float, now: float) -> bool:
        """The trainer evaluated at ``now``: learn; True when the belief (and ``efficiency``)
        moved, so the loop chooses again."""
        learner = self.learner
        if learner is None:
            return False
        changed = False
        tracker = self.noise_tracker
        if tracker is not None:
            got = tracker.estimate()
            if got is not None:
                shape = shape_from_noise(got[0], learner.belief.batch_sizes)
                if shape is not None:
                    changed = learner.noise_shape(shape, got[1])
        changed = learner.evaluated(accuracy, now) or changed
        if changed:
            self.efficiency = self._learnt()
        return changed

    def done(self) -> float:
        """The fraction of the target done, as the learner prices it."""
        return self._active().done()

    def switch(
        self, table: Table, budget: Optional[float], objective: str, running: Key
    ) -> Optional[Point]:
        """The learnt choice under ``time``/``energy`` when switching to it from ``running`` is
        worth it with confidence, else None."""
        p = table.choose(budget, objective)
        cur = table.point(running[0], running[1])
        if p is None or cur is None or (p.batch_size, p.freq_mhz) == running:
            return None
        now, then = (cur.batch_size, _cost(cur, objective)), (p.batch_size, _cost(p, objective))
        learner = self._active()
        if worth_switching(learner.belief, now, then, learner.switch_z(p.batch_size)):
            return p
        return None

    def restore(self, prior: Dict[str, Any]) -> Optional[str]:
        """A resumed run: the learner goes on from the state its checkpoint saved; the note to
        make when that state is unusable."""
        state = (prior or {}).get("learning")
        if self.learner is None or not isinstance(state, dict):
            return None
        try:
            self.learner.restore(state)
        except ValueError as exc:
            return "learning: the checkpoint's state is unusable, starting afresh: {}".format(exc)
        self.efficiency = self._learnt()
        return None

    def reached(self) -> None:
        """The target is reached: the count at the running batch size is known now."""
        if self.learner is not None:
            self.learner.reached()

    def state(self) -> Optional[Dict[str, Any]]:
        return self.learner.state() if self.learner is not None else None

    def summary(self) -> Optional[Dict[str, Any]]:
        return self.learner.summary() if self.learner is not None else None

    def progress_fields(
        self, table: Table, ahead: Optional[List[Tuple[float, Optional[float]]]],
        budget: Optional[float], now: float,
    ) -> Dict[str, Any]:  # fmt: skip
        """The learning part of a segment's progress: the estimate at the running batch size and
        the device's own fastest finish from here (``deadline.finish`` on the learnt work)."""
        learner = self.learner
        if learner is None:
            return {}
        got = learner.estimate()
        if got is None:
            return {}
        from fleet.method.deadline import fastest_finish_from

        finish = fastest_finish_from(
            table.points, learner.efficiency(), ahead or [(0.0, budget)], now, learner.done(),
            table.excluded, table.max_batch,
        )  # fmt: skip
        return {
            "samples_to_target": got[1],
            "samples_to_target_sd": got[2],
            "fastest_finish_s": finish,
            "done": learner.done(),
        }


def _cost(p: Any, objective: str) -> float:
    per = p.time_per_batch_s / p.batch_size
    return per * p.mean_power_w if objective == "energy" else per
