"""The coordinator's book of a segmented round: what each device has done, as plain dicts.

Why plain functions on the persisted state (``fleet.reports.roundstate``): every transition
(a segment reply, a device lost or back, a round closed) must be written to disk the moment it
happens, so a coordinator restart resumes from exactly what the book says; and each transition
is testable without Flower. The driver (``strategies/segmented.py``) only moves messages and
calls these.

A device's entry (``state["devices"][name]``) goes pending -> running (-> overdue) -> a final
status (ok, late, infeasible, not reached, error, over-budget, selected); a device whose node
went offline is ``lost`` with the moment and its last progress, and becomes ``running`` again
if it comes back within the round. Progress counters are cumulative (fleet/rounds/progress.py):
a reply replaces the last one, so nothing is counted twice.
"""

from __future__ import annotations

import json

from clients import records
from fleet.planning import replan
from fleet.reports import roundstate
from fleet.rounds import statuses
from fleet.rounds.progress import Progress

ACTIVE = statuses.RUNNING  # the round waits for these
FIRST_POINT = ("batch_size", "freq_mhz", "predicted_time_s")


utc_now = roundstate.now_utc


def device_entry(name: str, device_type: str = "", budget_w: float | None = None) -> dict:
    """The state's device entry (``roundstate.device_entry``) plus what the book joins across
    segment replies: the round's stretches, guard events and highest peak power."""
    e = roundstate.device_entry(name, device_type, budget_w)
    e.update(segments=[], guard_events=[], peak_power_w=None, first_point=None)
    return e


def entry(state: dict, name: str) -> dict:
    """The device's entry, created (pending) the first time the device is met."""
    devices = state.setdefault("devices", {})
    if name not in devices:
        devices[name] = device_entry(name)
    return devices[name]


def progress(entry_: dict) -> Progress:
    return Progress.from_dict(entry_.get("progress") or {}, f"device {entry_.get('device')}")


def assign(state: dict, name: str, node_id: int) -> None:
    """A node says it runs this device (first contact, or a restarted SuperNode)."""
    e = entry(state, name)
    e["node_id"] = int(node_id)
    e["last_seen_utc"] = utc_now()
    if e["status"] == "lost":  # back within the round: resumes from its checkpoint
        e["status"] = "running"
        e["message"] = f"back on node {node_id} after being lost at {e['lost_at_utc']}"


def join_segments(kept: list[dict], new: list[dict]) -> list[dict]:
    """The round's stretches so far: ``kept`` (earlier replies) with ``new`` (this reply's).

    A reply may repeat stretches (a segment replayed after a lost reply, or a device that sends
    its whole record): whatever ``kept`` holds from ``new``'s first start on is replaced. A
    stretch that continues the previous one at the same point under the same budget (a segment
    boundary is not a change of point) is merged into it, so a segmented round's record reads
    as the one-request round's.
    """
    if not new:
        return list(kept)
    first = min(float(s.get("start_s") or 0.0) for s in new)
    out = [dict(s) for s in kept if float(s.get("start_s") or 0.0) < first]
    for seg in sorted((dict(s) for s in new), key=lambda s: float(s.get("start_s") or 0.0)):
        prev = out[-1] if out else None
        same = prev is not None and all(
            prev.get(k) == seg.get(k) for k in ("batch_size", "freq_mhz", "budget_w")
        )
        joins = same and seg.get("reason") in ("", None)
        if prev is not None and joins and _close(prev["end_s"], seg["start_s"]):
            prev["end_s"] = seg.get("end_s")
            for k in ("samples", "energy_j"):
                prev[k] = float(prev.get(k) or 0.0) + float(seg.get(k) or 0.0)
            peaks = [p for p in (prev.get("peak_power_w"), seg.get("peak_power_w")) if p]
            prev["peak_power_w"] = max(peaks) if peaks else None
        else:
            out.append(seg)
    return out


def _close(a: object, b: object) -> bool:
    if not isinstance(a, (int, float, str)) or not isinstance(b, (int, float, str)):
        return False  # None or another JSON value: no time to compare
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    except (TypeError, ValueError):
        return False


