"""`powerfleet noise-scale`: the gradient noise scale of a dataset at given weights (issue 22).

Before any training, a device can measure how noisy its data's gradients are at the shipped
weights (``fleet/agent/noise_scale.noise_scale``: micro-batch gradients, nothing updated) and
what shape of samples-to-target per batch size the large-batch law gives it (``N(b) ~ 1 + b /
B_noise``). Measured against real training (docs/efficiency/calibration.md), that law predicts
the shape once training has started, not at weights that meet a new task (a head learnt from
scratch shows a tiny noise scale); the training devices therefore read the noise scale from
their own steps (``learn_efficiency = "device"``). This command is the look before training,
and its cost: the backward passes it spends are printed.
"""

from __future__ import annotations

import argparse

from fleet.cli import checks
from fleet.cli.common import console, emit_json, model_help, table
from fleet.cli.names import deprecated
from fleet.common.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("noise-scale", help="gradient noise scale of a dataset at given weights")
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--dataset", required=True, help="prepared dataset name or a path")
    deprecated(p, "--data", "dataset")
    p.add_argument(
        "--weights",
        type=checks.input_file("weights"),
        help="the shipped weights (default: a fresh model)",
    )
    p.add_argument("--data-dir", help="prepared-data directory (default: $POWERFLEET_DATA)")
    p.add_argument(
        "--batch-sizes", type=checks.number_list(True), default="4,8,16,32,64,128",
        help="for the law's shape",
    )  # fmt: skip
    p.add_argument("--small", type=checks.at_least(1), default=8, help="micro-batch size")
    p.add_argument(
        "--big", type=checks.at_least(1), default=128, help="batch whose micro-batches are averaged"
    )
    p.add_argument(
        "--batches", type=checks.at_least(1), default=8, help="big batches to average over"
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet.agent.learning.efficiency_learner import shape_from_noise
    from fleet.agent.learning.noise_scale import NoiseScaleError, noise_scale
    from fleet.training.task import build_for, load_task

    bs = args.batch_sizes
    task = load_task(args.dataset, args.data_dir, seed=0)
    model = build_for(task, args.model, args.seed, args.weights)
    try:
        ns = noise_scale(model, task.train, args.small, args.big, args.batches, args.seed)
    except NoiseScaleError as exc:
        raise InputError(f"noise-scale: {exc}") from None
    shape = shape_from_noise(ns.b_noise, bs)
    out = {**ns._asdict(), "shape": shape}
    if args.json:
        emit_json(out)
        return 0
    console.print(
        f"B_noise {ns.b_noise:.4g} (Adam-preconditioned; plain {ns.b_noise_sgd:.4g}), standard "
        f"error of its log {ns.rel_se:.2f}, from {ns.backward_passes} backward passes of "
        f"{ns.small} ({ns.samples} samples)",
        highlight=False,
    )
    if shape:
        console.print(
            table(
                "Large-batch law",
                ["batch", "N(b) / N(max)"],
                [[b, f"{shape[b]:.3f}"] for b in bs],
            )  # fmt: skip
        )
    return 0
