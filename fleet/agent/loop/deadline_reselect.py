"""The deadline objective inside the closed loop: the point for the work and time left.

Why separate: under ``objective = "deadline"`` every choice the loop makes (at the start, at a
budget change, after a guard step-down, after a drift refresh) is the deadline point for the
*remaining* work and time, with a look-ahead over a known schedule, and after every step the
running point is re-priced (``behind``); when no point can finish in time the device runs its
fastest point and records when it fell behind. The ``DeadlineReselector`` owns that bookkeeping
(the fraction of the target done, the plan at the start, the latest prediction, when it fell
behind, the rail's measured excess over the profile, a re-selection asked for at the next step
boundary), apart from following the budget (``budgetwatch.py``) and from the loop's hooks
(``closedloop.py``), which hand it the points (``table.Table``), the budget and the running
point as arguments. The arithmetic itself (rates, finish times, the per-step choice) is the
kernel's ``deadline.py``. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from fleet.agent.loop.loop_learning import REASON_LEARNED
from fleet.agent.loop.segments import REASON_DEADLINE, finite
from fleet.agent.loop.table import Key, Table
from fleet.method.deadline import check_deadline_s, check_power, choose_deadline, finish_at, meets
from fleet.method.point import Point
from fleet.method.selection import ChooseError

BEHIND_CHECK_S = 0.25  # how often the deadline objective re-prices the running point

Schedule = Optional[List[Tuple[float, Optional[float]]]]


class DeadlineReselector(object):
    """The deadline's state in one run: ``done`` (fraction of the target reached: each step adds
    b / N(b)), ``late`` (no point met the deadline at the start), ``predicted_finish_s`` and
    ``predicted_energy_j`` (the plan at the start), ``last_finish_s`` (the latest prediction),
    ``behind_at_s`` (when it fell behind), ``rail_excess_w`` (how much hotter than its profile
    peak the rail measured at a guard event: re-selections keep that much under the budget until
    a drift refresh re-measures). ``note``: the loop's notes."""

    def __init__(self, deadline_s: float, note: Callable[[str], None]) -> None:
        self.deadline_s = deadline_s
        self.done = 0.0
        self.late = False
        self.predicted_finish_s = None  # type: Optional[float]
        self.predicted_energy_j = None  # type: Optional[float]
        self.last_finish_s = None  # type: Optional[float]
        self.behind_at_s = None  # type: Optional[float]
        self.rail_excess_w = 0.0
        self._note = note
        self._next_check = 0.0
        self._requested = False
        self._reason = REASON_DEADLINE

    # -- what the loop tells it -----------------------------------------------------------------
    def request(self, reason: Optional[str] = None) -> None:
        """Re-select at the next step boundary (``reason``: the new segment's, if not the
        deadline's own)."""
        self._requested = True
        if reason is not None:
            self._reason = reason

    def requested(self) -> bool:
        return self._requested

    def take_request(self) -> str:
        """The boundary came: the request's reason, and the request is cleared."""
        self._requested = False
        why, self._reason = self._reason, REASON_DEADLINE
        return why

    def stepped(self, batch: int, efficiency: Dict[int, float]) -> None:
        """A step at ``batch`` finished: it did ``batch / N(batch)`` of the target."""
        n = efficiency.get(batch)
        if n:
            self.done += batch / n

    def resumed(self, samples: int, n: float) -> None:
        """A checkpoint's ``samples`` (priced at ``n`` samples-to-target) count as done, and the
        next step re-selects for the work and time left."""
        self.done = min(1.0, self.done + samples / n)
        self.request()

    def relearnt(self, done: float) -> None:
        """The learner re-priced the work (``done`` of the target as it believes now): the
        deadline point for the work left at the next step, in a ``learned`` segment."""
        self.done = done
        self.request(REASON_LEARNED)

    def guarded(self, over: Optional[Point], watts: float) -> None:
        """The guard stepped down from ``over`` measuring ``watts``: re-select at the next step
        without the points ruled out, keeping the rail's excess over the profile under the
        budget."""
        self.request()
        if over is not None and over.guard_peak_w == over.guard_peak_w:  # not NaN
            self.rail_excess_w = max(self.rail_excess_w, watts - over.guard_peak_w)

    def rail_refreshed(self) -> None:
        self.rail_excess_w = 0.0  # the refreshed table has measured the rail

    # -- choosing -------------------------------------------------------------------------------
    def choose(
        self, table: Table, ahead: Schedule, budget: Optional[float], now: float, started: bool,
        margin_only: bool = False,
    ) -> Optional[Point]:  # fmt: skip
        """The deadline point at ``now`` for the work and time left. After a guard event it
        keeps the rail's measured excess under the budget; when nothing fits that way, the plain
        budget (the guard watches), unless ``margin_only``: then None. The first choice (not
        ``started``) records the plan the round was promised."""
        if self.done >= 1.0:
            return self._past_estimate(table, budget, now, started, margin_only)
        schedule = ahead or [(0.0, budget)]
        got = None
        if self.rail_excess_w > 0:  # the rail runs hotter than the profile: keep the margin
            got = choose_deadline(
                table.points, table.efficiency, [(at, self._derate(w)) for at, w in schedule],
                now, self.done, self.deadline_s, self._derate(budget), table.excluded,
                table.max_batch,
            )  # fmt: skip
            if got is None and margin_only:
                return None
        if got is None:
            got = choose_deadline(
                table.points, table.efficiency, schedule, now, self.done, self.deadline_s, budget,
                table.excluded, table.max_batch,
            )  # fmt: skip
        if got is None:
            return None
        rate, late, f, e = got
        self.last_finish_s = f
        if not started:  # the start: the plan the round was promised
            self.late, self.predicted_finish_s, self.predicted_energy_j = late, f, e
            if late:
                self._note(
                    "deadline: predicted finish {:.1f} s misses the {:g} s deadline; running "
                    "the fastest point".format(f, self.deadline_s)
                )
        elif late:
            self._mark_behind(now)
        return rate.point

    def behind(
        self, table: Table, ahead: Schedule, budget: Optional[float], t: float, running: Key,
        busy: bool,
    ) -> bool:  # fmt: skip
        """Does the ``running`` point still finish by the deadline (from here, at the LUT's rate,
        with the look-ahead)? True: re-select now, at the step boundary. Checked also after the
        device was late or fell behind: a later budget change may have put it on a slower point
        that must keep up too; only the fastest point has nothing to switch to. ``busy``: a
        switch, a stop or a drift refresh is under way (nothing to check)."""
        if t < self._next_check or busy:
            return False
        self._next_check = t + BEHIND_CHECK_S
        p = table.point(running[0], running[1])
        if p is None:
            return False
        fastest = table.choose(self._derate(budget) if self.rail_excess_w > 0 else budget)
        at_fastest = fastest == p  # then there is nothing to switch to, only to record
        if self.done >= 1.0:  # past the shipped estimate: the fastest point, now
            if at_fastest:
                self._mark_behind(t)
            return not at_fastest
        schedule = ahead or [(0.0, budget)]
        if self.rail_excess_w > 0:
            schedule = [(at, self._derate(w)) for at, w in schedule]
        f, _ = finish_at(
            p, table.points, table.efficiency, schedule, t, self.done, table.excluded,
            table.max_batch,
        )  # fmt: skip
        self.last_finish_s = f
        if meets(f, self.deadline_s):
            return False
        if at_fastest:
            self._mark_behind(t)
            return False
        return True

    def _mark_behind(self, now: float) -> None:
        """Record (once, unless the start was already late) that the device fell behind."""
        if self.late or self.behind_at_s is not None:
            return
        self.behind_at_s = now
        if self.done >= 1.0:
            why = "the shipped estimate is used up at {:.1f} s ({:.1%} done, target not reached)"
            self._note(("deadline: " + why + "; running the fastest point").format(now, self.done))
        else:
            self._note(
                "deadline: fell behind the {:g} s deadline at {:.1f} s ({:.1%} done); running "
                "the fastest point".format(self.deadline_s, now, self.done)
            )

    def _past_estimate(
        self, table: Table, budget: Optional[float], now: float, started: bool, margin_only: bool
    ) -> Optional[Point]:
        """The shipped samples-to-accuracy are used up and the target is not reached: the data
        needs more than estimated, nothing is left to plan on, so the device is behind and runs
        its fastest point (the host's ``DeadlineChooser`` does the same). Costing the remaining
        work as zero instead would make every point "on time" and pick the slowest."""
        p = None
        if self.rail_excess_w > 0:
            p = table.choose(self._derate(budget))
            if p is None and margin_only:
                return None
        if p is None:
            p = table.choose(budget)
        if p is not None and started:
            self._mark_behind(now)
        return p

    def _derate(self, budget: Optional[float]) -> Optional[float]:
        return None if budget is None else max(budget - self.rail_excess_w, 1e-9)


