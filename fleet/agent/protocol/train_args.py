"""The ``train`` request, checked before anything runs: its arguments, data file and closed loop.

Why separate: a train request has many arguments, and every one of them is checked up front,
because once training starts the device is locked (and restored on every way out); this module
turns the request into checked values (the data tensors, the closed loop's budget source,
profile points, efficiency, objective, deadline and drift settings) and refuses a bad one with
one line naming it. Running the command is ``train_command.py``. Python 3.6 compatible.
"""

import logging
import os
from typing import Any, Dict, List, Optional

from fleet.agent.loop.loop_plan import LoopPlan
from fleet.agent.protocol.handler_api import bool_arg, number, path_arg
from fleet.agent.protocol.wire import ProtocolError, error_line

log = logging.getLogger("fleet.agent")

# The request's argument names and kinds are the kernel's ``TrainRequest``
# (``fleet/method/records.py``); this module checks what they say.


def load_train_data(path: str) -> Any:
    """The coordinator's .pt file: {"train": (x, y), "test": (x, y)} of tensors."""
    import torch

    from fleet.agent.training.checkpoint import torch_load_cpu

    if not os.path.isfile(path):
        raise ProtocolError("data file {} not found".format(path))
    try:
        blob = torch_load_cpu(path)
    except Exception as exc:  # noqa: BLE001 - one clear line for any unreadable file
        raise ProtocolError(
            "data file {} is unreadable: {}".format(path, error_line(exc))
        ) from None
    ok = isinstance(blob, dict) and all(
        isinstance(blob.get(s), (list, tuple))
        and len(blob[s]) == 2
        and all(isinstance(t, torch.Tensor) for t in blob[s])
        for s in ("train", "test")
    )
    if not ok:
        raise ProtocolError(
            'data file {} must hold {{"train": (x, y), "test": (x, y)}} tensors'.format(path)
        )
    return tuple(blob["train"]), tuple(blob["test"])


def segment_arg(req: Dict[str, Any], checkpoint: Optional[str]) -> Optional[float]:
    """``segment_s``: seconds of training time this call trains before it pauses at its next
    evaluation; a paused run resumes only from its checkpoint, so it needs ``checkpoint``."""
    value = number(req, "segment_s")
    if value is None:
        return None
    if not 0 < value < float("inf"):
        raise ProtocolError(
            "'segment_s' must be a positive number of seconds, got {!r}".format(value)
        )
    if checkpoint is None:
        raise ProtocolError("'segment_s' needs 'checkpoint' (the file a paused run resumes from)")
    return float(value)


def closed_loop_args(req: Dict[str, Any]) -> Optional[LoopPlan]:
    """The closed loop's inputs, or None for a fixed (batch, freq) run; all checked up front."""
    from fleet.agent.learning.efficiency_learner import learning_mode
    from fleet.method.budget import BudgetError, make_source
    from fleet.method.selection import ChooseError, efficiency_from, lut_from_rows

    keys = ("budget_w", "budget_schedule", "budget_file")
    if all(req.get(k) is None for k in keys):
        for k in (
            "profile", "efficiency", "objective", "deadline_s", "guard_window_s",
            "learn_efficiency", "efficiency_std", "efficiency_source", "efficiency_law_err",
        ):  # fmt: skip
            if req.get(k) is not None:
                raise ProtocolError(
                    "'{}' needs a budget (budget_w, budget_schedule or budget_file)".format(k)
                )
        return None
    if req.get("freq_mhz") is not None:
        raise ProtocolError("'freq_mhz' and a budget exclude each other (the loop picks clocks)")
    try:
        source = make_source(  # text in the grammar's exact form, or a JSON number: parsed once
            req.get("budget_w"),
            req.get("budget_schedule"),
            path_arg(req, "budget_file"),
            warn=lambda m: log.warning("%s", m),
        )
        prof = req.get("profile")
        if isinstance(prof, str) and prof:
            points = lut_from_rows((r for _, r in _csv_rows(prof)), prof)
        elif isinstance(prof, list):
            points = lut_from_rows(prof, "profile rows")
        else:
            raise ProtocolError("a closed-loop train needs 'profile' (rows or a CSV path)")
        eff = req.get("efficiency")
        if isinstance(eff, str) and eff:
            rows = [r for _, r in _csv_rows(eff)]
            eff = {r.get("batch_size"): r.get("samples_to_accuracy") for r in rows}
            efficiency = efficiency_from(eff, req["efficiency"])
        elif isinstance(eff, dict):
            efficiency = efficiency_from(eff, "efficiency")
        else:
            raise ProtocolError(
                "a closed-loop train needs 'efficiency' ({batch: samples}, "
                '{"batch_sizes": [...], "samples_to_accuracy": [...]} or a CSV path)'
            )
    except (BudgetError, ChooseError) as exc:
        raise ProtocolError(str(exc)) from None
    objective = str(req.get("objective") or "time")
    if objective not in ("time", "energy", "deadline"):
        raise ProtocolError(
            "'objective' must be time, energy or deadline, got {!r}".format(objective)
        )
    deadline_s = _deadline_arg(req, objective, points)
    try:
        learn = learning_mode(req.get("learn_efficiency"))
    except ValueError as exc:
        raise ProtocolError("'learn_efficiency': {}".format(exc)) from None
    return LoopPlan(
        points,
        efficiency,
        source,
        objective=objective,
        deadline_s=deadline_s,
        guard_window_s=float(number(req, "guard_window_s", 0.2)),
        drift=_drift_args(req, prof),
        pace=bool_arg(req, "pace", False),
        learn=learn,
        efficiency_meta=_efficiency_meta(req, efficiency),
    )


