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
learns its own (``samples / done``, against the shipped count at its batch size). A device on
a harder dataset than the proxy is behind from its first segment, and the plan hears of it
then, not when its deadline has already passed.
"""

from __future__ import annotations

from dataclasses import dataclass

HYSTERESIS = 0.05  # a revision smaller than this fraction of the deadline is not worth a change


@dataclass(frozen=True)
class Standing:
    """Where one device stands: device seconds trained, fraction of the target done, and its
    planned fastest finish for the whole round (None: it cannot finish, it does not count)."""

    device: str
    time_s: float
    done: float
    fastest_s: float | None
    inflation: float = 1.0  # the device's own samples-to-target over the shipped count


def inflation(samples: float, done: float, shipped: float | None) -> float:
    """How many times the shipped samples-to-target the device's own progress implies (1.0
    until it has done enough to tell, and never below 1: the plan only learns bad news here,
    a device ahead of the proxy simply finishes early)."""
    if not shipped or shipped <= 0 or done < 0.05 or samples <= 0:
        return 1.0
    return max(1.0, (samples / done) / shipped)


def fastest_finish(s: Standing) -> float | None:
    """The earliest device-clock time this device can reach its target from where it is."""
    if s.fastest_s is None:
        return None
    return s.time_s + max(0.0, 1.0 - s.done) * s.fastest_s * s.inflation


def revise(deadline_s: float | None, standings: list[Standing]) -> tuple[float | None, str]:
    """(new deadline, reason) — the same deadline and "" when no revision is due."""
    finishes = [(fastest_finish(s), s.device) for s in standings]
    finishes = [(f, d) for f, d in finishes if f is not None]
    if not finishes or deadline_s is None:
        return deadline_s, ""
    latest, who = max(finishes)
    if latest > deadline_s * (1 + HYSTERESIS):
        return latest, (
            f"{who} fell behind: its fastest finish is now {latest:.0f} s, after the deadline "
            f"{deadline_s:.0f} s; the others may slow down"
        )
    return deadline_s, ""
