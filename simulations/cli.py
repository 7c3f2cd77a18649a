"""`powerfleet simulate`: run a fleet round and show what every device chose and what it cost."""

from __future__ import annotations

import argparse
import sys

from fleet.cli import checks
from fleet.cli.common import emit_json, progress_bar
from fleet.cli.result import show
from fleet.common.errors import InputError
from simulations.flower_engine import FlowerRunError
from simulations.runner import DEFAULT_FLEET, ENGINES, simulate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate a fleet round (Flower simulation or direct)")
    p.add_argument("--fleet", help=f"fleet TOML (default: {DEFAULT_FLEET.name}, a mixed fleet)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="flower",
        help="flower: Flower's simulation engine; direct: same devices, no Ray",
    )
    p.add_argument(
        "--run-dir",
        type=checks.output_dir("run directory"),
        help="where to write report.json and devices.csv",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with progress_bar("simulate") as bar:
        task = bar.add_task("starting", total=None)

        def progress(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=name)

        try:
            report = simulate(args.fleet, args.engine, args.run_dir, progress)
        except FlowerRunError as exc:  # the run failed: one line, not a traceback
            print(f"powerfleet simulate: error: {exc}", file=sys.stderr)
            return 1
        except ValueError as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(str(exc)) from None
    if args.json:
        emit_json(report)
        return 0
    show(report)
    return 0
