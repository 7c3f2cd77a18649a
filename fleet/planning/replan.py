"""Fleet-level re-planning of the deadline objective, from the progress that segments report.

Why at the fleet level: the round's deadline is the slowest device's fastest finish
(``fleet.planning.deadline_plan.plan_deadline``), set before anyone trains. Hours later the
plan is wrong: boards drift, budgets change, the proxy's efficiency misjudged the data. With
progress arriving every segment the coordinator re-prices each device's fastest finish from
where it is now and moves the deadline when the slowest device fell behind (later: every other
device may then slow down and save energy). Each device's own deadline objective does the rest:
at every segment start it picks, from where it is, the least-energy point that still meets the
deadline it is sent, so a device ahead of the plan slows down and saves energy and one behind
runs faster, within its budget. The deadline never moves earlier: a device that planned on it
must not find it gone.

A device's fastest remaining time is its planned fastest finish times the fraction of the work
it has left (``1 - done``), times how much more work the target takes than the proxy promised:
the planning reply priced the whole work with the shipped samples-to-target, while the device
learns its own. A device that learns online reports its own fastest finish
(``fastest_finish_s``: it knows its profile, its budget and what its learning curve says of every
batch size: ``fleet/agent/learning/efficiency_learner.py``) with the doubt of its estimate, and the
plan
takes it ``CONFIDENCE_Z`` standard deviations early; one that does not is judged by ``samples /
done`` against the shipped count (only bad news: its ``done`` is itself priced with the shipped
count). A device on a harder dataset than the proxy is behind from its first segment, and the
plan hears of it then, not when its deadline has already passed.

The direct engine (``fleet.planning.whatif``) and the segmented coordinator
(``strategies/segmented.py``) re-plan with the same functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

HYSTERESIS = 0.05  # a revision smaller than this fraction of the deadline is not worth a change
#: A learning device's own finish counts at this many sd of its estimate *early*: the deadline
#: never moves back, so a noisy estimate that is late would hold every device to a later
#: deadline for good (and the round would outlast the time objective's); one that is early only
#: delays the revision until the device's curve says so more surely.
CONFIDENCE_Z = 0.5


@dataclass(frozen=True)
class Standing:
    """Where one device stands: device seconds trained, fraction of the target done, and its
    planned fastest finish for the whole round (None: it cannot finish, it does not count)."""

    device: str
    time_s: float
    done: float
    fastest_s: float | None
    inflation: float = 1.0  # the device's own samples-to-target over the shipped count
    own_finish_s: float | None = None  # the device's own fastest finish (it learns its work)
    own_finish_sd: float = 0.0  # sd of the log of the work it has left (its estimate's doubt)


def inflation(
    samples: float, done: float, shipped: float | None, learned: float | None = None
) -> float:
    """How many times the shipped samples-to-target the device's work takes: its own learnt
    estimate at its batch size when it reports one (``learned``), else what its progress
    implies (1.0 until it has done enough to tell, and never below 1: without an estimate the
    plan only learns bad news, a device ahead of the proxy simply finishes early)."""
    if not shipped or shipped <= 0:
        return 1.0
    if learned is not None and learned > 0:
        return learned / shipped
    if done < 0.05 or samples <= 0:
        return 1.0
    return max(1.0, (samples / done) / shipped)


def fastest_finish(s: Standing) -> float | None:
    """The earliest device-clock time this device can reach its target from where it is: its
    own estimate when it reports one (it knows its profile, its budget and what it learnt of
    every batch size), else the plan's fastest finish scaled by what is left and its
    inflation."""
    if s.own_finish_s is not None:
        left = max(0.0, s.own_finish_s - s.time_s)
        return s.time_s + left * math.exp(-CONFIDENCE_Z * s.own_finish_sd)
    if s.fastest_s is None:
        return None
    return s.time_s + max(0.0, 1.0 - s.done) * s.fastest_s * s.inflation


def revise(deadline_s: float | None, standings: list[Standing]) -> tuple[float | None, str]:
    """(new deadline, reason) — the same deadline and "" when no revision is due."""
    all_finishes = [(fastest_finish(s), s.device) for s in standings]
    finishes = [(f, d) for f, d in all_finishes if f is not None]
    if not finishes or deadline_s is None:
        return deadline_s, ""
    latest, who = max(finishes)
    if latest > deadline_s * (1 + HYSTERESIS):
        return latest, (
            f"{who} fell behind: its fastest finish is now {latest:.0f} s, after the deadline "
            f"{deadline_s:.0f} s; the others may slow down"
        )
    return deadline_s, ""


def settle(row: dict, deadline_s: float | None) -> tuple[str, str] | None:
    """A trained row judged against the round's last deadline: (status, note) when its status
    must change (``late`` finished after it, ``ok`` within it), else None. A device's own
    verdict was against the deadline it was last sent, which the plan may have moved since
    (or scaled for it); what counts is when it finished against the round's."""
    if deadline_s is None or row.get("status") not in ("ok", "late") or row.get("time_s") is None:
        return None
    late = float(row["time_s"]) > float(deadline_s) * (1 + 1e-9)
    status = "late" if late else "ok"
    if status == row["status"]:
        return None
    word = "after" if late else "within"
    note = f"finished at {float(row['time_s']):.0f} s, {word} the round's deadline "
    note += f"{float(deadline_s):.0f} s (as re-planned)"
    return status, note


def standing(
    device: str, prog: Any, fastest_s: float | None, shipped: dict[int, float]
) -> Standing:
    """A device's ``Standing`` from its progress (``fleet.rounds.progress.Progress``) and the
    plan's fastest finish for it; ``shipped``: the samples-to-target it was shipped."""
    n = shipped.get(prog.end_batch_size) if prog.end_batch_size is not None else None
    k = inflation(prog.samples, prog.done, n, prog.samples_to_target)
    return Standing(
        device, prog.time_s, prog.done, fastest_s, k, prog.fastest_finish_s,
        prog.samples_to_target_sd or 0.0,
    )  # fmt: skip


def deadline_for(deadline_s: float | None, prog: Any, shipped: dict[int, float]) -> float | None:
    """The deadline one device is sent. A device that prices its remaining work with the
    shipped efficiency and whose progress says the target takes ``k`` times the shipped samples
    gets it scaled to its units, ``t + (D - t) / k``, so the point it picks finishes by the
    round's deadline ``D`` in its real work; one that learns its own (its progress carries
    ``samples_to_target``) gets the deadline as it is."""
    if deadline_s is None or prog is None or prog.end_batch_size is None:
        return deadline_s
    if prog.samples_to_target is not None:
        return deadline_s
    k = inflation(prog.samples, prog.done, shipped.get(prog.end_batch_size))
    if k > 1.0 and deadline_s > prog.time_s:
        return prog.time_s + (deadline_s - prog.time_s) / k
    return deadline_s
