"""The coordinator's book of a segmented round: what each device has done, as plain dicts.

Why plain functions on the persisted state (``fleet.reports.roundstate``): every transition
(a segment reply, a device lost or back, a round closed) must be written to disk the moment it
happens, so a coordinator restart resumes from exactly what the book says; and each transition
is testable without Flower. The driver (``strategies/segmented.py``) only moves messages and
calls these. What the round decides (a reply folded in, the plan, the statuses) is the round's
logic that every engine shares (``fleet.planning.round_logic``); the book adds what only a
coordinator over a network meets: nodes, a device lost or overdue, a reply refused, a restart.

A device's entry (``state["devices"][name]``) goes pending -> running (-> overdue) -> a final
status (ok, late, infeasible, not reached, error, over-budget, selected); a device whose node
went offline is ``lost`` with the moment and its last progress, and becomes ``running`` again
if it comes back within the round. Progress counters are cumulative (fleet/rounds/progress.py):
a reply replaces the last one, so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from clients import records
from fleet.planning import round_logic as logic
from fleet.planning.round_logic import ACTIVE
from fleet.reports import roundstate
from fleet.rounds.progress import Progress, read_progress

utc_now = roundstate.now_utc


def device_entry(name: str, device_type: str = "", budget_w: float | None = None) -> dict:
    """The round's device entry (``round_logic.device_entry``: what the round joins across
    segment replies) as the state persists it (``roundstate.device_entry``: node, times)."""
    return {**logic.device_entry(name), **roundstate.device_entry(name, device_type, budget_w)}


def entry(state: dict, name: str) -> dict:
    """The device's entry, created (pending) the first time the device is met."""
    devices = state.setdefault("devices", {})
    if name not in devices:
        devices[name] = device_entry(name)
    return devices[name]


def progress(entry_: dict) -> Progress:
    return read_progress(entry_.get("progress") or {}, f"device {entry_.get('device')}")


def assign(state: dict, name: str, node_id: int) -> None:
    """A node says it runs this device (first contact, or a restarted SuperNode)."""
    e = entry(state, name)
    e["node_id"] = int(node_id)
    e["last_seen_utc"] = utc_now()
    if e["status"] == "lost":  # back within the round: resumes from its checkpoint
        e["status"] = "running"
        e["message"] = f"back on node {node_id} after being lost at {e['lost_at_utc']}"


def apply_segment(state: dict, name: str, row: dict, prog: Progress) -> bool:
    """A checked segment reply into the book (``round_logic.apply_segment``: the round's
    stretches, first point and peak), stamped with when it was heard; True when the device is
    done for this round."""
    e = entry(state, name)
    e["last_seen_utc"] = utc_now()
    return logic.apply_segment(e, row, prog)


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
    p = read_progress(e.get("progress") or {}, f"device {e['device']}")
    row = records.error_row(e["device"], "", str(e.get("device_type") or ""), status="lost")
    row.update(
        budget_w=e.get("budget_w"),
        end_batch_size=p.end_batch_size,
        end_freq_mhz=p.end_freq_mhz,
        time_s=p.time_s,
        energy_j=p.energy_j,
        samples=p.samples,
        accuracy=p.accuracy,
    )
    row.update(e.get("first_point") or {})  # the point it chose at the round's start
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


def start_round(state: dict, server_round: int) -> None:
    """A new round: every device starts again from nothing (its node id is kept). A device no
    node ran last round leaves the book until one does: it is not waited for as a device that
    had a node would be (a partial federation's others are lost again at the round's end)."""
    state["round"] = int(server_round)
    for name, e in list(state.get("devices", {}).items()):
        if e.get("node_id") is None:
            del state["devices"][name]
            continue
        fresh = device_entry(name, str(e.get("device_type") or ""), e.get("budget_w"))
        fresh["node_id"] = e.get("node_id")
        state["devices"][name] = fresh


def resume_after_restart(state: dict) -> list[str]:
    """A coordinator that restarts (after a crash, or on an ``interrupted`` run): devices
    still at work (or interrupted) wait for their node to identify again (their progress is
    kept; they resume from their checkpoint); finished ones stay finished and are not trained
    again. Returns the devices to resume."""
    names = []
    state["interrupted"] = None  # a run stopped before its end goes on
    for name, e in state.get("devices", {}).items():
        if e["status"] in ACTIVE + ("lost", "interrupted"):
            e["status"] = "pending"
            e["node_id"] = None
            e["message"] = "coordinator restarted: waiting for the device to identify"
            names.append(name)
    return names


def lose_unplaced(
    state: dict, fleet_order: Iterable[str], describe: dict, why: str, rank: Callable[[str], Any]
) -> int:
    """Every device of the fleet that no node took and is still pending, lost now with ``why``
    (a simulation that has fewer SuperNodes than devices); the book kept in fleet order
    (``rank``). Returns how many."""
    known = state["devices"]  # a device no node ran is not in the book yet
    missing = [n for n in fleet_order if known.get(n, {}).get("node_id") is None]
    missing = [n for n in missing if known.get(n, {}).get("status", "pending") == "pending"]
    if not missing:
        return 0
    for name in missing:
        if name not in known and name in describe:
            known[name] = device_entry(name, *describe[name])
        mark_lost(state, name, why)
    state["devices"] = {k: known[k] for k in sorted(known, key=rank)}
    return len(missing)
