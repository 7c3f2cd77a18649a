"""`powerfleet status RUN_DIR`: where every device of a running (or finished) round is now.

Why a command: a segmented round lasts hours and its coordinator runs elsewhere; the round
state it rewrites after every change (``RUN_DIR/state.json``, ``fleet.reports.roundstate``)
is the one place that says which devices train, at what (b, f), drawing what against their
budget, how far they are, when they will be done, and which were lost. ``status`` reads it,
never the coordinator's memory, so it works on a copied run directory and after a crash.

Views: a table for people (one line per device, a header with the round, its deadline and
plan revisions), ``--json`` (the state plus a computed ``summary``), ``--prometheus`` (the
text ``metrics.prom`` holds). ``--follow`` re-reads every ``--interval`` seconds until the
state says finished: on a terminal the table is redrawn in place; piped, each change is a new
block (a new line with ``--json``), so a log or a test sees every state it went through.
Ctrl-C ends a follow with exit 0. A run directory from before round state (a ``report.json``
and no ``state.json``) is named as such in one line, exit 2: its report has the final rows
(``powerfleet report``).

A run is shown as it truly is (``roundstate.read_run``): one whose writer was killed before it
could say so is ``interrupted`` as of its last write, never ``running`` forever, and when this
user may write the run directory that verdict is written down (``roundstate.seal``) so
``metrics.prom`` says it too. A follow ends when the run has finished or was interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.cli import checks
from fleet.cli.common import emit_json
from fleet.common.errors import InputError
from fleet.reports.prometheus import prometheus_text, start_point
from fleet.reports.roundstate import STATE_FILE, read_run, seal, summary
from fleet.reports.runlife import interruption_line
from fleet.rounds import statuses

MAX_ROWS = 40  # a bigger fleet shows its most telling devices first and counts the rest
# Which devices a big fleet shows first: what needs attention, then what still runs.
PRIORITY = ("lost", "overdue", "error", "over-budget", "interrupted", "running", "pending", "late")
COLUMNS = [
    "device",
    "type",
    "status",
    "samples",
    "done %",
    "power/budget",
    "b @ f (MHz) start > end",
    "accuracy",
    "device time",
    "ETA",
    "last seen",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="every device's progress, power vs budget, ETA and status")
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=checks.run_dir_to_watch,
        help="the run directory (holds state.json)",
    )
    p.add_argument("--json", action="store_true", help="the state plus a summary, one JSON line")
    p.add_argument("--prometheus", action="store_true", help="Prometheus text (as metrics.prom)")
    p.add_argument("--follow", action="store_true", help="re-read until the run has finished")
    p.add_argument("--interval", default="2", help="seconds between reads with --follow")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.json and args.prometheus:
        raise InputError("--json and --prometheus: choose one view")
    interval = _interval(args.interval)
    view = "json" if args.json else "prometheus" if args.prometheus else "table"
    state = load(args.run_dir)
    if not args.follow:
        emit(state, view)
        return 0
    try:
        if view == "table" and sys.stdout.isatty():
            redraw(args.run_dir, state, interval)
        else:
            blocks(args.run_dir, state, view, interval)
    except KeyboardInterrupt:  # the way a person stops watching: not an error
        return 0
    return 0


def _interval(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"--interval: {raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--interval: {raw!r} must be a number of seconds > 0")
    return value


def load(run_dir: str) -> dict[str, Any]:
    """The run's state; a run from before round state is said as such (not 'not found')."""
    d = Path(run_dir)
    if d.is_dir() and not (d / STATE_FILE).exists() and (d / "report.json").is_file():
        raise InputError(
            f"{d / STATE_FILE} not found: {d} is a finished run from before round state "
            f"(its rows are in report.json: powerfleet report {d})"
        )
    return current(run_dir)


def current(run_dir: str) -> dict[str, Any]:
    """The state as it is: a dead writer's unfinished run is interrupted (and sealed so)."""
    state, changed = read_run(run_dir)
    if changed:
        seal(run_dir, state)
    return state


def done(state: dict[str, Any]) -> bool:
    """Nothing more will change unless someone resumes it: finished or interrupted."""
    return statuses.run_status(state) != "running"


def emit(state: dict[str, Any], view: str) -> None:
    if view == "json":
        emit_json({**state, "summary": summary(state)})
    elif view == "prometheus":
        sys.stdout.write(prometheus_text(state))
    else:
        from fleet.cli.common import console

        console.print(render(state))
    sys.stdout.flush()


def blocks(run_dir: str, state: dict[str, Any], view: str, interval: float) -> None:
    """Piped: print the state, then a new block each time it changes, until finished."""
    emit(state, view)
    while not done(state):
        time.sleep(interval)
        new = current(run_dir)
        if new != state:
            if view != "json":
                print(flush=True)
            emit(new, view)
            state = new


