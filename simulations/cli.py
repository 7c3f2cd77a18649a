"""`powerfleet simulate`: run a fleet round and show what every device chose and what it cost."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fleet.cli.common import budget_label, console, emit_json, fmt, mhz, table
from fleet.errors import InputError
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
    p.add_argument("--run-dir", help="where to write report.json and devices.csv")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    progress_bar = Progress(
        TextColumn("[bold]simulate[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress_bar:
        task = progress_bar.add_task("starting", total=None)

        def progress(done: int, total: int, name: str) -> None:
            progress_bar.update(task, completed=done, total=total, description=name)

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


def show(report: dict) -> None:
    cols = [
        "device",
        "type",
        "budget",
        "status",
        "batch",
        "freq MHz",
        "peak W",
        "time s",
        "energy J",
        "accuracy",
        "x vs B1",
        "x vs B2",
    ]
    rows = [
        [
            d["device"],
            d["device_type"],
            budget_label(d["budget_w"]),
            d["status"],
            d["batch_size"],
            mhz(d["freq_mhz"]),
            d["peak_power_w"],
            d["time_s"],
            d["energy_j"],
            d["accuracy"],
            d["speedup_vs_b1"],
            d["speedup_vs_b2"],
        ]
        for d in report["devices"]
    ]
    title = (
        f"{report['run']}: {len(rows)} devices, {report['model']}, target "
        f"{report['target_accuracy']:g}, engine {report['engine']}"
    )
    if len(rows) > 40:  # a what-if fleet: show the first rows, the totals tell the rest
        rows = rows[:20] + [["..."] + [""] * (len(cols) - 1)] + rows[-5:]
    console.print(table(title, cols, rows))
    f = report["fleet"]
    counts = ", ".join(f"{k}: {v}" for k, v in f["status_counts"].items())
    console.print(
        f"fleet: {f['devices']} devices ({counts}); energy {fmt(f['energy_j'])} J; round time "
        f"{fmt(f['round_time_s'])} s (median {fmt(f['median_time_s'])} s); weighted accuracy "
        f"{fmt(f['accuracy_weighted'])}; median speed-up vs B1 {fmt(f['median_speedup_vs_b1'])}"
        f", vs B2 {fmt(f['median_speedup_vs_b2'])}; budget violations: "
        f"{len(f['budget_violations'])}",
        highlight=False,
    )
    for d in report["devices"]:
        if d["status"] not in ("ok",) and d.get("message"):
            console.print(f"  {d['device']}: {d['status']}: {d['message']}", highlight=False)
    console.print(
        f"report: {report['run_dir']}/report.json, devices.csv ({report['wall_s']:.1f} s)",
        highlight=False,
    )
