"""One round, whatever runs it: segments, re-planning and statuses in one place.

Why one module: a fleet round is run by three drivers — the direct engine's loop in this
process (``fleet.planning.segmented_round``), Flower's message loop in simulation and the same
loop on real SuperNodes (``strategies/segmented.py``). They differ in how a segment reaches a
device (a function call, a Flower message) and in what can go wrong on the way (a node lost, a
reply refused: the Flower book's business, ``strategies/round_book.py``). They must not differ in
the round itself, or one fleet file gives two answers. So every decision a round makes lives
here, as plain functions over the book's device entries (``state["devices"]``, the dicts
``state.json`` persists) and its plan (``state["plan"]``):

- **which devices train next** (``due``): in lockstep of device time, every active device at
  the slowest one's clock, so progress arrives in the order it would in the world;
- **the deadline a device is sent** (``deadline_for``): the round's, scaled to its units when it
  prices its work with the shipped efficiency (``fleet.planning.replan.deadline_for``);
- **a segment's reply folded into the round** (``apply_segment``): cumulative progress, the
  round's stretches joined across segment boundaries, its first point, its highest peak;
- **the re-plan** (``replan``): after every step, each device's fastest finish from where it
  is, and the deadline moved later when the slowest fell behind (``fleet.planning.replan``);
- **the statuses** (``settle``): ``late`` and ``ok`` judged against the round's last deadline.

A round with ``segment_s`` 0 is the paper's one request per device: none of this runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from fleet.planning import replan as pricing
from fleet.rounds import statuses
from fleet.rounds.progress import Progress, entry_progress, remember

#: Device-clock seconds per segment unless a run says otherwise (run config ``segment-s``).
SEGMENT_S = 600.0

ACTIVE = statuses.RUNNING  # the round waits for these
FIRST_POINT = ("batch_size", "freq_mhz", "predicted_time_s")
PLANNED = "planned: the slowest device's fastest predicted finish"

Shipped = Callable[[str], dict[int, float]]  # device -> the samples-to-target it was shipped
Stamp = Callable[[], str] | None  # the wall-clock stamp of a revision (the persisted book's)


# ------------------------------------------------------------------------------ device entries


def device_entry(name: str) -> dict[str, Any]:
    """What the round keeps of one device (the persisted book adds its node and times): its
    status, progress, final row, and what is joined across segment replies."""
    return {
        "device": name,
        "status": "pending",
        "progress": Progress().to_dict(),
        "message": "",
        "row": None,
        "segments": [],
        "guard_events": [],
        "peak_power_w": None,
        "first_point": None,
    }


def progress(entry: dict) -> Progress:
    """The device's last progress, checked (the book may have been read from disk); parsed
    once per progress the book holds (``entry_progress``)."""
    name = str(entry.get("device"))
    return entry_progress(name, entry.get("progress") or {}, f"device {entry.get('device')}")


def active(devices: dict[str, dict]) -> list[str]:
    """The devices the round still waits for."""
    return [n for n, e in devices.items() if e["status"] in ACTIVE]


def due(devices: dict[str, dict]) -> list[str]:
    """The devices that train the next segment in lock-step of device time: every active
    device at the slowest one's clock (a device ahead waits for the next step)."""
    names = active(devices)
    times = {n: progress(devices[n]).time_s for n in names}
    frontier = min(times.values(), default=0.0)
    return [n for n in names if times[n] <= frontier + 1e-6]


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
        if (
            prev is not None
            and same
            and seg.get("reason") in ("", None)
            and _close(prev["end_s"], seg["start_s"])
        ):
            prev["end_s"] = seg.get("end_s")
            for k in ("samples", "energy_j"):
                prev[k] = float(prev.get(k) or 0.0) + float(seg.get(k) or 0.0)
            peaks = [p for p in (prev.get("peak_power_w"), seg.get("peak_power_w")) if p]
            prev["peak_power_w"] = max(peaks) if peaks else None
        else:
            out.append(seg)
    return out


def _close(a: object, b: object) -> bool:
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def apply_segment(e: dict, row: dict, prog: Progress) -> bool:
    """A (checked) segment reply folded into the device's entry; True when the device is done
    for this round. The final row gets the whole round's stretches and guard events, the
    round's first point and its highest peak power."""
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
    e["progress"] = raw = prog.to_dict()
    remember(str(e.get("device")), raw, prog)  # checked already: the reply's own record
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


# ------------------------------------------------------------------------------------ the plan


def new_plan(
    deadline_s: float | None, fastest: dict[str, float | None], stamp: Stamp = None
) -> dict[str, Any]:
    """The round's plan before anyone trains (the planning exchange's answer): the deadline,
    every device's fastest predicted finish, and the first revision saying so."""
    plan: dict[str, Any] = {"deadline_s": deadline_s, "revisions": [], "fastest_s": dict(fastest)}
    _revise(plan, 0.0, deadline_s, PLANNED, stamp)
    return plan


def _revise(
    plan: dict[str, Any], clock: float, deadline_s: float | None, why: str, stamp: Stamp
) -> None:
    rev: dict[str, Any] = {} if stamp is None else {"at_utc": stamp()}
    previous = None if why == PLANNED else plan.get("deadline_s")
    rev.update(round_time_s=clock, deadline_s=deadline_s, previous_s=previous, reason=why)
    plan.setdefault("revisions", []).append(rev)
    plan["deadline_s"] = deadline_s


def deadline_for(
    plan: dict[str, Any] | None, name: str, prog: Progress | None, shipped: Shipped
) -> float | None:
    """The deadline this device is sent with its next segment; None without a plan (the run's
    own deadline, if it sets one, travels in its settings as it is)."""
    if plan is None:
        return None
    return pricing.deadline_for(plan.get("deadline_s"), prog, shipped(name))


def replan(
    plan: dict[str, Any], devices: dict[str, dict], shipped: Shipped, stamp: Stamp = None
) -> str:
    """Re-price every active device's fastest finish from its progress and move the deadline
    when the slowest fell behind; the reason, or "" when the deadline stays."""
    fastest = plan.get("fastest_s") or {}
    standings = [
        pricing.standing(name, progress(e), fastest.get(name), shipped(name))
        for name, e in devices.items()
        if e["status"] in ACTIVE
    ]
    new, why = pricing.revise(plan.get("deadline_s"), standings)
    if why:
        clock = max((s.time_s for s in standings), default=0.0)
        _revise(plan, clock, new, why, stamp)
    return why


def settle(devices: Iterable[dict], plan: dict[str, Any] | None) -> None:
    """Late is what happened, judged against the round's last deadline
    (``fleet.planning.replan.settle``): every finished row, and its entry's status."""
    deadline = (plan or {}).get("deadline_s")
    for e in devices:
        row = e.get("row")
        got = pricing.settle(row, deadline) if row else None
        if got is None or row is None:
            continue
        status, note = got
        row["status"], e["status"] = status, status
        row["message"] = f"{note}; {row.get('message')}" if row.get("message") else note
