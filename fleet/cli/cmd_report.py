"""`powerfleet report RUN_DIR`: a Markdown report with figures for any simulation/deployment run.

A run that has not finished (interrupted: Ctrl-C, SIGTERM, a killed coordinator; or still
running) has no report.json yet; its round state says what is known, so the report is written
from it (``runlife.partial_report``: every finished device's row, the others with their last
progress) and one line on stderr says what is missing; exit 1, since the report is not the
run's whole. A dead writer's run is sealed ``interrupted`` on the way (``roundstate.seal``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fleet.cli import checks
from fleet.cli.common import console, emit_json
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.method.profile_io import atomic_write_text
from fleet.reports import roundstate, runlife
from fleet.reports.markdown import run_markdown
from fleet.reports.report import read_report
from fleet.rounds import statuses


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
    state = None
    if (run_dir / roundstate.STATE_FILE).is_file():
        state, changed = roundstate.read_run(run_dir)
        if changed:
            roundstate.seal(run_dir, state)
    if state is not None and statuses.run_status(state) != "finished":
        return partial(args, run_dir, state)
    report = read_report(run_dir)
    write(args, run_dir, report)
    return 0


def partial(args: argparse.Namespace, run_dir: Path, state: dict) -> int:
    """The report of what is known, and one line saying what is missing (exit 1)."""
    report, missing = runlife.partial_report(state)
    try:  # what the fleet file says of the run (the state does not repeat it)
        run = load_fleet(state["fleet_file"]).run
        report.update(model=run.model, target_accuracy=run.target_accuracy)
        report.update(objective=run.objective, mode=run.mode)
    except (InputError, OSError):
        pass
    if report["run_status"] == "interrupted":
        how = "was " + runlife.interruption_line(state)
    else:
        w = state.get("writer") or {}
        how = f"is still running (pid {w.get('pid')} on {w.get('host')}: powerfleet status)"
    write(args, run_dir, report)
    print(f"powerfleet report: {run_dir}: the run {how}; missing: {missing}", file=sys.stderr)
    return 1


def write(args: argparse.Namespace, run_dir: Path, report: dict) -> None:
    text = run_markdown(report, run_dir)
    out = run_dir / "report.md"
    atomic_write_text(str(out), text)
    figures = sorted(str(p) for p in (run_dir / "figures").glob("*.png"))
    if args.json:
        status = report.get("run_status", "finished")
        extra = {"missing": report["missing"]} if status != "finished" else {}
        emit_json({"report": str(out), "figures": figures, "run_status": status, **extra})
    else:
        console.print(f"wrote {out} with {len(figures)} figure(s)", highlight=False)
