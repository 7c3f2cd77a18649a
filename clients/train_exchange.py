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
from fleet.budgets.codec import format_budget, format_schedule
from fleet.common.errors import InputError
from fleet.config.fleetfile import RunSettings
from fleet.rounds.device_round import DeviceResult, Round, Segment


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
# what the agent's train may answer (fleet/agent/training/train_state.py); anything else is refused
TRAIN_STATUSES = ("reached", "not reached", "over-budget", "paused")


def train_extras(run: RunSettings) -> dict[str, Any]:
    """``[run]`` keys the agent's trainer takes as they are (``max_samples``...)."""
    keys = ("max_samples", "eval_every_samples", "guard_window_s")
    return {k: run.extra[k] for k in keys if run.extra.get(k) is not None}


def fill_from_train(res: DeviceResult, out: dict[str, Any], target: float) -> None:
    """The agent's closed-loop reply -> the row: measured time, energy and power, the first
    segment's (b, f), every segment and guard event, and the status.

    Measured power replaces the profile's, so a board that ran over its budget shows up in the
    report's budget violations. ``over-budget``: the guard ran out of clocks and stopped
    training (the checkpoint is kept on the board). ``paused``: a segment of the round ended
    (``segment_s``) before the target: the row says ``running``, its counters cumulative since
    the round began, and the next segment resumes from the board's checkpoint.
    """
    where = f"device {res.device}: agent train reply: field"
    status = out.get("status")
    if status is not None and status not in TRAIN_STATUSES:
        raise InputError(f"{where} 'status': {str(status)[:80]!r} is not a train status")
    numbers = {}
    for key in ("time_s", "energy_j", "peak_power_w", "mean_power_w", "accuracy", "samples"):
        value = out.get(key)
        if value is None:
            continue
        # NaN or text is a broken board, not a missing sensor: dropping it would let a row
        # with no energy pass as trained (the row checks bound what is there, not what is not);
        # checked before any is kept, so a refused reply leaves none of its numbers in the row
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where} '{key}': expected a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise InputError(f"{where} '{key}': {value!r} is not a finite number")
        numbers[key] = float(value)
    for key, value in numbers.items():
        setattr(res, key, value)
    segments = [s for s in out.get("segments") or [] if isinstance(s, dict)]
    res.segments = [segment_of(s) for s in segments]
    res.guard_events = [dict(e) for e in out.get("guard_events") or [] if isinstance(e, dict)]
    first = next((s for s in res.segments if s.batch_size is not None), None)
    if first is not None:
        res.batch_size, res.freq_mhz = first.batch_size, first.freq_mhz
    late = out.get("late") is True  # the board's deadline plan missed from the start
    if status == "paused":
        res.status = "running"
        res.message = f"segment ended at {out.get('samples')} samples; resumes from the checkpoint"
    elif status == "over-budget":
        res.status = "over-budget"
        res.message = str(out.get("stop_reason") or "the guard ran out of clocks under the budget")
    elif status == "reached" or (status is None and out.get("reached")):
        res.status, res.message = ("late" if late else "ok"), ""
    else:
        res.status = "not reached"
        res.message = f"target {target:g} not reached within {out.get('samples')} samples"
    fill_learning(res, out.get("learning"))
    notes = [str(n) for n in out.get("notes") or []]
    if notes:
        res.message = "; ".join(([res.message] if res.message else []) + notes)


def segment_of(s: dict[str, Any]) -> Segment:
    """One of the agent's segments as the row's ``Segment`` (its samples are not counted)."""

    def num(key: str) -> float | None:
        v = s.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    b, energy_j = s.get("batch_size"), num("energy_j")
    return Segment(
        start_s=num("start_s") or 0.0,
        end_s=num("end_s") or 0.0,
        budget_w=num("budget_w"),
        batch_size=int(b) if isinstance(b, (int, float)) else None,
        freq_mhz=num("freq_mhz"),
        samples=math.nan,
        energy_j=math.nan if energy_j is None else energy_j,
        peak_power_w=num("peak_power_w"),
        reason=str(s.get("reason") or ""),
    )


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _is_number(v: object) -> TypeGuard[int | float]:
    """A JSON number from the board (a bool is an int to Python, not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)
