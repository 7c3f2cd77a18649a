"""The trainer's files: the resumable checkpoint (save, verify, restore), tensor-file helpers.

Why separate: edge boards lose power and get rebooted mid fine-tune, so every evaluation writes an
atomic checkpoint that resumes the run *exactly* (model and optimizer state, the epoch's
permutation and the position in it, the shuffling generator and the global RNG). What may be
resumed is decided here, apart from the loop: the file must be a trainer checkpoint, carry this
run's fingerprint (``fingerprint.py``) and hold counters that can be true of the run it records.
Weights and data travel through the same pickle-free tensor files (``tensorfile.py``).
Python 3.6 + torch 1.10 compatible.
"""

import os
import time
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from fleet.agent.data import tensorfile
from fleet.agent.training.fingerprint import fingerprint_diff
from fleet.agent.training.train_state import (
    LOOP_STOPS,
    STATUS_REACHED,
    RunState,
    TrainerError,
)
from fleet.method.profile_io import temp_prefix

CHECKPOINT_FORMAT = "powerfleet-trainer-checkpoint"
CHECKPOINT_VERSION = 1


def torch_load_cpu(path: str, kind: Optional[str] = None) -> Any:
    """Load a weights, data or checkpoint file onto the CPU without unpickling (any torch).

    The name is historical: files are ``fleet.agent.data.tensorfile`` containers (JSON header, raw
    tensor bytes, SHA-256 digest), so a hostile file cannot run code even on torch 1.10, and a
    damaged one is refused. Old ``torch.save`` files are refused with a line saying how to
    convert them.
    """
    return tensorfile.load(path, kind)


def atomic_torch_save(obj: Any, path: str, kind: str = "tensors") -> None:
    """Save tensors in plain containers as a tensor file, atomically: never half a file."""
    tensorfile.save(obj, path, kind)


def remove_stale_temps(path: str) -> None:
    """A crash during a checkpoint write leaves a temp file beside it; the next start drops it."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = temp_prefix(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".part"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def save_checkpoint(
    path: str,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state: RunState,
    gen: torch.Generator,
    dev: torch.device,
    fingerprint: Dict[str, Any],
) -> None:
    """Write the run's checkpoint atomically: weights, optimizer, counters and every RNG."""
    rng = {"generator": gen.get_state(), "torch": torch.get_rng_state()}  # type: Dict[str, Any]
    if dev.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(dev)
    atomic_torch_save(
        {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "fingerprint": fingerprint,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "counters": state.to_dict(),
            "rng": rng,
            "saved_at": time.time(),
        },
        path,
        "checkpoint",
    )


def load_checkpoint(path: str, fingerprint: Dict[str, Any]) -> Dict[str, Any]:
    """Read a checkpoint, refusing another run's (fingerprint) or one that contradicts itself."""
    try:
        ckpt = torch_load_cpu(path, "checkpoint")
    except tensorfile.TensorFileError as exc:
        raise TrainerError("checkpoint {}; delete it to start over".format(exc)) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise TrainerError("{} is not a powerfleet trainer checkpoint".format(path))
    diffs = fingerprint_diff(ckpt.get("fingerprint") or {}, fingerprint)
    if diffs:
        raise TrainerError(
            "checkpoint {} belongs to another run ({}); delete it or use another path".format(
                path, "; ".join(diffs)
            )
        )
    problem = counters_problem(ckpt.get("counters"), fingerprint)
    if problem:
        raise TrainerError(
            "checkpoint {} contradicts itself: {}; delete it to start over".format(path, problem)
        )
    return ckpt


def counters_problem(counters: Any, fingerprint: Dict[str, Any]) -> Optional[str]:
    """Why a checkpoint's counters cannot be true of the run its own history records, or None.

    The digest stops damage; this stops a file rewritten with believable but false counters
    (e.g. more samples than its evaluation curve ever saw, or "reached" below the target): a
    checkpoint is written right after an evaluation, so its last curve point is its sample count.
    """
    if not isinstance(counters, dict):
        return "no counters"

    def count(key: str) -> Optional[int]:
        v = counters.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    samples, steps = count("samples"), count("steps")
    if samples is None or steps is None or count("epoch") is None or count("pos") is None:
        return "samples, steps, epoch and pos must be counts"
    if steps > samples or (steps == 0) != (samples == 0):
        return "{} samples in {} steps".format(samples, steps)
    for key in ("train_time_s", "eval_time_s", "checkpoint_time_s", "wall_time_s"):
        v = counters.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            return "{} = {!r}".format(key, v)
    curve = counters.get("curve")
    if not isinstance(curve, list) or not curve:
        return "no evaluation curve"
    last = -1
    for point in curve:
        ok = isinstance(point, (list, tuple)) and len(point) == 2
        s, acc = (point[0], point[1]) if ok else (None, None)
        if not ok or not isinstance(s, int) or isinstance(s, bool) or s < last:
            return "evaluation curve out of order at {!r}".format(point)
        if not isinstance(acc, (int, float)) or not 0 <= acc <= 1:
            return "accuracy {!r} in the curve".format(acc)
        last = s
    status = counters.get("status")
    if not isinstance(status, str):
        return "status {!r}".format(status)
    # The one checkpoint not written at an evaluation: the closed loop's stop (over the budget,
    # or a setting the device refused; a final evaluation would run on at that point), at most
    # one evaluation period later.
    k = fingerprint.get("eval_every_samples")
    between = status in LOOP_STOPS and isinstance(k, int) and last < samples < last + k
    if last != samples and not between:
        return "{} samples but the last evaluation was at {}".format(samples, last)
    reached = counters.get("samples_to_accuracy")
    target = fingerprint.get("target_accuracy")
    if status == STATUS_REACHED:
        if reached != samples or (isinstance(target, float) and curve[-1][1] < target):
            return "status 'reached' without the last evaluation reaching the target"
    elif reached is not None:
        return "samples_to_accuracy set but status is {!r}".format(status)
    if count("next_eval") is None or counters["next_eval"] <= samples:
        return "next evaluation at {!r}, not after {}".format(counters.get("next_eval"), samples)
    return None


def restore_checkpoint(
    ckpt: Dict[str, Any],
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state: RunState,
    gen: torch.Generator,
    dev: torch.device,
    path: str,
) -> None:
    """Put a loaded checkpoint back into the model, optimizer, counters and generators."""
    try:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        state.load(ckpt["counters"])
        rng = ckpt["rng"]
        gen.set_state(rng["generator"])
        torch.set_rng_state(rng["torch"])
        if dev.type == "cuda" and "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], dev)
    except TrainerError:
        raise
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise TrainerError(
            "checkpoint {} cannot be restored ({}: {})".format(
                path, type(exc).__name__, " ".join(str(exc).split())[:200]
            )
        ) from None
