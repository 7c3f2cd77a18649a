"""Fine-tune under the closed loop: the one entry point ``powerfleet train`` and the agent share.

Why separate: the loop (``closedloop.py``) knows nothing of models or data; this joins it to the
trainer (``trainer.train_to_target``, with the loop as its per-step controller and its sampler as
the power reader), sets up the drift watch from the request's settings and merges the trainer's
result with the loop's summary. The device is restored on every way out. Python 3.6 compatible.
"""

import math
from typing import Any, Callable, Dict, Optional, Tuple

from fleet.agent.devices.base import Backend
from fleet.agent.learning.efficiency_belief import trust_for
from fleet.agent.learning.efficiency_learner import EfficiencyLearner
from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.driftwatch import DriftWatch, rows_from_points
from fleet.agent.loop.loop_plan import LoopHooks, LoopParts, LoopPlan
from fleet.agent.loop.segments import finite
from fleet.agent.measure.sampler import sensor_hz
from fleet.agent.training.plan import TrainHooks, TrainPlan
from fleet.method.agent_records import (
    STATUS_ERROR,
    STATUS_OVER_BUDGET,
    STATUS_PAUSED,
    STATUS_REACHED,
)


def train_under_budget(
    backend: Backend,
    model: Any,
    train_set: Any,
    test_set: Any,
    plan: TrainPlan,
    loop_plan: LoopPlan,
    device: Any = "cpu",
    checkpoint_path: Optional[str] = None,
    hooks: Optional[TrainHooks] = None,
    log: Optional[Callable[[str], None]] = None,
) -> Tuple[Any, Dict[str, Any]]:
    """Fine-tune under the closed loop; the device is restored on every way out.

    The one entry point shared by ``powerfleet train`` and the agent's ``train`` command:
    ``plan`` goes to ``trainer.train_to_target`` (its ``batch_size``/``lr`` are the
    learning-rate reference pair there), ``loop_plan`` (``loop_plan.py``) sets up the loop;
    of ``hooks`` the progress callback, its interval, the noise tracker and the sampler's rate
    are used (the loop is the controller and its sampler the power reader).
    Returns (TrainResult, ``ClosedLoop.summary()``) with the
    summary's ``status`` set to the trainer's unless the loop stopped the run.

    ``loop_plan.drift``: without ``rows``, the watch reads the rows of ``points``;
    ``powerfleet train`` and the agent's ``train`` turn it on by default. ``loop_plan.learn``:
    the loop corrects the shipped samples-to-target from the run's own evaluations (and, with
    ``device``/``all``, the gradient noise scale of its steps) and re-selects
    (``loop_learning.py``).

    ``plan.segment_s`` (with ``checkpoint_path``): one segment of a longer run
    (``trainer`` module docstring): status ``paused`` when it stopped at its evaluation; the
    result's counters and the summary's record are the whole run's, and ``summary["progress"]``
    is where the run stands (``segments.loop_progress``).
    """
    from fleet.agent.training.trainer import train_to_target

    n_train = _length(train_set)
    hooks = hooks if hooks is not None else TrainHooks()
    sampler_hz = sensor_hz(backend, hooks.sampler_hz)  # the loop's one sampler; drift times by it
    points, efficiency, learn = loop_plan.points, loop_plan.efficiency, loop_plan.learn
    watch = None  # type: Optional[DriftWatch]
    opts = dict(loop_plan.drift or {"off": True})
    if not opts.pop("off", False):
        rows = opts.pop("rows", None) or rows_from_points(points)
        watch = DriftWatch(rows, hz=sampler_hz, **opts)
    learner = None
    if learn != "none":
        meta = loop_plan.efficiency_meta or {}
        learner = EfficiencyLearner(
            efficiency,
            float(plan.target_accuracy),
            meta.get("rel_std"),
            trust_for(meta.get("source")),
            online=learn in ("online", "all"),
            noise=learn in ("device", "all"),
            every=plan.eval_every_samples,
            law_err=meta.get("law_err"),
        )
    parts = LoopParts(drift=watch, learner=learner, max_batch=n_train)
    loop = ClosedLoop(backend, loop_plan, parts, LoopHooks(hz=sampler_hz, log=log))
    counter = getattr(backend, "energy_counter_mj", None)  # NVML: the GPU's own energy counter
    counter_mj0 = counter() if callable(counter) else None
    with loop:
        result = train_to_target(
            model,
            train_set,
            test_set,
            plan,
            hooks._replace(power_read=loop.sampler, sampler_hz=sampler_hz, controller=loop),
            device=device,
            checkpoint_path=checkpoint_path,
        )
    if result.status == STATUS_REACHED:
        loop.reached()  # a learner knows the count at the running batch size now
    summary = loop.summary()
    counter_mj1 = counter() if callable(counter) else None
    if counter_mj0 is not None and counter_mj1 is not None:
        # Beside the sampled energy_j (this call's): the hardware counter over the same call.
        summary["counter_energy_j"] = (counter_mj1 - counter_mj0) / 1000.0
    if summary["status"] is None or result.status == STATUS_REACHED:
        summary["status"] = result.status
    over_budget(summary)
    summary["batch_size"] = loop.batch_size
    summary["freq_mhz"] = loop.freq_mhz
    summary["progress"] = run_progress(
        loop, result.samples, result.train_time_s, result.energy_j, result.final_accuracy,
        result.sessions, result.status == STATUS_REACHED,
    )  # fmt: skip
    return result, summary


