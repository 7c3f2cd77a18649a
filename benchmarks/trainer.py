"""Trainer overhead: ``train_to_target``'s loop vs a bare PyTorch loop, side by side.

    python benchmarks/trainer.py [--model small_cnn] [--shape 3x32x32] [--batch 32]
        [--steps 60] [--repeat 11] [--optimizer adam] [--threads 1] [--device cpu] [--json]

Both loops train the same model (same initial weights), on the same random data, at the same
batch size with the same optimizer, for the same number of steps, drawing a seeded per-epoch
permutation and gathering each batch by index. Neither evaluates during the run (the trainer's
cadence is set past the end); both evaluate once at the end on the same small test set (the
trainer always evaluates where it stops). Each repetition times both end to end (setup
included: optimizer, fingerprint hashing, RNG forking), alternating which goes first, after one
warm-up of each. Overhead = trainer time / bare time - 1, from the medians, from the median of
the per-repetition pairs (back to back, so slow drifts of a shared machine cancel) and best-of
(the least disturbed run of each, as ``timeit`` advises).

Which clock: on the CPU the process's CPU time (``time.process_time``) is the headline, because
on a shared machine other processes steal wall time from one loop and not the other; wall time
is printed beside it. On CUDA, wall time after a device sync (CPU time would miss GPU work).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from fleet.agent.models.registry import build_model, input_spec, loss_fn, make_batch
from fleet.agent.training.plan import TrainPlan
from fleet.agent.training.trainer import make_optimizer, train_to_target


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(model, train, test, batch, steps, lr, optimizer, device, task, seed=0) -> float:
    """The loop a person would write by hand; returns the final accuracy (as the trainer does)."""
    x, y = train
    opt = make_optimizer(optimizer, model.parameters(), lr)
    gen = torch.Generator()
    gen.manual_seed(seed)
    n, perm, pos = x.shape[0], None, 0
    model.to(device).train()
    for _ in range(steps):
        if perm is None or pos + batch > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos : pos + batch]
        pos += batch
        xb, yb = x.index_select(0, idx).to(device), y.index_select(0, idx).to(device)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(device)
    model.eval()
    correct, total = torch.zeros((), dtype=torch.long, device=device), 0
    with torch.no_grad():
        tx, ty = test
        for s in range(0, tx.shape[0], max(batch, 256)):
            xb, yb = tx[s : s + max(batch, 256)].to(device), ty[s : s + max(batch, 256)].to(device)
            out = model(xb)
            correct += (out.argmax(-1 if task == "char" else 1) == yb).sum()
            total += yb.numel()
    model.train()
    return correct.item() / total


def trainer_loop(model, train, test, batch, steps, lr, optimizer, device, task, seed=0) -> float:
    plan = TrainPlan(
        batch,
        lr,
        1.0,
        optimizer=optimizer,
        eval_every_samples=batch * steps + 1,  # past the end: no evaluation during the run
        max_samples=batch * steps,
        seed=seed,
        task=task,
        eval_at_start=False,
    )
    r = train_to_target(model, train, test, plan, device=device)
    assert r.steps == steps and len(r.curve) == 1, (r.steps, r.curve)
    return r.final_accuracy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--shape", default=None, help="input shape, e.g. 3x32x32 (model default)")
    ap.add_argument("--classes", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave as is)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    spec = input_spec(args.model, args.shape)
    task = "char" if spec.kind == "text" else "classification"
    n_train = max(args.batch * 8, 1024)
    train = make_batch(args.model, n_train, spec.shape, args.classes, seed=1)
    test = make_batch(args.model, 2 * args.batch, spec.shape, args.classes, seed=2)
    base = build_model(args.model, num_classes=args.classes, input_shape=spec.shape, seed=0)
    loops = {"bare": bare_loop, "trainer": trainer_loop}

    def timed(name: str, steps: int) -> tuple[float, float]:
        model = copy.deepcopy(base)
        sync(device)
        c0, t0 = time.process_time(), time.perf_counter()
        loops[name](model, train, test, args.batch, steps, args.lr, args.optimizer, device, task)
        sync(device)
        return time.perf_counter() - t0, time.process_time() - c0

    for name in loops:  # warm-up: allocator, kernels, lazy init
        timed(name, min(args.steps, 10))
    walls = {name: [] for name in loops}  # type: dict[str, list[float]]
    cpus = {name: [] for name in loops}  # type: dict[str, list[float]]
    for rep in range(args.repeat):
        order = ["bare", "trainer"] if rep % 2 == 0 else ["trainer", "bare"]
        for name in order:
            wall, cpu = timed(name, args.steps)
            walls[name].append(wall)
            cpus[name].append(cpu)
    clock = "wall" if device.type == "cuda" else "cpu"
    times = walls if clock == "wall" else cpus
    samples = args.batch * args.steps
    med = {name: statistics.median(ts) for name, ts in times.items()}
    med_wall = {name: statistics.median(ts) for name, ts in walls.items()}
    pair = [t / b - 1.0 for t, b in zip(times["trainer"], times["bare"], strict=True)]
    out = {
        "model": args.model,
        "input_shape": "x".join(map(str, spec.shape)),
        "batch_size": args.batch,
        "steps": args.steps,
        "repeat": args.repeat,
        "optimizer": args.optimizer,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "bare_samples_per_s": samples / med["bare"],
        "trainer_samples_per_s": samples / med["trainer"],
        "clock": clock,
        "bare_times_s": times["bare"],
        "trainer_times_s": times["trainer"],
        "bare_wall_s": walls["bare"],
        "trainer_wall_s": walls["trainer"],
        "overhead_pct": 100.0 * (med["trainer"] / med["bare"] - 1.0),
        "overhead_pct_pairs_median": 100.0 * statistics.median(pair),
        "overhead_pct_wall": 100.0 * (med_wall["trainer"] / med_wall["bare"] - 1.0),
        "overhead_pct_best": 100.0 * (min(times["trainer"]) / min(times["bare"]) - 1.0),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{out['model']} {out['input_shape']}  batch {args.batch}  {args.steps} steps x "
        f"{args.repeat} reps  {args.optimizer}  {out['device']}  {out['threads']} thread(s)  "
        f"torch {out['torch']}"
    )
    for name in ("bare", "trainer"):
        ts = times[name]
        print(
            f"  {name:8s} {clock} median {med[name]:.3f} s ({samples / med[name]:8.1f} samples/s)"
            f"  min {min(ts):.3f}  max {max(ts):.3f}   wall median {med_wall[name]:.3f} s"
        )
    print(
        f"  overhead ({clock} time): medians {out['overhead_pct']:+.2f}%   "
        f"paired (median of per-rep ratios) {out['overhead_pct_pairs_median']:+.2f}%   "
        f"best-of {out['overhead_pct_best']:+.2f}%   "
        f"(wall medians {out['overhead_pct_wall']:+.2f}%)"
    )


if __name__ == "__main__":
    main()
