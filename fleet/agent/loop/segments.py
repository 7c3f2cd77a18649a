"""The closed loop's record of a run: its segments, their measured energy, and the run's record.

Why separate: what the loop *did* (every stretch at one batch size, clock and budget, with the
reason it began and the energy the rail measured over it; the guard events) is reported as it is
by the agent's ``train`` reply, ``powerfleet train --json`` and the round report, so the record
is kept apart from the decisions that produce it (``closedloop.py``, ``budgetwatch.py``,
``deadline_reselect.py``). The ``SegmentLog`` owns it: the segments, the power samples counted
and the energy and peak they measured, when the call ended, and the record of the calls before.

A run may span several calls (a resumed checkpoint, a segmented round's ``segment_s``): the
record of the calls before travels in the trainer's checkpoint (``ClosedLoop.history``, handed
back to ``SegmentLog.carry``), and the record is the whole run's, the earlier calls' segments and
events first, on one timeline (each later call's times shifted by the loop time before it), so a
reply's counters are cumulative and never count one stretch twice.

The loop calls it with its lock held. Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

from fleet.method.power_window import OverBudget, WindowedPower

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


def finite(v: Optional[float]) -> Optional[float]:
    return v if v is not None and math.isfinite(v) else None


class SegmentLog(object):
    """``segments`` (this call's, each a dict: ``start_s``, ``end_s``, ``batch_size``,
    ``freq_mhz``, ``budget_w``, ``reason``, ``energy_j``, and ``done`` under a deadline),
    ``power_samples`` (counted), ``window`` (the budget statistic, ``power_window.py``) and
    ``over`` (its time and energy above the budget), ``end_s`` (when the call ended, None while
    it runs), ``prior`` (the record of the calls before this one)."""

    def __init__(self, average_s: float = 0.0, window_s: Optional[float] = None) -> None:
        self.segments = []  # type: List[Dict[str, Any]]
        self.power_samples = 0
        self.window = WindowedPower(average_s)  # the budget statistic (power_window.py)
        self.window_s = window_s  # the window the budget is stated over, for the record
        self.over = OverBudget()
        self.end_s = None  # type: Optional[float]
        self.prior = {}  # type: Dict[str, Any]
        self._energy_j = 0.0
        self._peak_w = None  # type: Optional[float]
        self._power_seen = False
        self._last: Optional[Tuple[float, float]] = None

    @property
    def started(self) -> bool:
        """A segment was opened (the loop's first choice is behind it)."""
        return bool(self.segments)

    @property
    def power_measured(self) -> bool:
        """False: no reading at all (a board without a sensor)."""
        return self._power_seen

    @property
    def last_power_w(self) -> Optional[float]:
        return self._last[1] if self._last is not None else None

    def carry(self, prior: Optional[Dict[str, Any]]) -> None:
        """A resumed run: ``prior`` is the record of the calls before this one."""
        self.prior = dict(prior or {})

    def open(
        self, t: float, batch: int, freq: float, budget: Optional[float], reason: str,
        done: Optional[float] = None,
    ) -> bool:  # fmt: skip
        """Close the running segment at ``t`` and open one for (``batch``, ``freq``,
        ``budget``) unless nothing changed; True when one was opened (a segment boundary).
        ``done``: the fraction of the target reached when it began (deadline objective)."""
        if self.segments:
            last = self.segments[-1]
            last["end_s"] = t
            if (
                last["batch_size"] == batch
                and last["freq_mhz"] == freq
                and last["budget_w"] == budget
            ):
                return False  # nothing changed: keep one segment
        seg = {
            "start_s": t,
            "end_s": t,
            "batch_size": batch,
            "freq_mhz": freq,
            "budget_w": budget,
            "reason": reason,
            "energy_j": 0.0,
        }  # type: Dict[str, Any]
        if done is not None:
            seg["done"] = done
        self.segments.append(seg)
        return True

    def account(
        self, t: float, watts: float, budget: Optional[float], judged: bool = True
    ) -> float:
        """Count one power sample: the budget statistic (returned: the guard and the drift
        watch judge it), its peak and, when ``judged`` (False while a new clock settles), its
        time and energy above ``budget``; and the energy (trapezoids of the readings) of the
        run and of the running segment."""
        self.power_samples += 1
        stat = self.window.add(t, watts)
        self.over.add(t, stat, budget if judged else None)
        self._power_seen = True
        self._peak_w = stat if self._peak_w is None else max(self._peak_w, stat)
        seg = self.segments[-1] if self.segments else None
        if seg is not None:
            seg["end_s"] = max(seg["end_s"], t)
        if self._last is not None and seg is not None:
            t0, w0 = self._last
            e = max(0.0, t - t0) * (w0 + watts) / 2.0
            self._energy_j += e
            # a trapezoid across a segment's start is split there: the part before belongs to
            # the segment before (however far apart a loaded machine's samples fall)
            start = seg["start_s"]
            if t0 < start < t and len(self.segments) > 1:
                before = e * (start - t0) / (t - t0)
                prev = self.segments[-2]
                prev["energy_j"] = (prev.get("energy_j") or 0.0) + before
                e -= before
            seg["energy_j"] = (seg.get("energy_j") or 0.0) + e
        self._last = (t, watts)
        return stat

    def end(self, t: float) -> bool:
        """The call ends at ``t`` (the last segment with it); False when it had already."""
        if self.end_s is not None:
            return False
        self.end_s = t
        if self.segments:
            self.segments[-1]["end_s"] = t
        return True

    def this_call(
        self, now: float, guard_events: List[Dict[str, Any]], drift_events: List[Dict[str, Any]]
    ) -> Dict[str, Any]:
        """This call's record so far: its segments (the last one ending ``now`` unless the call
        ended), the guard and drift events given, loop time and measured energy."""
        end = self.end_s if self.end_s is not None else now
        segs = [dict(s) for s in self.segments]
        if segs:
            segs[-1]["end_s"] = end
        for s in segs:
            if not self._power_seen:
                s["energy_j"] = None
        return {
            "time_s": end,
            "energy_j": self._energy_j if self._power_seen else None,
            "peak_power_w": self._peak_w,
            "over_budget_s": self.over.seconds if self._power_seen else None,
            "over_budget_j": self.over.joules if self._power_seen else None,
            "over_budget_excursions": self.over.excursions,
            "longest_over_budget_s": self.over.longest_s,
            "segments": segs,
            "guard_events": [dict(e) for e in guard_events],
            "drift_events": [dict(e) for e in drift_events],
        }

    def totals(self, this: Dict[str, Any], run: Dict[str, Any]) -> Dict[str, Any]:
        """The summary's record keys: ``run``'s (the whole run's) totals, segments and guard
        events, with ``this`` call's share of the loop time and this call's sample counts."""
        return {
            "time_s": run["time_s"],
            "call_time_s": this["time_s"],  # this call's share of the loop time
            "energy_j": run["energy_j"],
            "peak_power_w": run["peak_power_w"],
            "power_samples": self.power_samples,
            # False: no reading at all (a board without a sensor): the budget was kept only
            # by the recorded profile, no guard watched and the energy is unknown
            "power_measured": self._power_seen,
            "over_budget_samples": self.over.samples,
            # the budget statistic's window and the run's time and energy above the budget
            "power_window_s": self.window_s,
            "over_budget_s": run["over_budget_s"],
            "over_budget_j": run["over_budget_j"],
            "over_budget_excursions": run["over_budget_excursions"],
            "longest_over_budget_s": run["longest_over_budget_s"],
            "segments": run["segments"],
            "guard_events": run["guard_events"],
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

    def total(key: str, pick: Any = sum) -> Optional[float]:
        values = [v for v in (prior.get(key), this.get(key)) if isinstance(v, (int, float))]
        return pick(values) if values else None

    return {
        "time_s": offset + this["time_s"],
        "energy_j": sum(energies) if energies else None,
        "peak_power_w": max(peaks) if peaks else None,
        "over_budget_s": total("over_budget_s"),
        "over_budget_j": total("over_budget_j"),
        "over_budget_excursions": int(total("over_budget_excursions") or 0),
        "longest_over_budget_s": total("longest_over_budget_s", max) or 0.0,
        "segments": earlier("segments") + segs,
        "guard_events": earlier("guard_events") + _shifted(this["guard_events"], offset, ["t_s"]),
        "drift_events": earlier("drift_events") + _shifted(this["drift_events"], offset, ["t_s"]),
    }
