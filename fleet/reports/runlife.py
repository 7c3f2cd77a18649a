"""A run's life as its round state records it: who writes it, and a run stopped before its end.

Why apart from ``roundstate`` (the document's reader and writer): these are the rules about
the *process* behind the document. Every write stamps ``writer`` (``me``: pid, boot id, start
time, host; ``fleet.method.liveness``, the rule the clock state file uses too), so a reader can
tell a live writer from a killed one. A writer checks before each write that no other live
process has written the file since it did (``still_writer``): a coordinator restarted on its
run directory while the old ServerApp still ran (an orphan whose dead parent nobody reaped)
takes the run over, and the old one stops instead of overwriting it, report included.
``interrupt`` records a run stopped before its end: when, why, how far it got.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.common.errors import InputError
from fleet.method import liveness
from fleet.rounds import statuses


def now_utc() -> str:
    """The state's timestamps: ISO 8601 in UTC, milliseconds (order survives fast writes)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Superseded(InputError):
    """Another live process has written this run's state since this one last did: a
    coordinator restarted on the run directory took it over. This writer must stop."""


# state file -> (inode, mtime) of the last state.json this process wrote there
_WRITTEN: dict[str, tuple[int, int]] = {}
_ME: dict[str, Any] = {}  # this process's identity (computed once: it does not change)


def me() -> dict[str, Any]:
    """This process as a state's ``writer`` (``liveness.process_identity`` with the host)."""
    if _ME.get("pid") != os.getpid():  # a forked child is another writer
        _ME.clear()
        _ME.update(liveness.process_identity(with_host=True))
    return dict(_ME)


def still_writer(state_file: str | Path) -> None:
    """Raise ``Superseded`` when another live process has replaced the state file this one
    last wrote (one ``stat`` when nobody has). Called before every write, and by a
    ServerApp before it writes the run's report."""
    path = os.path.abspath(state_file)
    mine = _WRITTEN.get(path)
    if mine is None:
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if (st.st_ino, st.st_mtime_ns) == mine:
        return
    try:
        writer = json.loads(Path(path).read_bytes()).get("writer")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(writer, dict) and liveness.holder(writer) == liveness.ALIVE:
        raise Superseded(
            f"{path}: this run is now written by process {writer.get('pid')} (a coordinator "
            "restarted on its run directory); this one stops"
        )


def wrote(state_file: str | Path) -> None:
    """Remember the state file this process has just written (``still_writer`` compares)."""
    path = os.path.abspath(state_file)
    st = os.stat(path)
    _WRITTEN[path] = (st.st_ino, st.st_mtime_ns)


def interrupt(state: dict[str, Any], reason: str, at_utc: str | None = None) -> str:
    """Record in ``state`` that the run stopped before its end: when, why, and how far it got
    (devices done, samples); every device still pending, running or overdue becomes
    ``interrupted`` with its last progress in its message (its ``progress`` stays as it was).
    Returns the one line that says it (``interruption_line``). Not ``finished``: a resumed
    run takes the interrupted devices up again."""
    when = at_utc or now_utc()
    for e in state["devices"].values():
        if e["status"] in statuses.RUNNING:
            p = e.get("progress") or {}
            e["status"] = "interrupted"
            e["message"] = (
                f"interrupted at {when} ({reason}) before it finished; last progress: "
                f"{p.get('samples') or 0:.0f} samples, {p.get('time_s') or 0:.0f} s of "
                f"training, {100 * (p.get('done') or 0):.1f}% of the target"
            )
    entries = list(state["devices"].values())
    state["interrupted"] = {
        "at_utc": when,
        "reason": reason,
        "round": state.get("round"),
        "devices_done": sum(e["status"] not in ("interrupted", "lost") for e in entries),
        "devices": len(entries),
        "samples": float(sum((e.get("progress") or {}).get("samples") or 0.0 for e in entries)),
    }
    return interruption_line(state)


def interruption_line(state: dict[str, Any]) -> str:
    """``interrupted at T (why) in round r/R: k of n devices done, s samples``."""
    stop = state.get("interrupted") or {}
    return (
        f"interrupted at {stop.get('at_utc')} ({stop.get('reason')}) in round "
        f"{state.get('round')}/{state.get('rounds')}: {stop.get('devices_done')} of "
        f"{stop.get('devices')} devices done, {stop.get('samples') or 0:,.0f} samples"
    )


def writer_verdict(state: dict[str, Any]) -> str | None:
    """Whether the process that last wrote ``state`` still runs (``fleet.method.liveness``:
    self, alive, gone, elsewhere), or None for a state that does not name its writer."""
    writer = state.get("writer")
    return liveness.holder(writer) if isinstance(writer, dict) else None


# ---------------------------------------------------------------------- what is known


def unfinished_row(e: dict[str, Any]) -> dict[str, Any]:
    """The report row of a device that has no final row (the run stopped first): its status
    (``interrupted``, or still ``running`` under a live writer) and its last progress."""
    from fleet.rounds.device_round import DeviceResult

    p = e.get("progress") or {}
    row = DeviceResult(
        str(e["device"]), str(e.get("device_type") or ""), status=e["status"]
    ).to_dict()
    row.update(
        budget_w=e.get("budget_w"),
        samples=p.get("samples"),
        time_s=p.get("time_s"),
        energy_j=p.get("energy_j"),
        accuracy=p.get("accuracy"),
        end_batch_size=p.get("end_batch_size"),
        end_freq_mhz=p.get("end_freq_mhz"),
        message=e.get("message") or "no final row yet",
    )
    first = e.get("first_point")
    if isinstance(first, dict):  # the point it chose at the round's start
        row.update({k: v for k, v in first.items() if k in ("batch_size", "freq_mhz")})
    return row


def partial_report(state: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the report of what is known, what is missing in one phrase) for a run that has not
    finished: every device that finished this round with its final row, every other one with
    its last progress; the fleet totals count the finished rows only (``fleet_totals``)."""
    from fleet.reports.report import fleet_totals

    rows, missing = [], []
    for e in state["devices"].values():
        row = e.get("row")
        if isinstance(row, dict) and e["status"] not in statuses.RUNNING + ("interrupted",):
            rows.append(row)
        else:
            rows.append(unfinished_row(e))
            missing.append(str(e["device"]))
    status = statuses.run_status(state)
    report = {
        "run": state["run"],
        "fleet_file": state["fleet_file"],
        "engine": state["engine"],
        "round": state["round"],
        "rounds": state["rounds"],
        "run_status": status,
        "devices": rows,
        "fleet": fleet_totals(rows),
    }
    names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    what = [
        f"the final rows of {len(missing)} of {len(rows)} devices ({names}: shown {status} "
        "with their last progress)"
        if missing
        else "no device row"
    ]
    first = state["round"] + (0 if missing else 1)
    if state["rounds"] > 1 and first <= state["rounds"]:
        what.append(f"rounds {first} to {state['rounds']} of {state['rounds']} not complete")
    report["missing"] = "; ".join(what)
    return report, report["missing"]
