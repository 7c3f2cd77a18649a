"""`powerfleet pretrain`: the coordinator's pre-trained weights (what every device starts from)."""

from __future__ import annotations

import argparse

from fleet.cli import checks
from fleet.cli.common import console, emit_json, model_help, progress_bar
from fleet.training.pretrain import pretrain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pretrain", help="pre-train a model on a public dataset")
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--dataset", required=True, help="prepared dataset name or a path")
    p.add_argument(
        "--out",
        required=True,
        type=checks.output_file("weights"),
        help="weights file to write (.pt)",
    )
    p.add_argument("--data-dir", help="prepared-data directory (default: $POWERFLEET_DATA)")
    p.add_argument("--subset", type=checks.at_least(1), help="samples to use (deterministic)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the data")
    p.add_argument("--batch-size", type=checks.at_least(1), default=64, help="samples per step")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    p.add_argument("--seed", type=int, default=0, help="initialisation and order seed")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with progress_bar("pretrain", elapsed=False) as bar:
        task = bar.add_task("", total=None)
        meta = pretrain(
            args.model,
            args.dataset,
            args.out,
            args.data_dir,
            args.subset,
            args.epochs,
            args.batch_size,
            args.lr,
            seed=args.seed,
            progress=lambda done, total, info: bar.update(task, completed=done, total=total),
        )
    if args.json:
        emit_json({"out": args.out, **meta})
    else:
        console.print(
            f"wrote {args.out}: {meta['model']} on {meta['dataset']} ({meta['samples']} samples, "
            f"test accuracy {meta['accuracy']:.3f}, {meta['train_time_s']:.0f} s)",
            highlight=False,
        )
    return 0
