"""Fine-tune to a target accuracy, counting samples, time and energy (paper §3, §4.2, §5.1).

Why it looks like this: the method needs ``N_s_acc`` -- how many training samples a batch size
takes to reach the target accuracy on the held-out split -- and the device needs the wall time and
energy of getting there. So the loop counts *samples* (not steps), evaluates on the test split at a
fixed sample cadence, stops at the first evaluation that meets the target, and keeps training
time (what the paper reports, "evaluation time is excluded") apart from evaluation time.

Edge boards lose power and get rebooted, and a fine-tune takes hours there, so every evaluation
writes an atomic checkpoint that resumes the run *exactly*: the model and optimizer state, the
epoch's permutation and the position in it, the shuffling generator and the global RNG (dropout)
are all restored, so a resumed run reaches the target at the same sample count as one that never
stopped. A fingerprint of the run (model structure and initial weights, data sizes and a hash of
its first/last samples, batch size, lr, optimizer, seed, target, cadence) guards a checkpoint
against being resumed by a different run.

This module is the loop and its entry point ``train_to_target``; the parts it is built from live
beside it: the counters and the result (``train_state.py``), the data wrapper
(``indexed_data.py``), the fingerprint (``fingerprint.py``), the checkpoint file
(``checkpoint.py``) and the evaluation (``evaluation.py``).

Rules (documented because tests and the coordinator rely on them):

- Batches: each epoch draws ``randperm(len(train))`` from a seeded ``torch.Generator`` and walks
  it in full batches; the last partial batch of an epoch is dropped (BatchNorm cannot train on a
  batch of one, and every step then counts exactly ``batch_size`` samples).
- Evaluation cadence: after the first step that brings the sample count to or past each multiple
  of ``eval_every_samples`` (k), and once more where training stops at the cap. With k a multiple
  of the batch size, evaluations fall exactly on multiples of k, and so does
  ``samples_to_accuracy``. ``eval_at_start`` adds an evaluation at 0 samples (a pre-trained model
  may already meet the target: then ``samples_to_accuracy`` is 0).
- Cap: training stops after the first step at which the count reaches ``max_samples``; that
  evaluation decides "reached" or "not reached".
- Learning rate: used as given. The batch-size rule (square root for Adam/AdamW, linear for SGD)
  is applied by the coordinator, which sends the scaled value. Under a closed loop the batch size
  may change mid-run: then ``batch_size``/``lr`` are the reference pair and every switch sets the
  optimizer's learning rate by the kernel's ``scaled_lr`` (the coordinator's too).
- Closed loop (``controller``, see ``closedloop.py``): before every step the trainer asks
  ``controller.before_step()`` for the batch size of that step and whether to stop. A new batch
  size takes effect at that step; the position in the epoch's permutation carries over, so no
  sample is skipped or counted twice (an epoch ends when fewer than one batch of it is left). A
  stop ends the stretch, writes the checkpoint without evaluating (that would run over budget
  too) and returns with status ``over-budget``; such a checkpoint resumes. The running batch
  size is checkpointed: a resumed run goes on at it until the controller says otherwise, so
  resume is exact whenever the controller decides the same batch sizes at the same sample
  counts (a fixed budget, or no change); under a schedule or budget file the switch points
  depend on wall time and differ.
- Segments (``segment_s``): a long run is split into calls that each train at least
  ``segment_s`` seconds of training time (the device's clock: the trainer's stretches, paced ones
  included; evaluation excluded, as ``train_time_s`` counts it) and stop at the evaluation that
  ends that stretch, with status ``paused``. That evaluation has just written the checkpoint, so
  the next call with the same checkpoint resumes exactly there; every counter is the run's,
  cumulative across calls, and a controller's record of earlier calls travels in the
  checkpoint too (``controller.history()`` saved, ``controller.carry()`` on resume).
- Energy: with a power reader, the sampler's window is marked at the start and end of every
  training stretch, so evaluation and checkpoint writes are excluded. ``mean_power_w`` is the
  time-weighted mean of the windows' means, ``energy_j`` is that mean times the training time
  (stretches too short to hold a sample are covered by the mean), ``peak_power_w`` the highest
  reading.

Determinism: same seed, same data, same start weights -> same batches, same sample count and, on
the CPU, bit-identical weights. On CUDA, cuDNN may pick nondeterministic kernels (set
``torch.backends.cudnn.deterministic = True`` and ``benchmark = False`` yourself if bit-exactness
matters more than speed); the data order is deterministic either way.

Lean loop: no ``.item()`` or device sync per step; the training loss is summed on the device and
read once per evaluation. Python 3.6 + torch 1.10 compatible.
"""

