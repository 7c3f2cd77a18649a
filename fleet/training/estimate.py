"""Coordinator side of §4.2: samples-to-accuracy per batch size, measured on a proxy dataset.

For every candidate batch size and seed, fine-tune the same pre-trained weights on the proxy
with the learning rate the device will use (square-root scaling for Adam/AdamW) until the
target accuracy, and count the samples it took. The mean over seeds becomes the efficiency
vector the coordinator ships. Runs are independent, so they fan out over worker processes (one
torch thread each: the machine's cores, not torch's intra-op threads, are the unit here), or
onto an existing Ray cluster when an address is given. Results are cached by everything that
determines them: model, weights hash, proxy, batch sizes, target, seeds and the training rule.

A batch size reached in only some seeds is marked not reached (empty value): a device should
not bet its budget on a batch size that fails to converge part of the time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fleet.common.errors import InputError
from fleet.core.curves import Curves, curves_path, noise_law_error, save_curves, warm_noise_scale
from fleet.core.efficiency import Efficiency, save_efficiency
from fleet.method.envvars import env_folder
from fleet.method.selection import scaled_lr
from fleet.training.task import Task, build_for, load_task

CACHE_ENV = "POWERFLEET_CACHE"  # the coordinator's cache folder (estimates, analogue weights)


@dataclass(frozen=True)
class EstimateSpec:
    model: str
    proxy: str  # a prepared dataset name (powerfleet data prepare) or a path
    batch_sizes: tuple[int, ...]
    target_accuracy: float
    seeds: int = 3
    weights: str | None = None  # a state_dict file (powerfleet pretrain); None: fresh init
    optimizer: str = "adam"
    lr_ref_batch: int = 128
    lr_ref: float = 5e-4
    subset: int | None = None  # proxy samples to use (deterministic), None: all
    eval_every_samples: int | None = None
    max_samples: int | None = None
    data_dir: str | None = None
    input_shape: str | None = None

    def key(self) -> str:
        """Cache key: every input that changes the answer, weights by content."""
        d = asdict(self)
        d.pop("data_dir")
        d["weights"] = file_sha256(self.weights) if self.weights else None
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:20]


@dataclass(frozen=True)
class RunResult:
    batch_size: int
    seed: int
    lr: float
    status: str
    samples_to_accuracy: int | None
    samples: int
    final_accuracy: float
    train_time_s: float
    curve: list[tuple[int, float]]  # (samples, test accuracy) at every evaluation
    # (samples, mean training loss since the evaluation before); absent in older caches
    loss_curve: Sequence[tuple[int, float]] = ()
    # (samples, gradient noise scale, se of its log) read from the training steps at every
    # evaluation (fleet.agent.learning.noise_scale.NoiseTracker); absent in older caches
    noise_curve: Sequence[tuple[int, float, float]] = ()


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        msg = f"{path}: weights file not found (make it with powerfleet pretrain)"
        raise InputError(msg) from None
    return h.hexdigest()


def load_proxy(spec: EstimateSpec) -> Task:
    """The proxy's splits (seed 0 always: every run of an estimate sees the same data)."""
    return load_task(spec.proxy, spec.data_dir, spec.subset, seed=0)


def build(spec: EstimateSpec, task: Task, seed: int):
    if spec.input_shape:  # an explicit shape wins over the data's (e.g. a resizing reader)
        task = replace(task, input_shape=spec.input_shape)
    return build_for(task, spec.model, seed, spec.weights)


_DATA_CACHE: dict[str, Task] = {}