def apply_segment(state: dict, name: str, row: dict, prog: Progress) -> bool:
    """A checked segment reply; True when the device is done for this round. The final row
    gets the whole round's stretches and guard events, and its highest peak power."""
    e = entry(state, name)
    e["segments"] = join_segments(e.get("segments") or [], list(row.get("segments") or []))
    events = [dict(g) for g in row.get("guard_events") or []]
    seen = {json.dumps(g, sort_keys=True) for g in e.get("guard_events") or []}
    e["guard_events"] = list(e.get("guard_events") or []) + [
        g for g in events if json.dumps(g, sort_keys=True) not in seen
    ]
    peaks = [p for p in (e.get("peak_power_w"), row.get("peak_power_w")) if p is not None]
    e["peak_power_w"] = max(peaks) if peaks else None
    if e.get("first_point") is None and row.get("batch_size") is not None:
        # the round's first choice: each segment's row names the choice its own start would
        # make, which after a re-planned deadline is not what the round began with
        e["first_point"] = {k: row.get(k) for k in FIRST_POINT}
    e["progress"] = prog.to_dict()
    e["last_seen_utc"] = utc_now()
    e["device_type"] = str(row.get("device_type") or e.get("device_type") or "")
    if row.get("budget_w") is not None:
        e["budget_w"] = row.get("budget_w")
    status = str(row.get("status"))
    if status == "running":
        e["status"] = "running"
        e["message"] = ""
        return False
    e["status"] = status
    row = dict(row, segments=e["segments"], guard_events=e["guard_events"])
    if e.get("first_point") and status not in ("error", "infeasible"):
        row.update(e["first_point"])
    if e["peak_power_w"] is not None and status not in ("error", "infeasible"):
        row["peak_power_w"] = e["peak_power_w"]
    e["row"] = row
    e["message"] = str(row.get("message") or "")
    return True


def refuse(state: dict, name: str, why: str) -> None:
    """A reply that could not be trusted: the device ends as ``error`` with the reason; its
    numbers never reach the aggregate."""
    e = entry(state, name)
    e["status"] = "error"
    e["message"] = why
    e["row"] = records.error_row(name, f"reply refused: {why}", str(e.get("device_type") or ""))


def mark_overdue(state: dict, name: str, waited_s: float) -> None:
    e = entry(state, name)
    if e["status"] in ("pending", "running"):
        e["status"] = "overdue"
        e["message"] = f"no segment reply for {waited_s:.0f} s; its node is still online"


def mark_lost(state: dict, name: str, why: str) -> None:
    e = entry(state, name)
    if e["status"] in ACTIVE:
        e["status"] = "lost"
        e["lost_at_utc"] = utc_now()
        e["message"] = why


def lost_row(e: dict) -> dict:
    """The report row of a device that did not come back: its last progress and when."""
    p = Progress.from_dict(e.get("progress") or {}, f"device {e['device']}")
    row = records.error_row(e["device"], "", str(e.get("device_type") or ""), status="lost")
    row.update(
        budget_w=e.get("budget_w"),
        batch_size=p.batch_size,
        freq_mhz=p.freq_mhz,
        time_s=p.time_s,
        energy_j=p.energy_j,
        samples=p.samples,
        accuracy=p.accuracy,
    )
    row["message"] = (
        f"lost at {e.get('lost_at_utc') or 'round end'} ({e.get('message') or 'no reply'}); "
        f"last progress: {p.samples:.0f} samples, {p.time_s:.0f} s of training, "
        f"{p.energy_j:.0f} J, {100 * p.done:.1f}% of the target; last seen "
        f"{e.get('last_seen_utc') or 'never'}"
    )
    return row


def round_rows(state: dict) -> list[dict]:
    """Every device's row for the closing round: its final row, or ``lost`` with its progress."""
    rows = []
    for e in state.get("devices", {}).values():
        if e.get("row") is not None and e["status"] not in ACTIVE + ("lost",):
            rows.append(e["row"])
        else:
            if e["status"] in ACTIVE:
                mark_lost(state, e["device"], "the round ended without its reply")
            rows.append(lost_row(e))
    return rows


def settle_deadline(state: dict) -> None:
    """Late is what happened, judged against the round's last deadline
    (``fleet.planning.replan.settle``)."""
    deadline = (state.get("plan") or {}).get("deadline_s")
    for e in state.get("devices", {}).values():
        row = e.get("row")
        got = replan.settle(row, deadline) if row else None
        if got is None:
            continue
        status, note = got
        row["status"], e["status"] = status, status
        row["message"] = f"{note}; {row.get('message')}" if row.get("message") else note


def active(state: dict) -> list[str]:
    return [n for n, e in state.get("devices", {}).items() if e["status"] in ACTIVE]


def start_round(state: dict, server_round: int) -> None:
    """A new round: every device starts again from nothing (its node id is kept)."""
    state["round"] = int(server_round)
    for name, e in list(state.get("devices", {}).items()):
        fresh = device_entry(name, str(e.get("device_type") or ""), e.get("budget_w"))
        fresh["node_id"] = e.get("node_id")
        state["devices"][name] = fresh


def resume_after_restart(state: dict) -> list[str]:
    """A coordinator that restarts: devices still at work wait for their node to identify
    again (their progress is kept; they resume from their checkpoint); finished ones stay
    finished and are not trained again. Returns the devices to resume."""
    names = []
    for name, e in state.get("devices", {}).items():
        if e["status"] in ACTIVE + ("lost",):
            e["status"] = "pending"
            e["node_id"] = None
            e["message"] = "coordinator restarted: waiting for the device to identify"
            names.append(name)
    return names
