"""`powerfleet simulate`: run a fleet round and show what every device chose and what it cost."""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from fleet.cli import checks
from fleet.cli.common import console, emit_json, fmt, progress_bar
from fleet.common.errors import InputError
from fleet.common.signals import sigterm_as_interrupt
from fleet.reports.report import device_table, segment_table, speedup_summary
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
    with sigterm_as_interrupt(), progress_bar("simulate") as bar:
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


def show(report: dict) -> None:
    cols, rows = device_table(report["devices"])
    title = (
        f"{report['run']}: {len(rows)} devices, {report['model']}, target "
        f"{report['target_accuracy']:g}, engine {report['engine']}"
    )
    if len(rows) > 40:  # a what-if fleet: show the first rows, the totals tell the rest
        rows = rows[:20] + [["..."] + [""] * (len(cols) - 1)] + rows[-5:]
    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c, justify="left" if c in ("device", "type", "status") else "right")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    seg_cols, seg_rows = segment_table(report["devices"])
    if seg_rows:  # the mid-run switches the device table cannot show
        st = Table(title="segments", title_justify="left")
        for c in seg_cols:
            st.add_column(c, justify="left" if c in ("device", "reason") else "right")
        for r in seg_rows[:60]:
            st.add_row(*r)
        console.print(st)
    f = report["fleet"]
    counts = ", ".join(f"{k}: {v}" for k, v in f["status_counts"].items())
    console.print(
        f"fleet: {f['devices']} devices ({counts}); training energy {fmt(f['energy_j'])} J, "
        f"round energy {fmt(f.get('round_energy_j'))} J (idle waiting included; "
        f"{f.get('idle_unknown', '?')} devices without idle power); round time "
        f"{fmt(f['round_time_s'])} s (median {fmt(f['median_time_s'])} s); weighted accuracy "
        f"{fmt(f['accuracy_weighted'])}; median speed-up {speedup_summary(f)}; budget violations: "
        f"{len(f['budget_violations'])}",
        highlight=False,
    )
    if report.get("deadline_vs_time"):  # the deadline objective beside the time objective
        from fleet.reports.deadline_md import deadline_lines

        for line in deadline_lines(report["deadline_vs_time"], report.get("deadline_s")):
            console.print(line, highlight=False)
    for d in report["devices"]:
        if d.get("message"):  # why it failed, or what an ok row's numbers mean
            console.print(f"  {d['device']}: {d['status']}: {d['message']}", highlight=False)
    console.print(
        f"report: {report['run_dir']}/report.json, devices.csv ({report['wall_s']:.1f} s)",
        highlight=False,
    )