def run_one(spec: EstimateSpec, batch_size: int, seed: int) -> RunResult:
    """One (batch size, seed) fine-tune to target. Runs in a worker process."""
    import torch

    from fleet.agent.learning.noise_scale import NoiseTracker
    from fleet.agent.training.plan import TrainHooks, TrainPlan
    from fleet.agent.training.train_state import TrainerError
    from fleet.agent.training.trainer import train_to_target

    torch.set_num_threads(1)
    key = spec.key()
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load_proxy(spec)
    task = _DATA_CACHE[key]
    model = build(spec, task, seed)
    lr = scaled_lr(batch_size, spec.lr_ref_batch, spec.lr_ref, spec.optimizer)
    tracker = NoiseTracker(preconditioner="adam" if spec.optimizer in ("adam", "adamw") else "none")
    noise: list[tuple[int, float, float]] = []

    def read_noise(samples: int, _cap: int, info: dict) -> None:
        got = tracker.estimate() if info.get("phase") == "eval" else None
        if got is not None:
            noise.append((int(samples), float(got[0]), float(got[1])))

    try:
        plan = TrainPlan(
            batch_size,
            lr,
            spec.target_accuracy,
            optimizer=spec.optimizer,
            eval_every_samples=spec.eval_every_samples,
            max_samples=spec.max_samples,
            seed=seed,
            task=task.kind,
        )
        hooks = TrainHooks(
            noise_tracker=tracker,
            progress=read_noise,
            progress_interval_s=1e9,  # evaluations only
        )
        res = train_to_target(model, task.train, task.test, plan, hooks)
    except TrainerError as exc:
        raise InputError(f"estimate b={batch_size} seed={seed}: {exc}") from None
    return RunResult(
        batch_size,
        seed,
        lr,
        res.status,
        res.samples_to_accuracy,
        res.samples,
        res.final_accuracy,
        res.train_time_s,
        [(s, a) for s, a in res.curve],  # the trainer's [samples, value] pairs
        [(s, v) for s, v in res.loss_curve],
        noise,
    )


def aggregate(spec: EstimateSpec, runs: list[RunResult]) -> Efficiency:
    samples: dict[int, float] = {}
    std: dict[int, float] = {}
    count: dict[int, int] = {}
    for b in spec.batch_sizes:
        mine = [r for r in runs if r.batch_size == b]
        reached = [r.samples_to_accuracy for r in mine if r.samples_to_accuracy is not None]
        count[b] = len(mine)
        if any(n == 0 for n in reached):
            raise InputError(
                f"estimate: the starting weights already reach {spec.target_accuracy:g} on "
                f"{spec.proxy} before any training (batch {b}); pick a higher target accuracy"
            )
        if mine and len(reached) == len(mine):
            samples[b] = float(statistics.fmean(reached))
            std[b] = float(statistics.pstdev(reached)) if len(reached) > 1 else 0.0
        else:
            samples[b] = math.nan
    meta = {
        "model": spec.model,
        "dataset": Path(spec.proxy).name,
        "target_accuracy": f"{spec.target_accuracy:g}",
        "source": "trained",
    }
    return Efficiency(samples, std, count, source=f"estimate:{spec.key()}", metadata=meta)


def default_cache_dir() -> Path:
    """``$POWERFLEET_CACHE/estimates`` (default ``~/.cache/powerfleet``); an unusable
    ``$POWERFLEET_CACHE`` is refused naming it (``fleet.method.envvars``)."""
    root = env_folder(CACHE_ENV, os.path.join(os.path.expanduser("~"), ".cache", "powerfleet"))
    return Path(root) / "estimates"


def estimate(
    spec: EstimateSpec,
    workers: int | None = None,
    cache_dir: Path | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int, RunResult], None] | None = None,
) -> tuple[Efficiency, list[RunResult], bool]:
    """Every (batch, seed) run, in parallel; returns (efficiency, runs, from_cache)."""
    if not spec.batch_sizes or any(b <= 0 for b in spec.batch_sizes):
        raise InputError(f"--batch-sizes: need positive integers, got {spec.batch_sizes}")
    if not 0 < spec.target_accuracy <= 1:
        raise InputError(f"--target-accuracy must be in (0, 1], got {spec.target_accuracy}")
    if spec.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {spec.seeds}")
    cache = (cache_dir or default_cache_dir()) / f"{spec.key()}.json"
    if cache.exists():
        data = json.loads(cache.read_text())
        runs = [
            RunResult(
                **{
                    **r,
                    "curve": [tuple(c) for c in r["curve"]],
                    "loss_curve": [tuple(c) for c in r.get("loss_curve", ())],
                    "noise_curve": [tuple(c) for c in r.get("noise_curve", ())],
                }
            )
            for r in data["runs"]
        ]
        return aggregate(spec, runs), runs, True
    # fail fast, in this process, on a dataset that is not prepared or weights that do not fit
    build(spec, load_proxy(spec), 0)
    jobs = [(b, s) for b in spec.batch_sizes for s in range(spec.seeds)]
    runs = []
    if ray_address:
        runs = _ray_runs(spec, jobs, ray_address, progress)
    else:
        n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
        with ProcessPoolExecutor(max_workers=n) as pool:
            futures = [pool.submit(run_one, spec, b, s) for b, s in jobs]
            for fut in as_completed(futures):
                runs.append(fut.result())
                if progress:
                    progress(len(runs), len(jobs), runs[-1])
    runs.sort(key=lambda r: (r.batch_size, r.seed))
    cache.parent.mkdir(parents=True, exist_ok=True)
    from fleet.method.profile_io import atomic_write_text

    atomic_write_text(
        str(cache), json.dumps({"spec": asdict(spec), "runs": [asdict(r) for r in runs]}) + "\n"
    )
    return aggregate(spec, runs), runs, False


