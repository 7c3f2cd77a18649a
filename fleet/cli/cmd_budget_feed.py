"""`powerfleet budget-feed`: play a power trace into a live budget file (``fleet.budgets.feed``)."""

from __future__ import annotations

import argparse
import signal
import sys
import types

from fleet.budgets.trace import DEFAULT_DWELL_S, schedule_from_trace
from fleet.method.budget import format_budget


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "budget-feed",
        help="write a power trace's budget into the file `powerfleet train --budget-file` reads",
    )
    p.add_argument("--trace", required=True, help="CSV with time_s, available_w")
    p.add_argument("--file", required=True, help="the live budget file to write")
    p.add_argument(
        "--dwell-s", type=float, default=DEFAULT_DWELL_S, help="least time between rises"
    )
    p.add_argument("--start-s", type=float, help="trace second to start at (default: first row)")
    p.add_argument("--speed", type=float, default=1.0, help="trace seconds per wall second")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet.budgets.feed import check_speed, feed

    check_speed(args.speed)
    steps = schedule_from_trace(args.trace, args.dwell_s, "--trace", args.start_s)

    def stop(_signum: int, _frame: types.FrameType | None) -> None:
        raise SystemExit(0)  # the file keeps the last budget written: the loop keeps a value

    signal.signal(signal.SIGTERM, stop)

    def say(at: float, watts: float | None) -> None:
        print(f"{at:8.1f} s  budget {format_budget(watts)}", flush=True)

    try:
        feed(steps, args.file, args.speed, on_write=say)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    return 0
