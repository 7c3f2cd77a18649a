"""`powerfleet budget-feed`: play a power trace into a live budget file (``fleet.budgets.feed``)."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import types

from fleet.budgets.trace import DEFAULT_DWELL_S, schedule_from_trace
from fleet.cli import checks
from fleet.cli.names import deprecated
from fleet.common.errors import InputError
from fleet.method.budget import format_budget


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "budget-feed",
        help="write a power trace's budget into the file `powerfleet train --budget-file` reads",
    )
    p.add_argument("--budget-trace", required=True, help="power trace CSV: time_s, available_w")
    p.add_argument(
        "--budget-file",
        required=True,
        type=checks.output_file("budget"),
        help="the live budget file to write",
    )
    p.add_argument(
        "--budget-dwell-s", type=float, default=DEFAULT_DWELL_S, help="least time between rises"
    )
    deprecated(p, "--trace", "budget_trace")
    deprecated(p, "--file", "budget_file")
    deprecated(p, "--dwell-s", "budget_dwell_s")
    p.add_argument("--start-s", type=float, help="trace second to start at (default: first row)")
    p.add_argument("--speed", type=float, default=1.0, help="trace seconds per wall second")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet.budgets.feed import check_speed, feed

    check_speed(args.speed)
    if not (math.isfinite(args.budget_dwell_s) and args.budget_dwell_s >= 0):
        raise InputError(f"--budget-dwell-s: expected seconds >= 0, got {args.budget_dwell_s}")
    if args.start_s is not None and not math.isfinite(args.start_s):
        raise InputError(f"--start-s: expected a second of the trace, got {args.start_s}")
    steps = schedule_from_trace(
        args.budget_trace, args.budget_dwell_s, "--budget-trace", args.start_s,
        ("--budget-dwell-s", "--start-s"),
    )  # fmt: skip

    def stop(_signum: int, _frame: types.FrameType | None) -> None:
        raise SystemExit(0)  # the file keeps the last budget written: the loop keeps a value

    signal.signal(signal.SIGTERM, stop)

    def say(at: float, watts: float | None) -> None:
        print(f"{at:8.1f} s  budget {format_budget(watts)}", flush=True)

    try:
        feed(steps, args.budget_file, args.speed, on_write=say)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    return 0
