"""The points the closed loop may run now, as one value every part of the loop chooses on.

Why: the budget follower, the deadline, the learner and the drift watch all choose among the
same profiled points, with the same samples-to-target, minus what the guard ruled out and above
no batch the data cannot fill. Those four things are owned by different parts (the LUT by the
loop, which a drift refresh replaces; the samples-to-target by the learner hook; the exclusions
by the guard); the loop hands the parts this snapshot instead of itself, and the kernel's
selection (eq. 4) is named in this one module of the loop. Python 3.6 compatible, stdlib only.
"""

from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from fleet.method.point import Point
from fleet.method.selection import choose, fits, lowest_peak

Key = Tuple[int, float]  # (batch size, MHz)


def budget_label(w: Optional[float]) -> str:
    return "unlimited" if w is None else "{:g} W".format(w)


class Table(NamedTuple):
    """``points`` (the LUT in force), ``efficiency`` (samples-to-target per batch size the loop
    chooses with), ``excluded`` (the (batch, MHz) pairs the guard ruled out), ``max_batch``."""

    points: List[Point]
    efficiency: Dict[int, float]
    excluded: Set[Key]
    max_batch: Optional[int]

    def choose(self, budget: Optional[float], objective: str = "time") -> Optional[Point]:
        """Eq. 4 under ``budget`` (``time`` or ``energy``) among the points allowed."""
        return choose(
            self.points, self.efficiency, budget, objective, self.excluded, self.max_batch
        )

    def point(self, batch: int, freq: float) -> Optional[Point]:
        """The profiled point at (``batch``, ``freq``), if the LUT has it."""
        return next((q for q in self.points if (q.batch_size, q.freq_mhz) == (batch, freq)), None)

    def runnable(self, key: Key, budget: Optional[float]) -> Optional[Point]:
        """The point at ``key`` when it is profiled, not ruled out, and fits ``budget``."""
        p = self.point(key[0], key[1])
        if p is None or key in self.excluded or not fits(p, budget):
            return None
        return p

    def for_batch(self, batch: int, budget: Optional[float], below_mhz: float) -> Optional[Point]:
        """``batch``'s fastest point that fits ``budget`` at or under ``below_mhz`` (its lowest
        clock there when none fits)."""
        cands = [
            p
            for p in self.points
            if p.batch_size == batch
            and (batch, p.freq_mhz) not in self.excluded
            and p.freq_mhz <= below_mhz
        ]
        ok = [p for p in cands if fits(p, budget)]
        if ok:
            return min(ok, key=lambda p: (p.time_per_batch_s, p.freq_mhz))
        return min(cands, key=lambda p: p.freq_mhz) if cands else None

    def nothing_fits(self, budget: Optional[float]) -> str:
        """One line saying that no profiled point fits ``budget``, with the lowest peak."""
        low = lowest_peak(self.points)
        where = (
            "; the lowest profiled peak is {:.2f} W (batch {}, {:g} MHz)".format(
                low.guard_peak_w, low.batch_size, low.freq_mhz
            )
            if low is not None
            else ""
        )
        extra = " ({} point(s) excluded by the guard)".format(len(self.excluded))
        return "no profiled point fits the {} budget{}{}".format(
            budget_label(budget), where, extra if self.excluded else ""
        )
