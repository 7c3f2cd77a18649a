"""`powerfleet report RUN_DIR`: a Markdown report with figures for any simulation/deployment run."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleet.cli import checks
from fleet.cli.common import console, emit_json
from fleet.method.profile_io import atomic_write_text
from fleet.reports.markdown import run_markdown
from fleet.reports.report import read_report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="turn a run directory into a Markdown report with plots")
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=checks.run_dir,
        help="a directory holding report.json (from simulate or deploy)",
    )
    p.add_argument("--json", action="store_true", help="print the report's paths as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    report = read_report(run_dir)
    text = run_markdown(report, run_dir)
    out = run_dir / "report.md"
    atomic_write_text(str(out), text)
    figures = sorted(str(p) for p in (run_dir / "figures").glob("*.png"))
    if args.json:
        emit_json({"report": str(out), "figures": figures})
    else:
        console.print(f"wrote {out} with {len(figures)} figure(s)", highlight=False)
    return 0