def _efficiency_meta(req: Dict[str, Any], efficiency: Dict[int, float]) -> Dict[str, Any]:
    """The shipped vector's spread and origin, when the request carries them
    (``efficiency_std``: {batch: std in samples}, ``efficiency_source``): how far the learner
    may trust it as a prior. Entries that are not plausible numbers are left out."""
    out = {"rel_std": {}, "source": None, "law_err": None}  # type: Dict[str, Any]
    raw = req.get("efficiency_std")
    if isinstance(raw, dict):
        for b, v in raw.items():
            try:
                bi = int(b)
            except (TypeError, ValueError):
                continue
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            n = efficiency.get(bi)
            if ok and n and 0 <= v < 1e15:
                out["rel_std"][bi] = float(v) / n
    source = req.get("efficiency_source")
    if isinstance(source, str):
        out["source"] = source[:64]
    law = req.get("efficiency_law_err")
    if isinstance(law, (int, float)) and not isinstance(law, bool) and 0 <= law < 100:
        out["law_err"] = float(law)
    return out


def _deadline_arg(req: Dict[str, Any], objective: str, points: List[Any]) -> Optional[float]:
    """``deadline_s`` (seconds from the loop's start): required by, and only for, the deadline
    objective, which also needs the profile's power (``deadline.py``)."""
    from fleet.method.deadline import check_deadline_s, check_power
    from fleet.method.selection import ChooseError

    raw = req.get("deadline_s")
    if objective != "deadline":
        if raw is not None:
            raise ProtocolError("'deadline_s' is only for objective deadline")
        return None
    if raw is None:
        raise ProtocolError("objective deadline needs 'deadline_s' (seconds from the start)")
    try:
        deadline_s = check_deadline_s(raw, "'deadline_s'")
        check_power(points, "profile")
    except ChooseError as exc:
        raise ProtocolError(str(exc)) from None
    return deadline_s


def _drift_args(req: Dict[str, Any], prof: Any) -> Dict[str, Any]:
    """The loop's drift watch (``driftwatch.py``): on unless ``drift`` is false; the profile's
    rows and header are kept so the refreshed file is the same table, refreshed."""
    if not bool_arg(req, "drift", True):
        return {"off": True}
    out = {
        "time_tol": float(number(req, "drift_time_tol", 0.10)),
        "power_tol": float(number(req, "drift_power_tol", 0.08)),
        "out_path": path_arg(req, "refreshed_profile"),
    }  # type: Dict[str, Any]
    if not out["time_tol"] > 0 or not out["power_tol"] > 0:
        raise ProtocolError("'drift_time_tol' and 'drift_power_tol' must be > 0")
    if isinstance(prof, str):
        from fleet.method.profile_io import read_rows

        _header, numbered, comments = read_rows(prof)
        out["rows"], out["comments"] = [r for _, r in numbered], comments
    else:
        out["rows"] = [dict(r) for r in prof]
    return out


def _csv_rows(path: str) -> Any:
    from fleet.method.profile_io import read_rows

    if not os.path.isfile(path):
        raise ProtocolError("file {} not found".format(path))
    return read_rows(path)[1]