def over_budget(summary: Dict[str, Any]) -> None:
    """A run whose budget statistic spent any time above the budget is not a clean result: its
    status becomes ``over-budget`` (the target's verdict stays in ``samples_to_accuracy``) and a
    note says how long and how much (a paused segment keeps ``paused``: the round goes on, and
    the record it carries is cumulative; a run the device stopped by refusing a setting keeps
    ``error``: the clock it could not lower is why it ran over, and the note still says how
    much)."""
    seconds = summary.get("over_budget_s") or 0.0
    was = summary["status"]
    if not seconds > 0 or was == STATUS_PAUSED:
        return
    if was != STATUS_ERROR:
        summary["status"] = STATUS_OVER_BUDGET
    summary["notes"].append(
        "over budget: {:.3g} s and {:.3g} J above the budget in {} excursion(s) (longest "
        "{:.3g} s) of the power averaged over {:.3g} s; training {}".format(
            seconds, summary.get("over_budget_j") or 0.0, summary["over_budget_excursions"],
            summary["longest_over_budget_s"], summary["power_window_s"] or 0.0,
            "reached the target" if was == STATUS_REACHED else "ended: {}".format(was),
        )
    )  # fmt: skip


def run_progress(
    loop: ClosedLoop, samples: int, time_s: float, energy_j: Optional[float],
    accuracy: Optional[float], segments: int, reached: bool,
) -> Dict[str, Any]:  # fmt: skip
    """Where the run is, in ``fleet.rounds.progress.Progress``'s fields (the coordinator's view
    of a segmented round), from the stopped loop's parts: the point running at the end, the last
    power sample, and how far along the target it is. ``done``: the learner's belief when it
    has one, else the deadline objective's own count (each step adds b / N(b)), else the samples
    over N(b) at the running batch size; ``eta_s``: the samples left at the running point times
    its profiled time per sample (None when the point or N(b) is unknown)."""
    b, f = loop.running.key()
    n = loop.learning.efficiency.get(b)
    table = loop.table()
    learnt = {}  # type: Dict[str, Any]
    if not reached:
        learnt = loop.learning.progress_fields(
            table, loop.follower.ahead, loop.budget_w, loop.now()
        )
    if reached:
        done = 1.0
    elif "done" in learnt:
        done = learnt.pop("done")  # what the device believes, as the learner prices it
        n = learnt.get("samples_to_target") or n
    elif loop.deadline is not None:
        done = loop.deadline.done
    else:
        done = samples / n if n else 0.0
    done = min(1.0, max(0.0, done))
    point = table.point(b, f)
    eta = None  # type: Optional[float]
    if reached:
        eta = 0.0
    elif n and point is not None and b > 0 and math.isfinite(point.time_per_batch_s):
        eta = n * (1.0 - done) / b * point.time_per_batch_s
    out = {
        "time_s": time_s,
        "samples": samples,
        "energy_j": energy_j,
        "accuracy": finite(accuracy),
        "batch_size": b or None,
        "freq_mhz": f or None,
        "budget_w": finite(loop.budget_w),
        "power_w": loop.log.last_power_w,
        "done": done,
        "eta_s": eta,
        "segments": segments,
    }  # type: Dict[str, Any]
    out.update(learnt)
    return out


def _length(data: Any) -> Optional[int]:
    tensors = getattr(data, "tensors", None)
    if tensors is not None:
        data = tensors
    if isinstance(data, (tuple, list)) and data:
        return len(data[0])
    try:
        return len(data)
    except TypeError:
        return None