import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from fleet.agent.measure.sampler import PowerSampler
from fleet.agent.models.registry import loss_fn
from fleet.agent.training.checkpoint import (
    CHECKPOINT_VERSION,
    load_checkpoint,
    remove_stale_temps,
    restore_checkpoint,
    save_checkpoint,
)
from fleet.agent.training.evaluation import evaluate
from fleet.agent.training.fingerprint import run_fingerprint
from fleet.agent.training.indexed_data import IndexedData
from fleet.agent.training.train_state import (
    RUNNING,
    STATUS_NOT_REACHED,
    STATUS_OVER_BUDGET,
    STATUS_PAUSED,
    STATUS_REACHED,
    RunState,
    TrainerError,
    TrainResult,
    account_power,
    build_result,
)
from fleet.method.selection import scaled_lr

OPTIMIZERS = ("adam", "adamw", "sgd")
TASKS = ("classification", "char")

ProgressFn = Callable[[int, int, Dict[str, Any]], None]  # (samples, max_samples, info)
AugmentFn = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


# --------------------------------------------------------------------------------------------
# Helpers


def make_optimizer(
    name: str, params: Any, lr: float, options: Optional[Dict[str, Any]] = None
) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD with torch's defaults unless ``options`` say otherwise."""
    key = str(name).strip().lower()
    opts = dict(options or {})
    if key == "adam":
        return torch.optim.Adam(params, lr=lr, **opts)
    if key == "adamw":
        return torch.optim.AdamW(params, lr=lr, **opts)
    if key == "sgd":
        return torch.optim.SGD(params, lr=lr, **opts)
    raise TrainerError("unknown optimizer {!r} (known: {})".format(name, ", ".join(OPTIMIZERS)))


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _rng_devices(dev: torch.device) -> List[int]:
    if dev.type == "cuda":
        return [dev.index if dev.index is not None else torch.cuda.current_device()]
    return []


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise TrainerError("{} must be a positive integer, got {!r}".format(name, value))
    return int(value)


# --------------------------------------------------------------------------------------------
# The trainer


