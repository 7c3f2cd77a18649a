"""What one fine-tune counts and what it returns: the run's counters, its result, its statuses.

Why separate: the training loop advances the counters, the checkpoint saves, checks and restores
them, and the result is built from them; all three need the same few types, so they sit here, below
every other trainer module, with ``TrainerError``, the one error a training request raises.
Python 3.6 + torch 1.10 compatible.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch  # noqa: F401 - in type comments

from fleet.agent.training.plan import TrainerError  # noqa: F401 - raised here, defined there
from fleet.method.agent_records import (  # noqa: F401 - the statuses a train reply says
    LOOP_STOPS,
    STATUS_ERROR,
    STATUS_NOT_REACHED,
    STATUS_OVER_BUDGET,
    STATUS_PAUSED,
    STATUS_REACHED,
)

# A stop the closed loop asked for is the loop's own status (one of LOOP_STOPS: over-budget, or
# error where the device refused a setting); STATUS_PAUSED is never saved as a checkpoint's
# status (that says RUNNING).
RUNNING = "running"


_TrainResultBase = NamedTuple(
    "_TrainResultBase",
    [
        ("status", str),  # one of TRAIN_STATUSES (agent_records)
        ("samples_to_accuracy", Optional[int]),  # samples when the target was first met
        ("samples", int),  # samples processed in total (== samples_to_accuracy when reached)
        ("steps", int),
        ("epochs", int),  # permutations drawn (the last one may be partly used)
        ("final_accuracy", float),  # accuracy at the last evaluation
        ("best_accuracy", float),
        ("target_accuracy", float),
        ("curve", List[Tuple[int, float]]),  # (samples, accuracy) at every evaluation
        ("loss_curve", List[Tuple[int, float]]),  # (samples, mean training loss since last eval)
        ("train_time_s", float),  # training only: evaluation and checkpoints excluded
        ("eval_time_s", float),
        ("checkpoint_time_s", float),  # writing checkpoints (in wall time, not in train time)
        ("wall_time_s", float),  # everything, evaluation included (summed over sessions)
        ("energy_j", Optional[float]),  # training windows only; None without a power reader
        ("peak_power_w", Optional[float]),
        ("mean_power_w", Optional[float]),
        ("power_samples", int),
        ("batch_size", int),
        ("lr", float),
        ("optimizer", str),
        ("seed", int),
        ("eval_every_samples", int),
        ("max_samples", int),
        ("sessions", int),  # this session + those before it that wrote the checkpoint
        ("resumed_from_samples", Optional[int]),  # samples in the checkpoint this session read
    ],
)


class TrainResult(_TrainResultBase):
    """What a fine-tune did; ``to_dict()`` is JSON-ready (the agent's ``train`` response)."""

    __slots__ = ()

    @property
    def reached(self) -> bool:
        return self.status == STATUS_REACHED

    @property
    def samples_per_s(self) -> Optional[float]:
        return self.samples / self.train_time_s if self.train_time_s > 0 else None

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self._asdict())
        out["curve"] = [[int(s), float(a)] for s, a in self.curve]
        out["loss_curve"] = [[int(s), float(v)] for s, v in self.loss_curve]
        out["reached"] = self.reached
        out["samples_per_s"] = self.samples_per_s
        return out


# --------------------------------------------------------------------------------------------
# Run state (everything a checkpoint needs besides model and optimizer)