def redraw(run_dir: str, state: dict[str, Any], interval: float) -> None:
    """On a terminal: one view, redrawn in place; the last one stays on screen."""
    from rich.console import Console
    from rich.live import Live

    with Live(render(state), console=Console(), auto_refresh=False) as live:
        while not done(state):
            time.sleep(interval)
            new = current(run_dir)
            if new != state:
                live.update(render(new), refresh=True)
                state = new


# ------------------------------------------------------------------------------- the table


def render(state: dict[str, Any]) -> Any:
    """The people's view: header lines, the device table, the lines that explain failures."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = summary(state)
    plan = state["plan"]
    day = state["updated_utc"][:10]
    head = [
        f"run {state['run']}  round {state['round']}/{state['rounds']}  engine "
        f"{state['engine']}  {s['run_status']}  updated {clock(state['updated_utc'], '')}",
        f"deadline {duration(plan['deadline_s']) if plan['deadline_s'] is not None else 'none'}"
        f"  plan revisions {s['plan_revisions']}  segment "
        f"{duration(state['segment_s']) if state['segment_s'] else 'whole round'}",
        f"{s['devices']} devices: "
        + ", ".join(f"{k} {v}" for k, v in s["status_counts"].items())
        + f"; samples {s['samples']:,.0f}; energy {s['energy_j'] / 1000:,.2f} kJ",
    ]
    if s["run_status"] == "interrupted":
        head.insert(1, interruption_line(state))
    elif elsewhere(state):
        w = state["writer"]
        head[0] += f" (written by pid {w.get('pid')} on {w.get('host')}: not checkable here)"
    if s["running"]:  # what the devices still at work draw against their budgets
        head[-1] += (
            f"; {s['running']} at work draw {s['running_power_w']:.1f}/"
            f"{s['running_budget_w']:.1f} W; longest ETA {duration(s['eta_max_s'])}"
        )
    t = Table(title_justify="left")
    for c in COLUMNS:
        t.add_column(c, justify="left" if c in ("device", "type", "status") else "right")
    entries = shown(list(state["devices"].values()))
    for e in entries:
        t.add_row(*(Text(cell) for cell in row(e, day)))
    hidden = len(state["devices"]) - len(entries)
    if hidden:
        t.add_row(Text(f"... {hidden} more"), *(Text("") for _ in COLUMNS[1:]))
    notes = [
        Text(f"  {e['device']}: {e['status']}: {e['message']}")
        for e in entries
        if e["message"] and e["status"] != "ok"
    ][:MAX_ROWS]
    return Group(*(Text(h) for h in head), t, *notes)


def elsewhere(state: dict[str, Any]) -> bool:
    """A running run whose writer is on another host: its liveness cannot be checked here."""
    from fleet.reports.runlife import writer_verdict

    return not state["finished"] and writer_verdict(state) == "elsewhere"


def shown(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All devices in fleet order, or for a big fleet the most telling ``MAX_ROWS`` of them."""
    if len(entries) <= MAX_ROWS:
        return entries
    rank = {s: k for k, s in enumerate(PRIORITY)}
    order = sorted(range(len(entries)), key=lambda k: (rank.get(entries[k]["status"], 99), k))
    return [entries[k] for k in order[:MAX_ROWS]]


def row(e: dict[str, Any], day: str) -> list[str]:
    p = e["progress"]
    budget = p.get("budget_w") if p.get("budget_w") is not None else e.get("budget_w")
    start = start_point(e)
    b, f = p.get("end_batch_size"), p.get("end_freq_mhz")
    if e["lost_at_utc"]:
        seen = "lost " + clock(e["lost_at_utc"], day)
    else:
        seen = clock(e["last_seen_utc"], day)
    return [
        e["device"],
        e["device_type"],
        e["status"],
        f"{p['samples']:,.0f}",
        f"{100 * p['done']:.1f}",
        f"{watts(p.get('power_w'))}/{'none' if budget is None else watts(budget)} W",
        f"{point(start.get('batch_size'), start.get('freq_mhz'))} > {point(b, f)}",
        "-" if p.get("accuracy") is None else f"{p['accuracy']:.3f}",
        duration(p["time_s"]),
        duration(p.get("eta_s")) if e["status"] in statuses.RUNNING else "-",
        seen,
    ]


def point(b: Any, f: Any) -> str:
    """``b @ f``, a dash for what is not known yet."""
    return f"{b if b is not None else '-'} @ {f'{f:g}' if isinstance(f, (int, float)) else '-'}"


def watts(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def duration(seconds: float | None) -> str:
    """Device seconds for people: 42.5 s, 12m05s, 3h04m."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def clock(stamp: str | None, day: str) -> str:
    """A state time as UTC time of day; its date too when it is not ``day`` (the update's)."""
    if stamp is None:
        return "-"
    t = datetime.fromisoformat(stamp)
    t = (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
    text = t.strftime("%H:%M:%SZ")
    return text if t.strftime("%Y-%m-%d") == day else t.strftime("%Y-%m-%d ") + text