def train_to_target(
    model: nn.Module,
    train_set: Any,
    test_set: Any,
    batch_size: int,
    lr: float,
    target_accuracy: float,
    optimizer: str = "adam",
    eval_every_samples: Optional[int] = None,
    max_samples: Optional[int] = None,
    seed: int = 0,
    device: Any = "cpu",
    checkpoint_path: Optional[str] = None,
    power_read: Any = None,
    progress: Optional[ProgressFn] = None,
    task: str = "classification",
    eval_batch_size: Optional[int] = None,
    eval_at_start: bool = True,
    optimizer_options: Optional[Dict[str, Any]] = None,
    augment: Optional[AugmentFn] = None,
    sampler_hz: float = 20.0,
    progress_interval_s: float = 1.0,
    controller: Any = None,
    segment_s: Optional[float] = None,
    noise_tracker: Any = None,
) -> TrainResult:
    """Fine-tune ``model`` (in place, from its current weights) until the target or the cap.

    ``train_set``/``test_set``: ``(inputs, targets)`` tensors, a TensorDataset or any map-style
    Dataset of ``(x, y)``. ``eval_every_samples`` defaults to one epoch, ``max_samples`` to 100
    epochs. ``power_read``: a ``() -> watts`` callable (sampled at ``sampler_hz``) or a running
    or not-yet-started ``PowerSampler``. ``progress(samples, max_samples, info)`` is called at
    most every ``progress_interval_s`` while training and after every evaluation.
    ``augment(x_batch, generator)`` must draw its randomness from the generator it is given
    (the checkpointed one), which keeps augmented runs resumable bit for bit.

    ``controller``: a closed loop (``closedloop.ClosedLoop``) choosing the batch size per step;
    then ``batch_size``/``lr`` are the learning-rate reference pair (module docstring).

    With ``checkpoint_path``: an existing checkpoint is verified against this run's fingerprint
    (``TrainerError`` naming the differences, the file untouched) and resumed; a finished one is
    returned without training (its weights are loaded into ``model``); every evaluation
    rewrites it atomically.

    ``segment_s`` (needs ``checkpoint_path``): train at least this many seconds of training time
    in this call, then stop at the next evaluation with status ``paused`` (module docstring).

    ``noise_tracker``: a ``noise_scale.NoiseTracker`` that reads every step's gradients (the
    gradient noise scale of the device's data, at no extra pass); a controller's own
    ``noise_tracker`` attribute is used when this is None. It only reads: the run's numbers
    are the same with or without it.
    """
    b = _positive_int("batch_size", batch_size)
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise TrainerError("lr must be a positive number, got {!r}".format(lr))
    if not (isinstance(target_accuracy, (int, float)) and 0.0 <= target_accuracy <= 1.0):
        raise TrainerError("target_accuracy must be in [0, 1], got {!r}".format(target_accuracy))
    if task not in TASKS:
        raise TrainerError("unknown task {!r} (known: {})".format(task, ", ".join(TASKS)))
    opt_name = str(optimizer).strip().lower()
    if opt_name not in OPTIMIZERS:
        raise TrainerError(
            "unknown optimizer {!r} (known: {})".format(optimizer, ", ".join(OPTIMIZERS))
        )
    if segment_s is not None:
        ok = isinstance(segment_s, (int, float)) and not isinstance(segment_s, bool)
        if not (ok and 0 < segment_s < float("inf")):
            raise TrainerError("segment_s must be a positive number, got {!r}".format(segment_s))
        if not checkpoint_path:
            raise TrainerError("segment_s needs checkpoint_path: a paused run resumes from it")
    train = IndexedData(train_set, "train_set")
    test = IndexedData(test_set, "test_set")
    if controller is None and len(train) < b:
        raise TrainerError(
            "batch_size {} exceeds the {} training samples (partial batches are dropped)".format(
                b, len(train)
            )
        )
    k = _positive_int(
        "eval_every_samples", len(train) if eval_every_samples is None else eval_every_samples
    )
    cap = _positive_int("max_samples", 100 * len(train) if max_samples is None else max_samples)
    eval_bs = _positive_int(
        "eval_batch_size", max(b, 256) if eval_batch_size is None else eval_batch_size
    )
    dev = torch.device(device)

    settings = {
        "format_version": CHECKPOINT_VERSION,
        "task": task,
        "batch_size": b,
        "lr": float(lr),
        "optimizer": opt_name,
        "optimizer_options": dict(optimizer_options or {}),
        "seed": int(seed),
        "target_accuracy": float(target_accuracy),
        "eval_every_samples": k,
        "eval_at_start": bool(eval_at_start),
        "augment": getattr(augment, "__name__", type(augment).__name__) if augment else None,
    }
    if controller is not None:
        settings["closed_loop"] = True  # batch_size/lr are then the reference pair
    fingerprint = run_fingerprint(model, train, test, settings)
    model.to(dev)
    opt = make_optimizer(opt_name, model.parameters(), float(lr), optimizer_options)
    state = RunState(k)
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    resumed_from = None  # type: Optional[int]

    with torch.random.fork_rng(devices=_rng_devices(dev)):
        torch.manual_seed(int(seed))  # dropout and other global draws, restored on resume
        if checkpoint_path and os.path.exists(checkpoint_path):
            ckpt = load_checkpoint(checkpoint_path, fingerprint)
            restore_checkpoint(ckpt, model, opt, state, gen, dev, checkpoint_path)
            state.sessions += 1
            resumed_from = state.samples
        carry = getattr(controller, "carry", None)
        if carry is not None:
            carry(state.history)  # the loop's record of the calls before: one run's record
        if checkpoint_path:
            remove_stale_temps(checkpoint_path)
        if state.status == STATUS_REACHED or (state.status != RUNNING and state.samples >= cap):
            return build_result(state, settings, cap, resumed_from)
        state.status = RUNNING

        sampler, own_sampler = _open_sampler(power_read, sampler_hz)
        try:
            _run(
                model, opt, train, test, state, gen, dev, b, k, cap, eval_bs, task,
                float(target_accuracy), eval_at_start, augment, sampler, progress,
                progress_interval_s, checkpoint_path, fingerprint, controller, float(lr), opt_name,
                segment_s, noise_tracker,
            )  # fmt: skip
        finally:
            if own_sampler and sampler is not None:
                sampler.stop()
    return build_result(state, settings, cap, resumed_from)