class RunState(object):
    """Counters of one run; plain values and CPU tensors only, so torch.save/load is safe."""

    FIELDS = (
        "samples", "steps", "epoch", "pos", "next_eval", "curve", "loss_curve", "status",
        "samples_to_accuracy", "train_time_s", "eval_time_s", "checkpoint_time_s", "wall_time_s",
        "power_energy_j", "power_time_s", "peak_power_w", "power_samples", "sessions",
    )  # fmt: skip

    def __init__(self, eval_every: int) -> None:
        self.samples = 0
        self.steps = 0
        self.epoch = 0
        self.pos = 0
        self.perm = None  # type: Optional[torch.Tensor]
        self.next_eval = eval_every
        self.curve = []  # type: List[List[Any]]
        self.loss_curve = []  # type: List[List[Any]]
        self.status = RUNNING
        self.samples_to_accuracy = None  # type: Optional[int]
        self.train_time_s = 0.0
        self.eval_time_s = 0.0
        self.checkpoint_time_s = 0.0
        self.wall_time_s = 0.0
        self.power_energy_j = 0.0  # sum of window mean x window training time
        self.power_time_s = 0.0  # training time covered by windows holding a sample
        self.peak_power_w = None  # type: Optional[float]
        self.power_samples = 0
        self.sessions = 1
        self.cur_batch = None  # type: Optional[int]  # closed loop: the running batch size
        # The closed loop's record of the calls before this one (``ClosedLoop.history``): a
        # segmented run's segments, guard and drift events and loop time span several calls.
        self.history = {}  # type: Dict[str, Any]

    def to_dict(self) -> Dict[str, Any]:
        out = {k: getattr(self, k) for k in self.FIELDS}
        out["perm"] = self.perm
        out["cur_batch"] = self.cur_batch
        out["history"] = self.history
        return out

    def load(self, saved: Dict[str, Any]) -> None:
        for k in self.FIELDS:
            if k not in saved:
                raise TrainerError("checkpoint counters lack '{}'".format(k))
            setattr(self, k, saved[k])
        self.perm = saved.get("perm")
        self.cur_batch = saved.get("cur_batch")  # absent in checkpoints of fixed-batch runs
        history = saved.get("history")  # absent in checkpoints written before segmented runs
        self.history = dict(history) if isinstance(history, dict) else {}


def loop_stop_status(controller: Any) -> str:
    """The status of a run the controller stopped: the controller's own (``error`` where the
    device refused a setting), so the trainer, its checkpoint and the loop say one thing;
    ``over-budget`` for a controller that names none."""
    said = getattr(controller, "status", None)
    return said if said in LOOP_STOPS else STATUS_OVER_BUDGET


def account_power(state: RunState, stats: Any, stretch_s: float) -> None:
    """Add one training stretch's power window (``PowerSampler.mark()``) to the totals."""
    state.power_samples += int(stats.n_samples)
    if stats.mean_w is None:
        return
    state.power_energy_j += float(stats.mean_w) * stretch_s
    state.power_time_s += stretch_s
    if stats.peak_w is not None:
        peak = float(stats.peak_w)
        state.peak_power_w = peak if state.peak_power_w is None else max(state.peak_power_w, peak)


def build_result(
    state: RunState, settings: Dict[str, Any], cap: int, resumed_from: Optional[int]
) -> TrainResult:
    """The ``TrainResult`` of a run's counters and settings."""
    mean_w = state.power_energy_j / state.power_time_s if state.power_time_s > 0 else None
    accs = [float(a) for _, a in state.curve]
    return TrainResult(
        status=state.status,
        samples_to_accuracy=state.samples_to_accuracy,
        samples=state.samples,
        steps=state.steps,
        epochs=state.epoch,
        final_accuracy=accs[-1] if accs else float("nan"),
        best_accuracy=max(accs) if accs else float("nan"),
        target_accuracy=settings["target_accuracy"],
        curve=[(int(s), float(a)) for s, a in state.curve],
        loss_curve=[(int(s), float(v)) for s, v in state.loss_curve],
        train_time_s=state.train_time_s,
        eval_time_s=state.eval_time_s,
        checkpoint_time_s=state.checkpoint_time_s,
        wall_time_s=state.wall_time_s,
        energy_j=mean_w * state.train_time_s if mean_w is not None else None,
        peak_power_w=state.peak_power_w,
        mean_power_w=mean_w,
        power_samples=state.power_samples,
        batch_size=settings["batch_size"],
        lr=settings["lr"],
        optimizer=settings["optimizer"],
        seed=settings["seed"],
        eval_every_samples=settings["eval_every_samples"],
        max_samples=cap,
        sessions=state.sessions,
        resumed_from_samples=resumed_from,
    )