def deadline_for(
    objective: str, deadline_s: Optional[float], points: List[Point],
    efficiency: Dict[int, float], note: Callable[[str], None],
) -> Optional[DeadlineReselector]:  # fmt: skip
    """The deadline part for a loop under ``objective`` (None for ``time``/``energy``); a
    ``ChooseError`` (one line) when ``deadline_s`` is missing, malformed or given to another
    objective, or a point the loop may pick (its batch size shipped) has no measured power."""
    if objective != "deadline":
        if deadline_s is not None:
            raise ChooseError("deadline_s is only for the deadline objective")
        return None
    if deadline_s is None:
        raise ChooseError("the deadline objective needs deadline_s (seconds)")
    deadline_s = check_deadline_s(deadline_s)
    check_power([p for p in points if p.batch_size in efficiency])  # as the host prices them
    return DeadlineReselector(deadline_s, note)


def deadline_fields(deadline: Optional[DeadlineReselector]) -> Dict[str, Any]:
    """The summary's deadline keys (None for another objective)."""
    d = deadline
    return {
        "deadline_s": d.deadline_s if d else None,
        "done_fraction": d.done if d else None,
        "predicted_finish_s": finite(d.predicted_finish_s) if d else None,  # inf: never
        "predicted_energy_j": finite(d.predicted_energy_j) if d else None,
        "last_predicted_finish_s": finite(d.last_finish_s) if d else None,
        "late": d.late if d else None,
        "behind_at_s": d.behind_at_s if d else None,
        "rail_excess_w": d.rail_excess_w if d else None,
    }
