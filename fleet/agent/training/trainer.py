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
  too) and returns with the controller's status (``over-budget``, or ``error`` where the device
  refused a setting); such a checkpoint resumes. The running batch
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

import os
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

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
from fleet.agent.training.plan import OPTIMIZERS, TrainHooks, TrainPlan
from fleet.agent.training.train_state import (
    LOOP_STOPS,
    RUNNING,
    STATUS_NOT_REACHED,
    STATUS_PAUSED,
    STATUS_REACHED,
    RunState,
    TrainerError,
    TrainResult,
    account_power,
    build_result,
    loop_stop_status,
)
from fleet.method.selection import scaled_lr

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


# --------------------------------------------------------------------------------------------
# The trainer


def train_to_target(
    model: nn.Module,
    train_set: Any,
    test_set: Any,
    plan: TrainPlan,
    hooks: Optional[TrainHooks] = None,
    device: Any = "cpu",
    checkpoint_path: Optional[str] = None,
) -> TrainResult:
    """Fine-tune ``model`` (in place, from its current weights) until ``plan``'s target or cap.

    ``train_set``/``test_set``: ``(inputs, targets)`` tensors, a TensorDataset or any map-style
    Dataset of ``(x, y)``. ``plan`` says what is trained (``plan.py``: the checkpoint's
    fingerprint covers it), ``hooks`` what watches or steers the run (power, progress, the
    closed loop, the noise tracker). ``augment(x_batch, generator)`` in the plan must draw its
    randomness from the generator it is given (the checkpointed one), which keeps augmented
    runs resumable bit for bit.

    With a ``controller`` hook (``closedloop.ClosedLoop``) choosing the batch size per step,
    ``plan.batch_size``/``plan.lr`` are the learning-rate reference pair (module docstring).

    With ``checkpoint_path``: an existing checkpoint is verified against this run's fingerprint
    (``TrainerError`` naming the differences, the file untouched) and resumed; a finished one is
    returned without training (its weights are loaded into ``model``); every evaluation
    rewrites it atomically.

    ``plan.segment_s`` (needs ``checkpoint_path``): train at least this many seconds of training
    time in this call, then stop at the next evaluation with status ``paused`` (module
    docstring).
    """
    hooks = hooks if hooks is not None else TrainHooks()
    plan = plan.checked(with_checkpoint=bool(checkpoint_path))
    controller = hooks.controller
    train = IndexedData(train_set, "train_set")
    test = IndexedData(test_set, "test_set")
    if controller is None and len(train) < plan.batch_size:
        raise TrainerError(
            "batch_size {} exceeds the {} training samples (partial batches are dropped)".format(
                plan.batch_size, len(train)
            )
        )
    plan = plan.resolved(len(train))
    dev = torch.device(device)
    settings = plan.fingerprint_settings(CHECKPOINT_VERSION, controller is not None)
    fingerprint = run_fingerprint(model, train, test, settings)
    model.to(dev)
    opt = make_optimizer(plan.optimizer, model.parameters(), plan.lr, plan.optimizer_options)
    state = RunState(int(plan.eval_every_samples or 0))
    gen = torch.Generator()
    gen.manual_seed(plan.seed)
    resumed_from = None  # type: Optional[int]
    cap = int(plan.max_samples or 0)

    with torch.random.fork_rng(devices=_rng_devices(dev)):
        torch.manual_seed(plan.seed)  # dropout and other global draws, restored on resume
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

        sampler, own_sampler = _open_sampler(hooks.power_read, hooks.sampler_hz)
        session = _Session(model, opt, train, test, state, gen, dev, checkpoint_path, fingerprint)
        try:
            _run(session, plan, hooks, sampler)
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


class _Session(NamedTuple):
    """The live objects of one call: what ``_run`` trains, counts in and checkpoints to."""

    model: nn.Module
    opt: torch.optim.Optimizer
    train: IndexedData
    test: IndexedData
    state: RunState
    gen: torch.Generator
    dev: torch.device
    checkpoint_path: Optional[str]
    fingerprint: Dict[str, Any]


def _run(
    session: _Session, plan: TrainPlan, hooks: TrainHooks, sampler: Optional[PowerSampler]
) -> None:
    """The loop: train stretches between evaluations; each evaluation may stop and checkpoints."""
    model, opt, train, test, state, gen, dev, checkpoint_path, fingerprint = session
    b, k, task, target = (
        plan.batch_size,
        int(plan.eval_every_samples or 0),
        plan.task,
        plan.target_accuracy,
    )
    cap, eval_bs = int(plan.max_samples or 0), int(plan.eval_batch_size or 0)
    ref_lr, opt_name, augment, segment_s = plan.lr, plan.optimizer, plan.augment, plan.segment_s
    controller, progress = hooks.controller, hooks.progress
    session_t0 = time.perf_counter()
    wall_before = state.wall_time_s
    train_before = state.train_time_s  # this call's segment is measured from here
    history_of = getattr(controller, "history", None)
    on_eval = getattr(controller, "evaluated", None)
    tracker = hooks.noise_tracker
    if tracker is None:
        tracker = getattr(controller, "noise_tracker", None)
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

    if not state.curve and plan.eval_at_start:
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
    next_progress = time.perf_counter() + hooks.progress_interval_s
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
                    state.status = loop_stop_status(controller)
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
                    if controller is not None:  # the point running now, named so (not the
                        info["running_batch_size"] = b  # start's or the reference's)
                        info["running_freq_mhz"] = controller.freq_mhz
                        info["budget_w"] = controller.budget_w
                    progress(state.samples, cap, info)
                    next_progress = time.perf_counter() + hooks.progress_interval_s
        _sync(dev)
        stretch = time.perf_counter() - t0
        state.train_time_s += stretch
        if sampler is not None:
            account_power(state, sampler.mark(), stretch)
        if state.status in LOOP_STOPS:
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
