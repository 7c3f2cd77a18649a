"""Coordinator side: pre-train a model on a public dataset and save the weights it ships.

The paper pre-trains on a large public set (CIFAR-100, WikiText-2) before any device sees the
model; everything downstream (proxy estimation, device fine-tuning) starts from these weights,
so the file records what it is (model, input shape, classes, dataset, accuracy) and estimation
caches key on its content hash.
"""

from __future__ import annotations

import math
from pathlib import Path

from fleet.common.errors import InputError
from fleet.training.task import build_for, load_task


def pretrain(
    model_name: str,
    dataset: str,
    out: str,
    data_dir: str | None = None,
    subset: int | None = None,
    epochs: float = 1.0,
    batch_size: int = 64,
    lr: float = 1e-3,
    optimizer: str = "adam",
    seed: int = 0,
    progress=None,
) -> dict[str, object]:
    """Train ``epochs`` passes over the dataset's train split; save weights + metadata."""
    import torch

    from fleet.agent.models.registry import canonical_name
    from fleet.agent.training.checkpoint import atomic_torch_save
    from fleet.agent.training.plan import TrainHooks, TrainPlan
    from fleet.agent.training.train_state import TrainerError
    from fleet.agent.training.trainer import train_to_target

    for flag, value in (("--epochs", epochs), ("--batch-size", batch_size), ("--lr", lr)):
        if not (math.isfinite(value) and value > 0):  # NaN fails both; inf is no count
            raise InputError(f"pretrain: {flag} must be a finite number > 0, got {value}")
    task = load_task(dataset, data_dir, subset, seed)
    model = build_for(task, model_name, seed)
    n = int(task.train[0].shape[0])
    try:
        plan = TrainPlan(
            batch_size,
            lr,
            0.999,
            optimizer=optimizer,
            eval_every_samples=n,
            max_samples=max(batch_size, int(n * epochs)),
            seed=seed,
            task=task.kind,
        )
        res = train_to_target(model, task.train, task.test, plan, TrainHooks(progress=progress))
    except TrainerError as exc:
        raise InputError(f"pretrain: {exc}") from None
    meta = {
        "model": canonical_name(model_name),
        "input_shape": task.input_shape,
        "num_classes": task.classes,
        "dataset": dataset,
        "subset": subset,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "accuracy": res.final_accuracy,
        "samples": res.samples,
        "train_time_s": res.train_time_s,
        "torch": str(torch.__version__),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save({"state_dict": model.state_dict(), "meta": meta}, out, "weights")
    return meta
