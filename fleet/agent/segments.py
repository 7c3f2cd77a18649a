"""The closed loop's record of a run: its segments, their measured energy, and the summary.

Why separate: what the loop *did* (every stretch at one batch size, clock and budget, with the
reason it began and the energy the rail measured over it; the guard events; the deadline's plan)
is reported as it is by the agent's ``train`` reply, ``powerfleet train --json`` and the round
report, so the record and its summary are kept apart from the decisions that produce it
(``closedloop.py``, ``budgetwatch.py``, ``deadline_reselect.py``).

The functions take the ``ClosedLoop`` and run with its lock held (``loop_summary`` takes it).
Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, Optional

# Why a segment began (its ``reason``).
REASON_START = "start"
REASON_BUDGET = "budget-change"
REASON_SWITCH = "batch-switch"
REASON_GUARD = "guard"
REASON_REPROBE = "drift-reprobe"
REASON_REFRESH = "drift-refresh"
REASON_DEADLINE = "deadline"  # the running point stopped meeting the deadline: re-selected

#: The summary's objective keys, reported as they are by the agent's ``train`` reply and by
#: ``powerfleet train --json`` (one list, so the two surfaces cannot drift apart).
OBJECTIVE_KEYS = (
    "objective",
    "deadline_s",
    "predicted_finish_s",
    "predicted_energy_j",
    "late",
    "behind_at_s",
    "done_fraction",
)


def _finite(v: Optional[float]) -> Optional[float]:
    return v if v is not None and math.isfinite(v) else None


def open_segment(loop: Any, t: float, reason: str) -> None:
    """Close the running segment at ``t`` and open one for the loop's point and budget now
    (unless nothing changed); a segment boundary is where a due drift refresh begins."""
    if loop.segments:
        last = loop.segments[-1]
        last["end_s"] = t
        if (
            last["batch_size"] == loop._batch
            and last["freq_mhz"] == loop._freq
            and last["budget_w"] == loop._budget
        ):
            return  # nothing changed: keep one segment
    if loop.drift is not None and loop.drift.due():
        loop.drift.begin(loop._budget, loop.infeasible, loop.max_batch)  # a boundary
    seg = {
        "start_s": t,
        "end_s": t,
        "batch_size": loop._batch,
        "freq_mhz": loop._freq,
        "budget_w": loop._budget,
        "reason": reason,
        "energy_j": 0.0,
    }  # type: Dict[str, Any]
    if loop.deadline_s is not None:
        seg["done"] = loop.done  # the fraction of the target reached when it began
    loop.segments.append(seg)


def account(loop: Any, t: float, watts: float) -> None:
    """Count one power sample: over-budget samples, the peak, and the energy (trapezoids)
    of the run and of the running segment."""
    loop.power_samples += 1
    if loop._budget is not None and watts > loop._budget:
        loop.over_samples += 1
    loop._power_seen = True
    loop._peak_w = watts if loop._peak_w is None else max(loop._peak_w, watts)
    seg = loop.segments[-1] if loop.segments else None
    if seg is not None:
        seg["end_s"] = max(seg["end_s"], t)
    if loop._last is not None and seg is not None:
        t0, w0 = loop._last
        e = max(0.0, t - t0) * (w0 + watts) / 2.0
        loop._energy_j += e
        seg["energy_j"] = (seg.get("energy_j") or 0.0) + e
    loop._last = (t, watts)


def loop_summary(loop: Any) -> Dict[str, Any]:
    """Segments, guard events and the measured totals of the run (call after ``stop``)."""
    drift = loop.drift
    with loop._mu:
        end = loop._end if loop._end is not None else loop.now()
        segs = [dict(s) for s in loop.segments]
        if segs:
            segs[-1]["end_s"] = end
        for s in segs:
            if not loop._power_seen:
                s["energy_j"] = None
        return {
            "status": loop.status,
            "stop_reason": loop.stop_reason,
            "time_s": end,
            "energy_j": loop._energy_j if loop._power_seen else None,
            "peak_power_w": loop._peak_w,
            "power_samples": loop.power_samples,
            # False: no reading at all (a board without a sensor): the budget was kept only
            # by the recorded profile, no guard watched and the energy is unknown
            "power_measured": loop._power_seen,
            "over_budget_samples": loop.over_samples,
            "segments": segs,
            "guard_events": [dict(e) for e in loop.guard_events],
            "infeasible": sorted([b, f] for b, f in loop.infeasible),
            "notes": list(loop.notes),
            "budget_source": loop.source.describe(),
            "objective": loop.objective,
            "deadline_s": loop.deadline_s,
            "done_fraction": loop.done if loop.deadline_s is not None else None,
            "predicted_finish_s": _finite(loop.predicted_finish_s),  # inf: never finishes
            "predicted_energy_j": _finite(loop.predicted_energy_j),
            "last_predicted_finish_s": _finite(loop.last_finish_s),
            "late": loop.late if loop.deadline_s is not None else None,
            "behind_at_s": loop.behind_at_s,
            "rail_excess_w": loop.rail_excess_w if loop.deadline_s is not None else None,
            "drift_events": [dict(e) for e in drift.events] if drift else [],
            "refreshes": [dict(r) for r in drift.refreshes] if drift else [],
            "refreshed_profile": drift.out_path if drift and drift.refreshes else None,
            "refreshed_profile_csv": drift.refreshed_csv if drift else None,
        }
