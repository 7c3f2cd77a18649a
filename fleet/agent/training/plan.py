"""What one fine-tuning call trains, and what watches it: two records instead of 24 arguments.

Why two: the *plan* (batch size, learning rate, target, optimizer, cadence, cap, seed, task,
segment length) decides the numbers a run produces, so it is what the checkpoint's fingerprint
covers and what a resumed call must repeat; the *hooks* (power reader, progress callback,
closed-loop controller, noise tracker) only watch or steer, and a run's samples are the same
with or without them. Keeping them apart lets ``train_to_target`` check the plan once, before
any work, and lets the board's protocol build the plan straight from a ``TrainRequest``
(``fleet/method/agent_records.py``).

NamedTuples with a ``__new__`` for defaults, not dataclasses: the board runs Python 3.6.
"""

import math
from typing import Any, Callable, Dict, NamedTuple, Optional

from fleet.method.power_window import MIN_SAMPLER_HZ


class TrainerError(ValueError):
    """A training request that cannot run as asked (bad argument, foreign checkpoint); one line.
    Defined with the plan, which raises it first, so the board's protocol can check a plan
    without importing torch."""


OPTIMIZERS = ("adam", "adamw", "sgd")
TASKS = ("classification", "char")

ProgressFn = Callable[[int, int, Dict[str, Any]], None]  # (samples, max_samples, info)
# (x_batch, generator) -> x_batch; tensors, typed loosely so the plan imports without torch
AugmentFn = Callable[[Any, Any], Any]

_PlanFields = NamedTuple(
    "_PlanFields",
    [
        ("batch_size", int),
        ("lr", float),
        ("target_accuracy", float),
        ("optimizer", str),
        ("optimizer_options", Optional[Dict[str, Any]]),
        ("eval_every_samples", Optional[int]),
        ("max_samples", Optional[int]),
        ("seed", int),
        ("task", str),
        ("eval_batch_size", Optional[int]),
        ("eval_at_start", bool),
        ("augment", Optional[AugmentFn]),
        ("segment_s", Optional[float]),
    ],
)


class TrainPlan(_PlanFields):
    """The run's settings. Under a closed loop ``batch_size``/``lr`` are the learning-rate
    reference pair (the loop picks the running batch). ``eval_every_samples`` defaults to one
    epoch, ``max_samples`` to 100 epochs, ``eval_batch_size`` to max(batch, 256): ``resolved``
    fills them in once the data's size is known."""

    __slots__ = ()

    def __new__(
        cls,
        batch_size: int,
        lr: float,
        target_accuracy: float,
        optimizer: str = "adam",
        optimizer_options: Optional[Dict[str, Any]] = None,
        eval_every_samples: Optional[int] = None,
        max_samples: Optional[int] = None,
        seed: int = 0,
        task: str = "classification",
        eval_batch_size: Optional[int] = None,
        eval_at_start: bool = True,
        augment: Optional[AugmentFn] = None,
        segment_s: Optional[float] = None,
    ) -> "TrainPlan":
        return super().__new__(
            cls,
            batch_size,
            lr,
            target_accuracy,
            optimizer,
            optimizer_options,
            eval_every_samples,
            max_samples,
            seed,
            task,
            eval_batch_size,
            eval_at_start,
            augment,
            segment_s,
        )

    def checked(self, with_checkpoint: bool) -> "TrainPlan":
        """The plan with its values normalised, or ``TrainerError`` naming the first bad field
        (before any work: a bad setting never costs a training stretch)."""
        lr, target = self.lr, self.target_accuracy
        if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
            raise TrainerError("lr must be a positive number, got {!r}".format(lr))
        if not (isinstance(target, (int, float)) and 0.0 <= target <= 1.0):
            raise TrainerError("target_accuracy must be in [0, 1], got {!r}".format(target))
        if self.task not in TASKS:
            raise TrainerError("unknown task {!r} (known: {})".format(self.task, ", ".join(TASKS)))
        opt_name = str(self.optimizer).strip().lower()
        if opt_name not in OPTIMIZERS:
            raise TrainerError(
                "unknown optimizer {!r} (known: {})".format(self.optimizer, ", ".join(OPTIMIZERS))
            )
        seg = self.segment_s
        if seg is not None:
            ok = isinstance(seg, (int, float)) and not isinstance(seg, bool)
            if not (ok and 0 < seg < float("inf")):
                raise TrainerError("segment_s must be a positive number, got {!r}".format(seg))
            if not with_checkpoint:
                raise TrainerError("segment_s needs checkpoint_path: a paused run resumes from it")
        return self._replace(
            batch_size=positive_int("batch_size", self.batch_size),
            lr=float(lr),
            target_accuracy=float(target),
            optimizer=opt_name,
            seed=int(self.seed),
            eval_at_start=bool(self.eval_at_start),
        )

    def resolved(self, n_train: int) -> "TrainPlan":
        """The defaults that depend on the training set's size, filled in and checked."""
        k = self.eval_every_samples
        cap = self.max_samples
        eval_bs = self.eval_batch_size
        return self._replace(
            eval_every_samples=positive_int("eval_every_samples", n_train if k is None else k),
            max_samples=positive_int("max_samples", 100 * n_train if cap is None else cap),
            eval_batch_size=positive_int(
                "eval_batch_size", max(self.batch_size, 256) if eval_bs is None else eval_bs
            ),
        )

    def fingerprint_settings(self, version: int, closed_loop: bool) -> Dict[str, Any]:
        """The settings a checkpoint must match to be resumed by this plan (a resolved one)."""
        aug = self.augment
        settings = {
            "format_version": version,
            "task": self.task,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "optimizer": self.optimizer,
            "optimizer_options": dict(self.optimizer_options or {}),
            "seed": self.seed,
            "target_accuracy": self.target_accuracy,
            "eval_every_samples": self.eval_every_samples,
            "eval_at_start": self.eval_at_start,
            "augment": getattr(aug, "__name__", type(aug).__name__) if aug else None,
        }  # type: Dict[str, Any]
        if closed_loop:
            settings["closed_loop"] = True  # batch_size/lr are then the reference pair
        return settings


_HookFields = NamedTuple(
    "_HookFields",
    [
        ("power_read", Any),
        ("sampler_hz", float),
        ("progress", Optional[ProgressFn]),
        ("progress_interval_s", float),
        ("controller", Any),
        ("noise_tracker", Any),
    ],
)


class TrainHooks(_HookFields):
    """What watches or steers a run. ``power_read``: a ``() -> watts`` callable (sampled at
    ``sampler_hz``) or a running or not-yet-started ``PowerSampler``. ``progress(samples,
    max_samples, info)`` at most every ``progress_interval_s`` while training and after every
    evaluation. ``controller``: the closed loop (``fleet/agent/loop/closedloop.py``).
    ``noise_tracker``: reads every step's gradients (a controller's own is used when None)."""

    __slots__ = ()

    def __new__(
        cls,
        power_read: Any = None,
        sampler_hz: float = MIN_SAMPLER_HZ,
        progress: Optional[ProgressFn] = None,
        progress_interval_s: float = 1.0,
        controller: Any = None,
        noise_tracker: Any = None,
    ) -> "TrainHooks":
        return super().__new__(
            cls, power_read, sampler_hz, progress, progress_interval_s, controller, noise_tracker
        )


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise TrainerError("{} must be a positive integer, got {!r}".format(name, value))
    return int(value)
