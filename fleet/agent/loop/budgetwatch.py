"""The two parts of the closed loop that react to the outside world at each power sample: the
budget follower and the guard.

Why separate: these run in the sampler thread, at every reading, while the trainer is inside a
step. The ``BudgetFollower`` owns the budget source (fixed, schedule, live file), the budget in
force and the schedule known ahead; at a change it says which clock to lock now and which point
to switch to at the step boundary (the clock only ever goes *down* before the batch switch, see
``closedloop.py``). The ``Guard`` owns the power samples over its window, the points it ruled
out and its events: measured power over the budget for longer than the window steps the clock
down and rules the point (and the faster ones at its batch size) out. Both decide; the loop
(``closedloop.py``) locks the clock, opens the segment and notes what happened, so neither reads
nor writes the loop's state. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Dict, List, Optional, Set, Tuple

from fleet.agent.loop.table import Key, Table, budget_label
from fleet.method.budget import BudgetSource, ScheduleBudget
from fleet.method.point import Point

Schedule = List[Tuple[float, Optional[float]]]


class BudgetFollower(object):
    """The budget in force (``budget``, watts or None) read from ``source`` at every sample;
    ``ahead``: the whole schedule when the source knows it ahead (a ``ScheduleBudget``: the
    deadline looks ahead over it), else None (a live file: the budget now is assumed to hold)."""

    def __init__(self, source: BudgetSource) -> None:
        self.source = source
        self.budget = None  # type: Optional[float]
        self.read_at = 0.0  # the latest time read: a reading stamped earlier changes nothing
        self.ahead = None  # type: Optional[Schedule]
        if isinstance(source, ScheduleBudget):
            self.ahead = list(source.steps)

    def start(self) -> Optional[float]:
        """The budget at 0 s."""
        self.budget = self.source.budget_at(0.0)
        return self.budget

    def poll(self, t: float, stopped: bool) -> bool:
        """Read the budget at ``t``; True when it changed (and the loop still runs). Two threads
        read it (the sampler, the step boundary): a time older than the latest read is not
        asked, so a sample stamped just before a schedule step cannot undo the step."""
        if t < self.read_at:
            return False
        self.read_at = t
        budget = self.source.budget_at(t)
        if budget == self.budget or stopped:
            return False
        self.budget = budget
        return True

    def move(
        self, chosen: Optional[Point], table: Table, batch: int, freq: float
    ) -> Tuple[Optional[float], Optional[Point]]:
        """At a change to ``budget``, with ``chosen`` the point selected for it and (``batch``,
        ``freq``) running: (the clock to lock now or None, the point to switch to at the step
        boundary or None). Until the boundary the running batch goes on at its fastest point
        that fits the new budget, never above the new clock nor above the running one; when
        nothing fits (``chosen`` None) at its lowest clock, the least power until the step
        ends."""
        budget = self.budget
        if chosen is None:
            lowest = table.for_batch(batch, budget, freq)
            if lowest is not None and lowest.freq_mhz < freq:
                return lowest.freq_mhz, None
            return None, None
        if chosen.batch_size == batch:
            return chosen.freq_mhz, None
        bridge = table.for_batch(batch, budget, chosen.freq_mhz)
        interim = min(chosen.freq_mhz, freq)
        if bridge is not None:
            interim = min(interim, bridge.freq_mhz)
        return (interim if interim != freq else None), chosen

    def describe(self) -> str:
        return self.source.describe()


class Guard(object):
    """Over the budget for longer than ``window_s``: step down. ``infeasible``: the (batch, MHz)
    pairs ruled out for the rest of the run; ``events``: every step-down (or the stop). It is
    fed the budget statistic (``fleet/method/power_window.py``: the reading averaged over the
    backend's stated window), the value the budget bounds and the profile's peak records."""

    def __init__(self, window_s: float) -> None:
        self.window_s = float(window_s)
        self.infeasible: Set[Key] = set()
        self.events = []  # type: List[Dict[str, Any]]
        self._over_since = None  # type: Optional[float]

    def reset(self) -> None:
        """A new clock or a new budget: the window starts again."""
        self._over_since = None

    def sample(
        self, t: float, watts: float, budget: Optional[float], settle_until: float,
        running: Key, points: List[Point], stopped: bool,
    ) -> Optional[Dict[str, Any]]:  # fmt: skip
        """One reading at ``t`` with ``running`` locked: the guard event when the rail stayed
        over ``budget`` for the window (its ``to_mhz`` the next lower clock not ruled out, None
        at the lowest: the loop must stop), else None. Readings before ``settle_until`` (the
        clock still moving) never count."""
        if budget is None or t < settle_until or watts <= budget:
            self._over_since = None
            return None
        if self._over_since is None:
            self._over_since = t
            return None
        if t - self._over_since < self.window_s or stopped:
            return None
        self._over_since = None
        b, f = running
        for p in points:  # this point and every faster one at this batch size
            if p.batch_size == b and p.freq_mhz >= f:
                self.infeasible.add((b, p.freq_mhz))
        lower = sorted(
            p.freq_mhz
            for p in points
            if p.batch_size == b and p.freq_mhz < f and (b, p.freq_mhz) not in self.infeasible
        )
        event = {
            "t_s": t,
            "from_mhz": f,
            "to_mhz": lower[-1] if lower else None,
            "measured_w": watts,
            "budget_w": budget,
            "batch_size": b,
        }
        self.events.append(event)
        return event


def guard_text(event: Dict[str, Any]) -> str:
    """The loop's note for a guard event (the stop's reason when there was no lower clock)."""
    w, budget = event["measured_w"], budget_label(event["budget_w"])
    f, b = event["from_mhz"], event["batch_size"]
    if event["to_mhz"] is None:
        return (
            "measured {:.2f} W over the {} budget at the lowest profiled clock {:g} MHz "
            "(batch {})".format(w, budget, f, b)
        )
    return "guard: {:.2f} W over {} at {:g} MHz (batch {}); stepped down to {:g} MHz".format(
        w, budget, f, b, event["to_mhz"]
    )
