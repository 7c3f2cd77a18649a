"""The closed loop's record of a run: its segments, their measured energy, and the summary.

Why separate: what the loop *did* (every stretch at one batch size, clock and budget, with the
reason it began and the energy the rail measured over it; the guard events; the deadline's plan)
is reported as it is by the agent's ``train`` reply, ``powerfleet train --json`` and the round
report, so the record and its summary are kept apart from the decisions that produce it
(``closedloop.py``, ``budgetwatch.py``, ``deadline_reselect.py``).

A run may span several calls (a resumed checkpoint, a segmented round's ``segment_s``): the
record of the calls before travels in the trainer's checkpoint (``loop_history``, restored into
``loop.prior``), and the summary is the whole run's, the earlier calls' segments and events
first, on one timeline (each later call's times shifted by the loop time before it), so a
reply's counters are cumulative and never count one stretch twice.

The functions take the ``ClosedLoop`` and run with its lock held (``loop_summary`` and
``loop_history`` take it). Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, List, Optional

from fleet.agent.loop.loop_learning import progress_fields

# Why a segment began (its ``reason``).
REASON_START = "start"
REASON_BUDGET = "budget-change"
REASON_SWITCH = "batch-switch"
REASON_GUARD = "guard"
REASON_REPROBE = "drift-reprobe"
REASON_REFRESH = "drift-refresh"
REASON_DEADLINE = "deadline"  # the running point stopped meeting the deadline: re-selected
REASON_RESUME = "resume"  # the first segment of a call that resumed a run (its "start")

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


def _this_call(loop: Any) -> Dict[str, Any]:
    """This call's record so far (hold ``loop._mu``): its segments (the last one ending now),
    guard and drift events, loop time and measured energy."""
    end = loop._end if loop._end is not None else loop.now()
    segs = [dict(s) for s in loop.segments]
    if segs:
        segs[-1]["end_s"] = end
    for s in segs:
        if not loop._power_seen:
            s["energy_j"] = None
    drift = loop.drift
    return {
        "time_s": end,
        "energy_j": loop._energy_j if loop._power_seen else None,
        "peak_power_w": loop._peak_w,
        "segments": segs,
        "guard_events": [dict(e) for e in loop.guard_events],
        "drift_events": [dict(e) for e in drift.events] if drift else [],
    }


def _shifted(items: Any, offset: float, keys: Any) -> List[Dict[str, Any]]:
    out = []
    for item in items:
        item = dict(item)
        for key in keys:
            if isinstance(item.get(key), (int, float)):
                item[key] = item[key] + offset
        out.append(item)
    return out


def merge_record(prior: Dict[str, Any], this: Dict[str, Any]) -> Dict[str, Any]:
    """The run's record: ``prior`` (the calls before, from the checkpoint) then ``this`` call's,
    shifted by the loop time before it. Energy and peak are None only when no call measured."""
    prior = prior if isinstance(prior, dict) else {}
    prior_s = prior.get("time_s")
    offset = prior_s if isinstance(prior_s, (int, float)) else 0.0
    segs = _shifted(this["segments"], offset, ("start_s", "end_s"))
    if prior.get("segments") and segs and segs[0].get("reason") == REASON_START:
        segs[0]["reason"] = REASON_RESUME
    energies = [e for e in (prior.get("energy_j"), this["energy_j"]) if e is not None]
    peaks = [w for w in (prior.get("peak_power_w"), this["peak_power_w"]) if w is not None]

    def earlier(key: str) -> List[Dict[str, Any]]:
        return [dict(x) for x in prior.get(key) or [] if isinstance(x, dict)]

    return {
        "time_s": offset + this["time_s"],
        "energy_j": sum(energies) if energies else None,
        "peak_power_w": max(peaks) if peaks else None,
        "segments": earlier("segments") + segs,
        "guard_events": earlier("guard_events") + _shifted(this["guard_events"], offset, ["t_s"]),
        "drift_events": earlier("drift_events") + _shifted(this["drift_events"], offset, ["t_s"]),
    }


def loop_history(loop: Any) -> Dict[str, Any]:
    """The run's record up to now, for the trainer's checkpoint (plain values only); a learning
    loop's learner state rides along (the latest, not merged: it is cumulative itself)."""
    with loop._mu:
        record = merge_record(loop.prior, _this_call(loop))
        if loop.learner is not None:
            record["learning"] = loop.learner.state()
        return record


def loop_progress(
    loop: Any, samples: int, time_s: float, energy_j: Optional[float], accuracy: Optional[float],
    segments: int, reached: bool,
) -> Dict[str, Any]:  # fmt: skip
    """Where the run is, in ``fleet.rounds.progress.Progress``'s fields (the coordinator's view
    of a segmented round): the point running now, the last power sample, and how far along the
    target it is. ``done``: the deadline objective's own count (each step adds b / N(b)), else
    the samples over N(b) at the running batch size; ``eta_s``: the samples left at the running
    point times its profiled time per sample (None when the point or N(b) is unknown)."""
    with loop._mu:
        b, f = loop._batch, loop._freq
        n = loop.efficiency.get(b)
        learnt = progress_fields(loop) if not reached else {}
        if reached:
            done = 1.0
        elif "done" in learnt:
            done = learnt.pop("done")  # what the device believes, as the learner prices it
            n = learnt.get("samples_to_target") or n
        elif loop.deadline_s is not None:
            done = loop.done
        else:
            done = samples / n if n else 0.0
        done = min(1.0, max(0.0, done))
        point = loop._point(b, f)
        eta = None  # type: Optional[float]
        if reached:
            eta = 0.0
        elif n and point is not None and b > 0 and math.isfinite(point.time_per_batch_s):
            eta = n * (1.0 - done) / b * point.time_per_batch_s
        return {
            "time_s": time_s,
            "samples": samples,
            "energy_j": energy_j,
            "accuracy": _finite(accuracy),
            "batch_size": b or None,
            "freq_mhz": f or None,
            "budget_w": _finite(loop._budget),
            "power_w": loop._last[1] if loop._last is not None else None,
            "done": done,
            "eta_s": eta,
            "segments": segments,
            **learnt,
        }


def loop_summary(loop: Any) -> Dict[str, Any]:
    """Segments, guard events and the measured totals of the run (call after ``stop``); a
    resumed run's (``loop.prior``) come first (module docstring)."""
    drift = loop.drift
    with loop._mu:
        this = _this_call(loop)
        run = merge_record(loop.prior, this)
        return {
            "status": loop.status,
            "stop_reason": loop.stop_reason,
            "time_s": run["time_s"],
            "call_time_s": this["time_s"],  # this call's share of the loop time
            "energy_j": run["energy_j"],
            "peak_power_w": run["peak_power_w"],
            "power_samples": loop.power_samples,
            # False: no reading at all (a board without a sensor): the budget was kept only
            # by the recorded profile, no guard watched and the energy is unknown
            "power_measured": loop._power_seen,
            "over_budget_samples": loop.over_samples,
            "segments": run["segments"],
            "guard_events": run["guard_events"],
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
            "drift_events": run["drift_events"],
            "refreshes": [dict(r) for r in drift.refreshes] if drift else [],
            "refreshed_profile": drift.out_path if drift and drift.refreshes else None,
            "refreshed_profile_csv": drift.refreshed_csv if drift else None,
            "learning": loop.learner.summary() if loop.learner is not None else None,
        }
