"""`powerfleet estimate`: samples-to-accuracy per batch size on a proxy dataset (§4.2)."""

from __future__ import annotations

import argparse
import math

from fleet.cli import checks
from fleet.cli.common import console, emit_json, model_help, progress_bar, table
from fleet.cli.names import deprecated
from fleet.training.estimate import EstimateSpec, estimate, write_outputs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="estimate samples-to-accuracy per batch size on a proxy")
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--dataset", required=True, help="the proxy: a prepared dataset name or a path")
    deprecated(p, "--proxy", "dataset")
    p.add_argument(
        "--batch-sizes", type=checks.number_list(True), default="4,8,16,32,64,128",
        help="comma-separated",
    )  # fmt: skip
    p.add_argument("--target-accuracy", type=float, required=True, help="accuracy to reach (0-1)")
    p.add_argument("--seeds", type=int, default=3, help="runs per batch size")
    p.add_argument(
        "--weights",
        type=checks.input_file("weights"),
        help="pre-trained weights (powerfleet pretrain); default: fresh",
    )
    p.add_argument(
        "--optimizer", default="adam", choices=["adam", "adamw", "sgd"], help="optimizer"
    )
    p.add_argument(
        "--lr-ref",
        type=checks.positive_number,
        default=5e-4,
        help="learning rate at --lr-ref-batch",
    )
    p.add_argument(
        "--lr-ref-batch",
        type=checks.at_least(1),
        default=128,
        help="batch size --lr-ref is for (lr scales)",
    )
    p.add_argument("--subset", type=checks.at_least(1), help="proxy samples to use (deterministic)")
    p.add_argument("--eval-every", type=checks.at_least(1), help="samples between evaluations")
    p.add_argument(
        "--max-samples", type=checks.at_least(1), help="stop a run here if the target is not met"
    )
    p.add_argument("--data-dir", help="prepared-data directory (default: $POWERFLEET_DATA)")
    p.add_argument(
        "--workers", type=checks.at_least(1), help="parallel runs (default: one per core)"
    )
    p.add_argument(
        "--ray-address",
        type=checks.ray_address,
        help="fan out onto an existing Ray cluster (e.g. ray://h:10001)",
    )
    p.add_argument("--cache-dir", help="where results are cached (default ~/.cache/powerfleet)")
    p.add_argument(
        "--out",
        required=True,
        type=checks.output_file("efficiency CSV"),
        help="efficiency CSV to write",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    spec = EstimateSpec(
        model=args.model,
        proxy=args.dataset,
        batch_sizes=tuple(args.batch_sizes),
        target_accuracy=args.target_accuracy,
        seeds=args.seeds,
        weights=args.weights,
        optimizer=args.optimizer,
        lr_ref_batch=args.lr_ref_batch,
        lr_ref=args.lr_ref,
        subset=args.subset,
        eval_every_samples=args.eval_every,
        max_samples=args.max_samples,
        data_dir=args.data_dir,
    )
    with progress_bar("estimate") as bar:
        task = bar.add_task("", total=len(spec.batch_sizes) * spec.seeds)

        def progress(done, total, run):
            bar.update(
                task,
                completed=done,
                description=f"b={run.batch_size} seed={run.seed}: {run.status}",
            )

        eff, runs, cached = estimate(
            spec,
            args.workers,
            Path(args.cache_dir) if args.cache_dir else None,
            args.ray_address,
            progress,
        )
    write_outputs(eff, runs, spec, args.out)
    if args.json:
        emit_json(
            {
                "out": args.out,
                "cached": cached,
                "batch_sizes": eff.batch_sizes,
                "samples_to_accuracy": [eff.samples[b] for b in eff.batch_sizes],
                "unreached": eff.unreached,
                "ratios": eff.ratios() if eff.reached else {},
            }
        )
        return 0
    ratios = eff.ratios() if eff.reached else {}
    console.print(
        table(
            f"Samples to {spec.target_accuracy:g} accuracy on {spec.proxy} ({spec.model}, "
            f"{spec.seeds} seeds{', cached' if cached else ''})",
            ["batch", "samples", "std", "r", "runs reached"],
            [
                [
                    b,
                    eff.samples[b],
                    eff.std.get(b),
                    ratios.get(b),
                    f"{sum(r.samples_to_accuracy is not None for r in runs if r.batch_size == b)}"
                    f"/{spec.seeds}",
                ]
                for b in eff.batch_sizes
            ],
        )
    )
    if eff.unreached:
        console.print(f"not reached (left empty): {eff.unreached}")
    console.print(f"wrote {args.out}", highlight=False)
    return 0 if not all(math.isnan(v) for v in eff.samples.values()) else 1
