"""The closed loop learning its samples-to-target while it trains (the board's online correction).

Why separate: at every evaluation the trainer makes, the loop hands the accuracy to the device's
``EfficiencyLearner`` (and, with ``device`` learning, the gradient noise scale its training
steps show, ``noise_scale.NoiseTracker``). When the learner's belief changes, the loop chooses
again with it: under ``time``/``energy`` it takes the new point only when the switch is worth
it with confidence (``efficiency_learner.worth_switching``), and at the next step boundary like
any batch switch; under ``deadline`` the work left is re-priced (``DEADLINE_Z`` up) and the
deadline re-selection runs at the next step (``deadline_reselect``). Either way the new segment's
reason is ``learned``. Following the budget, the guard and the drift watch are untouched: a
learnt choice is still made among the points that fit the budget in force and the guard allows.

The learner's state travels in the loop's record (``segments.loop_history``), so a resumed or
segmented run goes on learning where it stopped.

The functions take the ``ClosedLoop`` and run with its lock held. Python 3.6 compatible.
"""

from typing import Any, Dict, Optional

from fleet.agent.learning.efficiency_learner import (
    DEADLINE_Z,
    EfficiencyLearner,
    shape_from_noise,
    worth_switching,
)
from fleet.method.selection import choose

REASON_LEARNED = "learned"


def make_tracker(learner: Optional[EfficiencyLearner]) -> Any:
    """A noise tracker when the learner takes the noise scale's shape (torch is imported only
    then: the loop itself is stdlib)."""
    if learner is None or not learner.noise:
        return None
    from fleet.agent.learning.noise_scale import NoiseTracker

    return NoiseTracker()


def loop_efficiency(loop: Any) -> Dict[int, float]:
    """The samples-to-target the loop chooses with: the learner's (``DEADLINE_Z`` up for a
    deadline: on time with some confidence), else the shipped vector."""
    learner = loop.learner
    if learner is None:
        return dict(loop.shipped)
    eff = learner.efficiency(DEADLINE_Z if loop.deadline_s is not None else 0.0)
    return dict((b, n) for b, n in eff.items() if b in loop.shipped)


def stepped(loop: Any) -> None:
    """A training step at the running batch size finished."""
    if loop.learner is not None:
        loop.learner.trained(loop._batch, loop._batch)


def evaluated(loop: Any, samples: int, accuracy: float) -> None:
    """The trainer evaluated: learn, and choose again if the belief moved."""
    learner = loop.learner
    if learner is None:
        return
    t = loop.now()
    changed = False
    tracker = loop.noise_tracker
    if tracker is not None:
        got = tracker.estimate()
        if got is not None:
            shape = shape_from_noise(got[0], learner.belief.batch_sizes)
            if shape is not None:
                changed = learner.noise_shape(shape, got[1])
    changed = learner.evaluated(accuracy, t) or changed
    if not changed:
        return
    loop.efficiency = loop_efficiency(loop)
    if loop.deadline_s is not None:
        loop.done = learner.done()
        loop._reselect = True  # the deadline point for the work left, at the next step
        loop._reselect_reason = REASON_LEARNED
        return
    if loop._pending is not None or loop.stop_reason is not None:
        return  # a budget change is being applied: it chooses with the new belief anyway
    p = choose(
        loop.points, loop.efficiency, loop._budget, loop.objective, loop.infeasible,
        loop.max_batch,
    )  # fmt: skip
    cur = loop._point(loop._batch, loop._freq)
    if p is None or cur is None or (p.batch_size, p.freq_mhz) == (cur.batch_size, cur.freq_mhz):
        return
    now, then = (cur.batch_size, _cost(loop, cur)), (p.batch_size, _cost(loop, p))
    if worth_switching(learner.belief, now, then, learner.switch_z(p.batch_size)):
        loop._pending = p
        loop._pending_reason = REASON_LEARNED


def _cost(loop: Any, p: Any) -> float:
    per = p.time_per_batch_s / p.batch_size
    return per * p.mean_power_w if loop.objective == "energy" else per


def restore(loop: Any, prior: Dict[str, Any]) -> None:
    """A resumed run: the learner goes on from the state its checkpoint saved."""
    state = (prior or {}).get("learning")
    if loop.learner is None or not isinstance(state, dict):
        return
    try:
        loop.learner.restore(state)
    except ValueError as exc:
        loop._note("learning: the checkpoint's state is unusable, starting afresh: {}".format(exc))
        return
    loop.efficiency = loop_efficiency(loop)


def progress_fields(loop: Any) -> Dict[str, Any]:
    """The learning part of a segment's progress: the estimate at the running batch size and
    the device's own fastest finish from here (``deadline.finish`` on the learnt work)."""
    learner = loop.learner
    if learner is None:
        return {}
    got = learner.estimate()
    if got is None:
        return {}
    from fleet.method.deadline import fastest_finish_from

    schedule = loop._schedule or [(0.0, loop._budget)]
    finish = fastest_finish_from(
        loop.points, learner.efficiency(), schedule, loop.now(), learner.done(),
        loop.infeasible, loop.max_batch,
    )  # fmt: skip
    return {
        "samples_to_target": got[1],
        "samples_to_target_sd": got[2],
        "fastest_finish_s": finish,
        "done": learner.done(),
    }