def _ray_runs(spec, jobs, address, progress) -> list[RunResult]:
    """Fan the runs out onto an existing Ray cluster (the user's, not one we start)."""
    import ray

    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_one)
    pending = {remote.remote(spec, b, s): (b, s) for b, s in jobs}
    runs: list[RunResult] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            pending.pop(ref)
            runs.append(ray.get(ref))
            if progress:
                progress(len(runs), len(jobs), runs[-1])
    return runs


def write_outputs(eff: Efficiency, runs: list[RunResult], spec: EstimateSpec, out: str) -> None:
    """The efficiency CSV (the contract) plus a per-run CSV beside it (the convergence traces)."""
    reached = {
        b: sum(r.samples_to_accuracy is not None for r in runs if r.batch_size == b)
        for b in spec.batch_sizes
    }
    # names and content hashes, not machine paths: the file is meant to travel
    weights = (
        f"{Path(spec.weights).name} (sha256 {file_sha256(spec.weights)[:12]})"
        if spec.weights
        else "fresh init"
    )
    comments = [
        f"powerfleet estimate: model={spec.model} proxy={Path(spec.proxy).name} "
        f"target_accuracy={spec.target_accuracy:g} seeds={spec.seeds}",
        f"lr rule: {spec.optimizer}, lr={spec.lr_ref:g} at batch {spec.lr_ref_batch} "
        f"({'square-root' if spec.optimizer.lower() in ('adam', 'adamw') else 'linear'} scaling)",
        f"weights={weights} cache_key={spec.key()}",
        "reached in seeds: " + ", ".join(f"b={b}: {k}/{spec.seeds}" for b, k in reached.items()),
        "source=trained (real training on the proxy dataset)",
    ]
    curves = write_curves(runs, spec, out)
    err = noise_law_error(eff.reached, curves)
    if err is not None:  # how far the noise scale's law missed these very runs
        eff = replace(eff, metadata={**eff.metadata, "noise_law_err": f"{err:.3f}"})
        comments.append(
            f"noise_law_err={err:.3f}: RMS log error of the gradient-noise-scale law's shape "
            f"(warm B_noise {warm_noise_scale(curves):.4g}) against these runs"
        )
    save_efficiency(eff, out, comments)
    lines = ["batch_size,seed,lr,status,samples_to_accuracy,samples,final_accuracy,train_time_s"]
    for r in runs:
        lines.append(
            f"{r.batch_size},{r.seed},{r.lr:.6g},{r.status},"
            f"{'' if r.samples_to_accuracy is None else r.samples_to_accuracy},{r.samples},"
            f"{r.final_accuracy:.4f},{r.train_time_s:.3f}"
        )
    from fleet.method.profile_io import atomic_write_text

    runs_path = str(Path(out).with_suffix("")) + ".runs.csv"
    atomic_write_text(runs_path, "\n".join(lines) + "\n")


def write_curves(runs: list[RunResult], spec: EstimateSpec, out: str) -> Curves:
    """Every run's evaluations beside the efficiency file (``X.curves.csv``,
    ``fleet.core.curves``): what a replay device that learns online reads."""
    curves = Curves(
        {(r.batch_size, r.seed): [(float(s), float(a)) for s, a in r.curve] for r in runs},
        target=spec.target_accuracy,
        noise={
            (r.batch_size, r.seed): [(float(s), float(v), float(se)) for s, v, se in r.noise_curve]
            for r in runs
            if r.noise_curve
        },
    )
    save_curves(
        curves,
        curves_path(out),
        [f"learning curves of powerfleet estimate: model={spec.model} proxy={Path(spec.proxy).name}"
         f" seeds={spec.seeds} eval every {spec.eval_every_samples} samples"],
    )  # fmt: skip
    return curves
