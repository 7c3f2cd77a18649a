"""The closed-loop ``train`` exchange with the agent: what the request carries, how the
reply fills the round's row.

The request: the device's budget (live file, else schedule, else fixed), the aligned profile's
rows, the shipped efficiency and the objective (:func:`budget_args`), plus the ``[run]`` keys
the trainer takes as they are (:func:`train_extras`). The reply: measured time, energy and
power, every segment and guard event, and the status (:func:`fill_from_train`).

Separate from ``hardware_client.py`` (which runs the round on the agent) because this is the
data mapping alone: plain dicts in and out, testable without an agent.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from clients.agent_link import AgentSettings
from fleet.common.errors import InputError
from fleet.config.fleetfile import RunSettings
from fleet.core.choice import make_choice
from fleet.method.agent_records import TRAIN_STATUSES, TrainReply
from fleet.method.budget import format_budget, format_schedule
from fleet.method.records import RecordError
from fleet.rounds.device_round import DeviceResult, Round


def budget_args(rnd: Round, settings: AgentSettings) -> dict[str, Any]:
    """The closed loop's inputs: the budget (live file, else schedule, else fixed), the aligned
    profile's rows and the shipped efficiency, and the objective when the board's chooser has it
    (``deadline`` with the round's ``deadline_s``, from ``[run]`` or the planning exchange: the
    board then keeps every re-selection on the deadline, ``fleet/method/deadline.py``).
    """
    args: dict[str, Any] = {}
    if settings.budget_file:
        args["budget_file"] = settings.budget_file
    elif len(rnd.schedule) > 1:
        args["budget_schedule"] = format_schedule(rnd.schedule)
    else:
        args["budget_w"] = format_budget(rnd.schedule[0].budget_w)
    args["profile"] = [
        {
            "batch_size": p.batch_size,
            "freq_mhz": p.freq_mhz,
            "time_per_batch_s": p.time_per_batch_s,
            "peak_power_w": _finite(p.peak_power_w),
            "mean_power_w": _finite(p.mean_power_w),
        }
        for p in rnd.profile.points
    ]
    args.update(efficiency_args(rnd))
    args["learn_efficiency"] = learning_arg(rnd)
    if settings.pace_to_profile:
        args["pace"] = True
    objective = rnd.run.objective
    if objective == "deadline":
        deadline = rnd.context.get("deadline_s")  # run_device refuses a deadline run without
        if deadline is not None:
            args["objective"], args["deadline_s"] = objective, float(deadline)
    elif objective in BOARD_OBJECTIVES:
        args["objective"] = objective
    return args


def efficiency_args(rnd: Round) -> dict[str, Any]:
    """The shipped vector as the agent reads it (``{batch: samples}``), with its spread and
    origin when known (``efficiency_std``, ``efficiency_source``: a vector the fleet learnt
    is trusted more as the learner's prior)."""
    out: dict[str, Any] = {
        "efficiency": {str(b): _finite(n) for b, n in rnd.shipped.samples.items()}
    }
    if rnd.shipped.std:
        out["efficiency_std"] = {str(b): _finite(v) for b, v in rnd.shipped.std.items()}
    source = rnd.shipped.metadata.get("source")
    if source:
        out["efficiency_source"] = str(source)[:64]
    from fleet.rounds.learning import law_err

    law = law_err(rnd.shipped)
    if law is not None:
        out["efficiency_law_err"] = law
    return out


def learning_arg(rnd: Round) -> str:
    """``[run] learn_efficiency`` as the agent takes it (checked: one line naming the key)."""
    from fleet.rounds.learning import mode_of

    return mode_of(rnd)


def fill_learning(res: DeviceResult, learning: Any) -> None:
    """The agent's ``learning`` summary -> the row's learned columns and fits (values from
    another machine: the evidence is kept only when it is plausible, ``reply_check`` bounds it
    again before the aggregate)."""
    if not isinstance(learning, dict):
        return
    ev = learning.get("evidence")
    if isinstance(ev, dict):
        b, n, sd = ev.get("batch_size"), ev.get("samples_to_target"), ev.get("log_sd")
        if _is_number(b) and _is_number(n) and _is_number(sd):
            if b >= 1 and b == int(b) and 0 < n < 1e15 and 0 < sd < 100:
                res.learned_batch_size, res.learned_samples, res.learned_log_sd = int(b), n, sd
    fits = learning.get("fits")
    if isinstance(fits, list):
        res.efficiency_fits = [
            {k: v for k, v in f.items() if v is None or isinstance(v, (int, float, str))}
            for f in fits[-200:]
            if isinstance(f, dict)
        ]


# The objectives the board's closed loop knows (fleet/agent/loop/closedloop.py); others keep its
# default (time).
BOARD_OBJECTIVES = ("time", "energy", "deadline")


def train_extras(run: RunSettings) -> dict[str, Any]:
    """``[run]`` keys the agent's trainer takes as they are (``max_samples``...)."""
    keys = ("max_samples", "eval_every_samples", "guard_window_s")
    return {k: getattr(run, k) for k in keys if getattr(run, k) is not None}


def fill_from_train(res: DeviceResult, out: dict[str, Any], target: float) -> None:
    """The agent's closed-loop reply (``fleet.method.agent_records.TrainReply``, checked: an unknown
    field, a wrong type or an implausible number is refused in one line) -> the row: measured
    time, energy and power, the point the board chose at the start (``batch_size``/
    ``freq_mhz``), the point running at the end (``end_batch_size``/``end_freq_mhz``), every
    segment and guard event, and the status.

    Measured power replaces the profile's, so a board that ran over its budget shows up in the
    report's budget violations. ``over-budget``: the guard ran out of clocks and stopped
    training (the checkpoint is kept on the board), or the run's budget statistic spent time
    above the budget (``over_budget_s``/``over_budget_j``; the board's note says how much).
    ``paused``: a segment of the round ended (``segment_s``) before the target: the row says
    ``running``, its counters cumulative since the round began, and the next segment resumes
    from the board's checkpoint. ``error``: the board refused a setting mid-run (a clock it
    could not set) and stopped; the row says ``error`` and the board's reason.
    """
    where = f"device {res.device}: agent train reply"
    try:
        reply = TrainReply.from_dict({k: v for k, v in out.items() if k not in ("id", "ok")}, where)
    except RecordError as exc:
        raise InputError(str(exc)) from None
    status = reply.status
    if status not in TRAIN_STATUSES:
        raise InputError(f"{where}: field 'status': {str(status)[:80]!r} is not a train status")
    for key in ("time_s", "energy_j", "peak_power_w", "mean_power_w", "accuracy"):
        if getattr(reply, key) is not None:
            setattr(res, key, getattr(reply, key))
    if reply.accuracy is not None:  # the board evaluated its model on held-out data
        res.accuracy_source = "measured"
    res.samples = reply.samples
    res.over_budget_s, res.over_budget_j = reply.over_budget_s, reply.over_budget_j
    res.segments = list(reply.segments)
    res.guard_events = [dict(e) for e in reply.guard_events if isinstance(e, dict)]
    if reply.start_batch_size is not None:
        res.batch_size, res.freq_mhz = reply.start_batch_size, reply.start_freq_mhz
    res.end_batch_size, res.end_freq_mhz = reply.end_batch_size, reply.end_freq_mhz
    late = reply.late is True  # the board's deadline plan missed from the start
    if status == "paused":
        res.status = "running"
        res.message = f"segment ended at {out.get('samples')} samples; resumes from the checkpoint"
    elif status in ("over-budget", "error"):
        # stopped by the guard or spent time above the budget; or the board refused a setting
        # mid-run (a clock it could not set): the row says so, with the board's reason
        res.status, res.message = status, str(reply.stop_reason or "")
    elif status == "reached":
        res.status, res.message = ("late" if late else "ok"), ""
    else:
        res.status = "not reached"
        res.message = f"target {target:g} not reached within {out.get('samples')} samples"
    fill_learning(res, reply.learning)
    notes = [str(n) for n in reply.notes]
    if notes:
        res.message = "; ".join(([res.message] if res.message else []) + notes)


def predict_start(res: DeviceResult, rnd: Round) -> None:
    """``predicted_time_s`` for the start point the row names: the board's closed loop may
    start elsewhere than the host's choice (its own clocks, a budget file read at its start);
    the prediction then follows the row's start point (None when the profile lacks it), so a
    row never names one point and predicts another."""
    first = rnd.first
    if (res.batch_size, res.freq_mhz) == (first.batch_size, first.freq_mhz):
        return
    b, f = res.batch_size, res.freq_mhz
    p = rnd.profile.point(b, f) if b is not None and f is not None else None
    if p is None:
        res.predicted_time_s = None
        return
    n = rnd.shipped.samples.get(p.batch_size, math.nan)
    res.predicted_time_s = make_choice(p, n, "ours", rnd.run.objective).predicted_time_s


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _is_number(v: object) -> TypeGuard[int | float]:
    """A JSON number from the board (a bool is an int to Python, not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)