def _open_sampler(power_read: Any, hz: float) -> Tuple[Optional[PowerSampler], bool]:
    """(sampler, whether we started it and must stop it)."""
    if power_read is None:
        return None, False
    if callable(getattr(power_read, "mark", None)):
        if getattr(power_read, "running", True):
            return power_read, False
        return power_read.start(), True
    if not callable(power_read):
        raise TrainerError("power_read must be a callable returning watts or a PowerSampler")
    return PowerSampler(power_read, hz=hz).start(), True


def _run(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    train: IndexedData,
    test: IndexedData,
    state: RunState,
    gen: torch.Generator,
    dev: torch.device,
    b: int,
    k: int,
    cap: int,
    eval_bs: int,
    task: str,
    target: float,
    eval_at_start: bool,
    augment: Optional[AugmentFn],
    sampler: Optional[PowerSampler],
    progress: Optional[ProgressFn],
    progress_interval_s: float,
    checkpoint_path: Optional[str],
    fingerprint: Dict[str, Any],
    controller: Any = None,
    ref_lr: float = 0.0,
    opt_name: str = "adam",
    segment_s: Optional[float] = None,
    noise_tracker: Any = None,
) -> None:
    """The loop: train stretches between evaluations; each evaluation may stop and checkpoints."""
    session_t0 = time.perf_counter()
    wall_before = state.wall_time_s
    train_before = state.train_time_s  # this call's segment is measured from here
    history_of = getattr(controller, "history", None)
    on_eval = getattr(controller, "evaluated", None)
    tracker = (
        noise_tracker if noise_tracker is not None else getattr(controller, "noise_tracker", None)
    )
    params = [p for p in model.parameters() if p.requires_grad] if tracker is not None else []
    n = len(train)
    model.train()
    ref_b = b
    if controller is not None and state.cur_batch:
        b = int(state.cur_batch)  # resumed: the batch that was running (lr is in the optimizer)

    def switch_batch(new_b: int) -> int:
        """A new batch size from the next step on, with the learning-rate rule applied."""
        if new_b < 1 or new_b > n:
            raise TrainerError(
                "closed loop chose batch {} for {} training samples".format(new_b, n)
            )
        new_lr = scaled_lr(new_b, ref_b, ref_lr, opt_name)
        for group in opt.param_groups:
            group["lr"] = new_lr
        state.cur_batch = new_b
        return new_b

    def wall_now() -> float:
        return wall_before + (time.perf_counter() - session_t0)

    def evaluate_and_decide(loss_sum: Optional[torch.Tensor], loss_steps: int) -> bool:
        t0 = time.perf_counter()
        acc = evaluate(model, test, eval_bs, dev, task)
        state.eval_time_s += time.perf_counter() - t0
        state.curve.append([state.samples, acc])
        if loss_sum is not None and loss_steps > 0:
            state.loss_curve.append([state.samples, float(loss_sum.item()) / loss_steps])
        state.next_eval = (state.samples // k + 1) * k
        if acc >= target:
            state.status = STATUS_REACHED
            state.samples_to_accuracy = state.samples
        elif state.samples >= cap:
            state.status = STATUS_NOT_REACHED
        state.wall_time_s = wall_now()
        if checkpoint_path and (state.samples > 0 or state.status != RUNNING):
            if history_of is not None:
                state.history = history_of()
            t0 = time.perf_counter()
            save_checkpoint(checkpoint_path, model, opt, state, gen, dev, fingerprint)
            state.checkpoint_time_s += time.perf_counter() - t0
            state.wall_time_s = wall_now()
        if progress is not None:
            progress(state.samples, cap, {"accuracy": acc, "phase": "eval"})
        if on_eval is not None and state.status == RUNNING:
            on_eval(state.samples, acc)  # the learning curve's point: may re-select
        return state.status != RUNNING

    if not state.curve and eval_at_start:
        if evaluate_and_decide(None, 0):
            return
    elif state.samples >= cap:  # resumed under a lower cap: the last evaluation decides
        state.status = STATUS_NOT_REACHED
        state.wall_time_s = wall_now()
        return

    on_resume = getattr(controller, "resumed", None)
    if on_resume is not None and state.samples > 0:  # a checkpoint's work counts
        on_resume(state.samples, state.cur_batch)
    step_done = getattr(controller, "after_step", None)
    next_progress = time.perf_counter() + progress_interval_s
    while True:
        # One training stretch: up to the next evaluation or the cap.
        stop_at = min(state.next_eval, cap)
        loss_sum = torch.zeros((), device=dev)
        loss_steps = 0
        if sampler is not None:
            sampler.mark()  # drop what the evaluation/checkpoint drew
        t0 = time.perf_counter()
        while state.samples < stop_at:
            if controller is not None:
                want, stop = controller.before_step()
                if stop:
                    state.status = STATUS_OVER_BUDGET
                    break
                if want != b or state.cur_batch is None:
                    b = switch_batch(int(want))
            if state.perm is None or state.pos + b > n:
                state.perm = torch.randperm(n, generator=gen)
                state.pos = 0
                state.epoch += 1
            perm = train.index_on_data_device(state.perm)
            steps = min(-(-(stop_at - state.samples) // b), (n - state.pos) // b)
            if controller is not None:
                steps = min(steps, 1)  # the controller decides before every step
            for _ in range(steps):
                xb, yb = train.batch(perm[state.pos : state.pos + b])
                if augment is not None:
                    xb = augment(xb, gen)
                xb = xb.to(dev, non_blocking=True)
                yb = yb.to(dev, non_blocking=True)
                loss = loss_fn(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if tracker is not None:
                    tracker.step(params, b, opt)
                opt.step()
                loss_sum += loss.detach()
                loss_steps += 1
                state.pos += b
                state.samples += b
                state.steps += 1
                if step_done is not None:
                    step_done()  # the closed loop's drift watch times each step
                if progress is not None and time.perf_counter() >= next_progress:
                    info = {"phase": "train"}  # type: Dict[str, Any]
                    if controller is not None:
                        info["batch_size"] = b
                        info["freq_mhz"] = controller.freq_mhz
                        info["budget_w"] = controller.budget_w
                    progress(state.samples, cap, info)
                    next_progress = time.perf_counter() + progress_interval_s
        _sync(dev)
        stretch = time.perf_counter() - t0
        state.train_time_s += stretch
        if sampler is not None:
            account_power(state, sampler.mark(), stretch)
        if state.status == STATUS_OVER_BUDGET:
            # Stop now: an evaluation would run on over budget. The checkpoint resumes.
            state.wall_time_s = wall_now()
            if checkpoint_path:
                if history_of is not None:
                    state.history = history_of()
                t0 = time.perf_counter()
                save_checkpoint(checkpoint_path, model, opt, state, gen, dev, fingerprint)
                state.checkpoint_time_s += time.perf_counter() - t0
            return
        if evaluate_and_decide(loss_sum, loss_steps):
            return
        if segment_s is not None and state.train_time_s - train_before >= segment_s:
            state.status = STATUS_PAUSED  # the checkpoint this evaluation wrote resumes it
            return
