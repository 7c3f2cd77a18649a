"""Fuzz target family: tensor files (weights, data, checkpoints).

Seeds are a real model's weights, a small dataset and a trainer checkpoint, saved as the project
saves them; mutations are byte damage, a checkpoint re-saved with tampered counters, and a
hostile pickle (which must never run). A corrupted file must either be refused or load with
the same content.
"""

from __future__ import annotations

import importlib
import math
import os
import random
from pathlib import Path

from benchmarks.fuzz_harness import Format, classify_call
from benchmarks.fuzz_mutators import m_binary, m_flip, m_nul, m_truncate


def tensor_io():
    """(save(obj, path), how the project loads weights/data/checkpoints) for this tree."""
    try:
        tf = importlib.import_module("fleet.agent.data.tensorfile")
        return tf.save, "tensorfile"
    except ImportError:
        import torch

        return (lambda obj, path: torch.save(obj, path)), "torch.save"


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def counters_problem(counters: dict) -> str | None:
    """A checkpoint's counters against its own history (what a tampered file gets wrong)."""
    samples = counters.get("samples")
    curve = counters.get("curve") or []
    if not isinstance(samples, int) or samples < 0:
        return f"samples counter {samples!r} accepted"
    if curve and max(int(s) for s, _ in curve) > samples:
        return f"samples counter {samples} below the curve's last point {curve[-1][0]}"
    if curve and int(curve[-1][0]) != samples:
        return f"samples counter {samples} is not the last evaluation's {curve[-1][0]}"
    if counters.get("status") == "reached" and counters.get("samples_to_accuracy") is None:
        return "status reached without samples_to_accuracy"
    return None


def tensor_format(tmp: str):
    import torch

    from fleet.agent.models.registry import build_model
    from fleet.agent.protocol import train_args
    from fleet.agent.training import checkpoint, trainer
    from fleet.agent.training.plan import TrainPlan

    save, how = tensor_io()
    torch.manual_seed(0)
    x = torch.randn(48, 1, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    data = {"train": (x[:32], y[:32]), "test": (x[32:], y[32:])}
    model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ckpt_path = os.path.join(tmp, "seed.ckpt")
    plan = TrainPlan(16, 1e-3, 0.999, eval_every_samples=16, max_samples=32, eval_at_start=False)
    trainer.train_to_target(model, data["train"], data["test"], plan, checkpoint_path=ckpt_path)
    seeds = {}
    for kind, obj in (("weights", weights), ("data", data)):
        p = os.path.join(tmp, "seed-" + kind)
        save(obj, p)
        seeds[kind] = (Path(p).read_bytes(), obj)
    ckpt_obj = _load_ckpt_any(ckpt_path)
    seeds["checkpoint"] = (Path(ckpt_path).read_bytes(), ckpt_obj)
    fingerprint = ckpt_obj["fingerprint"]

    from fleet.training.task import read_weights

    loaders = {
        "weights": read_weights,
        "data": train_args.load_train_data,
        "checkpoint": lambda p: checkpoint.load_checkpoint(p, fingerprint),
    }

    class HostilePickle:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(tmp, "PWNED"),))

    def m_tamper(rng: random.Random, kind: str, obj) -> bytes | None:
        """Re-save a checkpoint with its counters changed (as a tamperer with the tool would)."""
        if kind != "checkpoint":
            return None
        c = dict(obj)
        counters = dict(c["counters"])
        field = rng.choice(["samples", "steps", "status", "curve"])
        if field == "samples":
            counters["samples"] = counters["samples"] + rng.choice([-16, 16, 10**6])
        elif field == "steps":
            counters["samples"] = 0
        elif field == "status":
            counters["status"] = "reached"
        else:
            counters["curve"] = [[10**9, 1.0]]
        c["counters"] = counters
        p = os.path.join(tmp, "tamper")
        save(c, p)
        return Path(p).read_bytes()

    class Fmt(Format):
        name = "tensor files"
        detail = how

        def run_one(self, rng, limit_s):
            kind = rng.choice(sorted(seeds))
            raw, obj = seeds[kind]
            r = rng.random()
            if r < 0.15:
                data = m_tamper(rng, kind, obj) or m_flip(rng, raw)
            elif r < 0.2:
                import pickle

                data = pickle.dumps(HostilePickle())
            else:
                data = rng.choice([m_flip, m_flip, m_truncate, m_binary, m_nul])(rng, raw)
            path = os.path.join(tmp, "fuzz-" + kind)
            with open(path, "wb") as fh:
                fh.write(data)
            marker = os.path.join(tmp, "PWNED")

            def check(loaded):
                if os.path.exists(marker):
                    os.unlink(marker)
                    return "a hostile pickle ran code"
                if kind == "data":
                    loaded = {"train": loaded[0], "test": loaded[1]}
                if kind == "checkpoint":
                    problem = counters_problem(loaded.get("counters") or {})
                    if problem:
                        return problem
                    if data != raw and not _same_ckpt(loaded, obj):
                        return "a corrupted checkpoint loaded with different content"
                    return None
                if data != raw and not _same(loaded, obj):
                    return f"a corrupted {kind} file loaded with different content"
                return None

            outcome, detail = classify_call(lambda: loaders[kind](path), check, limit_s)
            if os.path.exists(marker):
                os.unlink(marker)
                outcome, detail = "impossible", "a hostile pickle ran code"
            return outcome, kind + ": " + detail, data

    return Fmt()


def _load_ckpt_any(path: str):
    try:
        tf = importlib.import_module("fleet.agent.data.tensorfile")
        return tf.load(path)
    except ImportError:
        import torch

        return torch.load(path, weights_only=True)


def _same_ckpt(a, b) -> bool:
    keys = ("model", "optimizer", "counters", "fingerprint")
    return all(_same(a.get(k), b.get(k)) for k in keys)
