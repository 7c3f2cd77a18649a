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
  optimizer's learning rate by ``choose.scaled_lr`` (the same rule as the coordinator's).
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

import hashlib
import json
import math
import os
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from . import tensorfile
from .choose import scaled_lr
from .models import loss_fn
from .profile_io import temp_prefix
from .sampler import PowerSampler

CHECKPOINT_FORMAT = "powerfleet-trainer-checkpoint"
CHECKPOINT_VERSION = 1
OPTIMIZERS = ("adam", "adamw", "sgd")
TASKS = ("classification", "char")
STATUS_REACHED = "reached"
STATUS_NOT_REACHED = "not reached"
STATUS_OVER_BUDGET = "over-budget"  # the closed loop stopped: even the lowest clock was over
_RUNNING = "running"
_HASH_ITEMS = 8  # first/last samples hashed into the data fingerprint

ProgressFn = Callable[[int, int, Dict[str, Any]], None]  # (samples, max_samples, info)
AugmentFn = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


class TrainerError(ValueError):
    """A training request that cannot run as asked (bad argument, foreign checkpoint); one line."""


_TrainResultBase = NamedTuple(
    "_TrainResultBase",
    [
        ("status", str),  # "reached" | "not reached"
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
# Data: plain (x, y) tensors, a TensorDataset, or any map-style Dataset of (x, y) items.


class _Data(object):
    """Batches by index from tensors (one gather) or from a Dataset (stack of items)."""

    def __init__(self, data: Any, what: str) -> None:
        self.what = what
        self.x = None  # type: Optional[torch.Tensor]
        self.y = None  # type: Optional[torch.Tensor]
        self.dataset = None  # type: Any
        tensors = getattr(data, "tensors", None)  # TensorDataset
        if tensors is not None and len(tensors) == 2:
            data = tensors
        if isinstance(data, (tuple, list)):
            if len(data) != 2 or not all(isinstance(t, torch.Tensor) for t in data):
                raise TrainerError("{} must be (inputs, targets) tensors or a Dataset".format(what))
            self.x, self.y = data[0], data[1]
            if self.x.shape[0] != self.y.shape[0]:
                raise TrainerError(
                    "{}: {} inputs but {} targets".format(what, self.x.shape[0], self.y.shape[0])
                )
            self.n = int(self.x.shape[0])
        elif hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            self.dataset = data
            self.n = len(data)
        else:
            raise TrainerError("{} must be (inputs, targets) tensors or a Dataset".format(what))
        if self.n < 1:
            raise TrainerError("{} is empty".format(what))

    def __len__(self) -> int:
        return self.n

    def index_on_data_device(self, idx: torch.Tensor) -> torch.Tensor:
        """The permutation where the tensors live, so a step's gather needs no copy of it."""
        if self.x is not None and idx.device != self.x.device:
            return idx.to(self.x.device)
        return idx

    def batch(self, idx: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.x is not None and self.y is not None:
            if idx.device != self.x.device:
                idx = idx.to(self.x.device)
            return self.x.index_select(0, idx), self.y.index_select(0, idx)
        items = [self.dataset[i] for i in idx.tolist()]
        xs = torch.stack([torch.as_tensor(it[0]) for it in items])
        ys = torch.stack([torch.as_tensor(it[1]) for it in items])
        return xs, ys

    def fingerprint(self) -> Dict[str, Any]:
        """Size, sample shape/dtype and a hash of the first and last few samples."""
        k = min(_HASH_ITEMS, self.n)
        idx = list(range(k)) + [i for i in range(self.n - k, self.n) if i >= k]
        xs, ys = self.batch(torch.tensor(idx, dtype=torch.long))
        return {
            "size": self.n,
            "shape": list(xs.shape[1:]),
            "dtype": str(xs.dtype).replace("torch.", ""),
            "head_tail": _tensor_digest([xs, ys]),
        }


# --------------------------------------------------------------------------------------------
# Fingerprint


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    try:
        return t.numpy().tobytes()
    except (TypeError, RuntimeError):  # bfloat16 and friends have no numpy dtype
        return t.to(torch.float64).numpy().tobytes()


def _tensor_digest(tensors: Sequence[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(_tensor_bytes(t))
    return h.hexdigest()[:16]


def run_fingerprint(
    model: nn.Module,
    train: _Data,
    test: _Data,
    settings: Dict[str, Any],
) -> Dict[str, Any]:
    """What makes two runs the same run; a checkpoint resumes only a run with an equal one."""
    state = model.state_dict()
    structure = json.dumps([[k, list(v.shape), str(v.dtype)] for k, v in state.items()])
    fp = {
        "model": type(model).__name__,
        "params": hashlib.sha256(structure.encode()).hexdigest()[:16],
        "init_weights": _tensor_digest(list(state.values())),
        "train": train.fingerprint(),
        "test": test.fingerprint(),
    }  # type: Dict[str, Any]
    fp.update(settings)
    return fp


def _fingerprint_diff(saved: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    diffs.append(
                        "{}.{} is {} there, {} here".format(key, sub, a.get(sub), b.get(sub))
                    )
        else:
            diffs.append("{} is {} there, {} here".format(key, a, b))
    return diffs


# --------------------------------------------------------------------------------------------
# Run state (everything a checkpoint needs besides model and optimizer)


class _State(object):
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
        self.status = _RUNNING
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

    def to_dict(self) -> Dict[str, Any]:
        out = {k: getattr(self, k) for k in self.FIELDS}
        out["perm"] = self.perm
        out["cur_batch"] = self.cur_batch
        return out

    def load(self, saved: Dict[str, Any]) -> None:
        for k in self.FIELDS:
            if k not in saved:
                raise TrainerError("checkpoint counters lack '{}'".format(k))
            setattr(self, k, saved[k])
        self.perm = saved.get("perm")
        self.cur_batch = saved.get("cur_batch")  # absent in checkpoints of fixed-batch runs


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


def evaluate(
    model: nn.Module,
    data: Any,
    batch_size: int = 256,
    device: Any = "cpu",
    task: str = "classification",
) -> float:
    """Top-1 accuracy (classification) or per-character accuracy (char, targets [b, T]).

    Counts stay on the device; one ``.item()`` at the end is the only sync.
    """
    d = data if isinstance(data, _Data) else _Data(data, "test_set")
    dev = torch.device(device)
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=dev)
    total = 0
    try:
        with torch.no_grad():
            for start in range(0, len(d), batch_size):
                idx = torch.arange(start, min(start + batch_size, len(d)))
                xb, yb = d.batch(idx)
                xb, yb = xb.to(dev), yb.to(dev)
                out = model(xb)
                if task == "char":
                    if out.dim() != 3:
                        raise TrainerError(
                            "task 'char' needs logits [b, T, V], got {}".format(list(out.shape))
                        )
                    pred = out.argmax(-1)
                else:
                    if out.dim() != 2:
                        raise TrainerError(
                            "task 'classification' needs logits [b, K], got {}; use task='char' "
                            "for sequence models".format(list(out.shape))
                        )
                    pred = out.argmax(1)
                correct += (pred == yb).sum()
                total += int(yb.numel())
    finally:
        model.train(was_training)
    return float(correct.item()) / max(1, total)


def torch_load_cpu(path: str, kind: Optional[str] = None) -> Any:
    """Load a weights, data or checkpoint file onto the CPU without unpickling (any torch).

    The name is historical: files are ``fleet.agent.tensorfile`` containers (JSON header, raw
    tensor bytes, SHA-256 digest), so a hostile file cannot run code even on torch 1.10, and a
    damaged one is refused. Old ``torch.save`` files are refused with a line saying how to
    convert them.
    """
    return tensorfile.load(path, kind)


def atomic_torch_save(obj: Any, path: str, kind: str = "tensors") -> None:
    """Save tensors in plain containers as a tensor file, atomically: never half a file."""
    tensorfile.save(obj, path, kind)


def _remove_stale_temps(path: str) -> None:
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
    train = _Data(train_set, "train_set")
    test = _Data(test_set, "test_set")
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
    state = _State(k)
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    resumed_from = None  # type: Optional[int]

    with torch.random.fork_rng(devices=_rng_devices(dev)):
        torch.manual_seed(int(seed))  # dropout and other global draws, restored on resume
        if checkpoint_path and os.path.exists(checkpoint_path):
            ckpt = _load_checkpoint(checkpoint_path, fingerprint)
            _restore(ckpt, model, opt, state, gen, dev, checkpoint_path)
            state.sessions += 1
            resumed_from = state.samples
        if checkpoint_path:
            _remove_stale_temps(checkpoint_path)
        if state.status == STATUS_REACHED or (state.status != _RUNNING and state.samples >= cap):
            return _result(state, settings, cap, resumed_from)
        state.status = _RUNNING

        sampler, own_sampler = _open_sampler(power_read, sampler_hz)
        try:
            _run(
                model, opt, train, test, state, gen, dev, b, k, cap, eval_bs, task,
                float(target_accuracy), eval_at_start, augment, sampler, progress,
                progress_interval_s, checkpoint_path, fingerprint, controller, float(lr), opt_name,
            )  # fmt: skip
        finally:
            if own_sampler and sampler is not None:
                sampler.stop()
    return _result(state, settings, cap, resumed_from)


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
    train: _Data,
    test: _Data,
    state: _State,
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
) -> None:
    """The loop: train stretches between evaluations; each evaluation may stop and checkpoints."""
    session_t0 = time.perf_counter()
    wall_before = state.wall_time_s
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
        if checkpoint_path and (state.samples > 0 or state.status != _RUNNING):
            t0 = time.perf_counter()
            _save_checkpoint(checkpoint_path, model, opt, state, gen, dev, fingerprint)
            state.checkpoint_time_s += time.perf_counter() - t0
            state.wall_time_s = wall_now()
        if progress is not None:
            progress(state.samples, cap, {"accuracy": acc, "phase": "eval"})
        return state.status != _RUNNING

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
            _account_power(state, sampler.mark(), stretch)
        if state.status == STATUS_OVER_BUDGET:
            # Stop now: an evaluation would run on over budget. The checkpoint resumes.
            state.wall_time_s = wall_now()
            if checkpoint_path:
                t0 = time.perf_counter()
                _save_checkpoint(checkpoint_path, model, opt, state, gen, dev, fingerprint)
                state.checkpoint_time_s += time.perf_counter() - t0
            return
        if evaluate_and_decide(loss_sum, loss_steps):
            return


def _account_power(state: _State, stats: Any, stretch_s: float) -> None:
    state.power_samples += int(stats.n_samples)
    if stats.mean_w is None:
        return
    state.power_energy_j += float(stats.mean_w) * stretch_s
    state.power_time_s += stretch_s
    if stats.peak_w is not None:
        peak = float(stats.peak_w)
        state.peak_power_w = peak if state.peak_power_w is None else max(state.peak_power_w, peak)


def _result(
    state: _State, settings: Dict[str, Any], cap: int, resumed_from: Optional[int]
) -> TrainResult:
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


# --------------------------------------------------------------------------------------------
# Checkpoints


def _save_checkpoint(
    path: str,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state: _State,
    gen: torch.Generator,
    dev: torch.device,
    fingerprint: Dict[str, Any],
) -> None:
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


def _load_checkpoint(path: str, fingerprint: Dict[str, Any]) -> Dict[str, Any]:
    try:
        ckpt = torch_load_cpu(path, "checkpoint")
    except tensorfile.TensorFileError as exc:
        raise TrainerError("checkpoint {}; delete it to start over".format(exc)) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise TrainerError("{} is not a powerfleet trainer checkpoint".format(path))
    diffs = _fingerprint_diff(ckpt.get("fingerprint") or {}, fingerprint)
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
    # The one checkpoint not written at an evaluation: the closed loop's over-budget stop (a
    # final evaluation would run over the budget too), at most one evaluation period later.
    k = fingerprint.get("eval_every_samples")
    between = status == STATUS_OVER_BUDGET and isinstance(k, int) and last < samples < last + k
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


def _restore(
    ckpt: Dict[str, Any],
    model: nn.Module,
    opt: torch.optim.Optimizer,
    state: _State,
    gen: torch.Generator,
    dev: torch.device,
    path: str,
) -> None:
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
