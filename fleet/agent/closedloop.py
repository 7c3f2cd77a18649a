"""The closed loop on the device: follow the budget, re-select, and guard the rail while training.

Why: a decision taken once at the start trusts two things that change on a real board, the
budget (a schedule, a battery or solar controller writing a file) and the power the profile
promised (temperature, ageing and a different rail drift it upwards). So the loop

- asks its ``BudgetSource`` for the budget at every power sample; at every change it re-selects
  on the LUT (eq. 4, ``choose``), locks the new frequency and hands the trainer the new batch size
  at its next step (the trainer rescales the learning rate and counts samples across the switch);
- watches every power sample (in the sampler thread, so it reacts during a long step): measured
  power above the budget for longer than ``guard_window_s`` steps the clock down to the next lower
  profiled frequency, records a guard event and marks the point (and the faster ones at that batch
  size) infeasible for the rest of the run; over budget at the lowest clock stops training
  cleanly with status ``over-budget``;
- records every stretch at one (batch, frequency, budget) as a segment, with its measured energy;
- with a ``DriftWatch`` (``driftwatch.py``, on by default in ``train_under_budget``) compares each
  training step at the locked point with the LUT; a persistent deviation is a drift event, and at
  the next segment boundary the loop re-probes a few neighbours with real training steps,
  refreshes the table, writes the refreshed profile and re-selects on it;
- with ``objective = "deadline"`` (and ``deadline_s``, seconds from ``start()``) every choice is
  the deadline point (``deadline.py``) for the *remaining* work and time: the loop counts the
  fraction of the target done (each step adds ``batch / N(batch)``, so progress carries across
  batch switches), looks ahead over a known schedule (a live file: the current budget is
  assumed to hold), re-selects after a guard step-down (keeping the rail's measured excess over
  the profile under the budget, so it does not try points the rail would push over), and after
  every step checks the running point still finishes in time; when it does not, it re-selects,
  and if no point meets the deadline any more it runs its fastest point and records when it
  fell behind.

Ordering rule at a budget change: the clock may only go *down* before the batch switch. If the new
point's frequency is higher than the running one, the running batch is first brought to its
fastest point that fits the new budget (its lowest clock if none does) and the new clock is locked
together with the new batch at the step boundary, so no moment of the switch runs a point the
profile says is over the new budget.

Times are seconds since ``start()`` on the monotonic clock; the schedule is read on the same
scale. See ``docs/architecture.md`` (closed loop). Python 3.6 compatible, stdlib only.
"""

import math
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .budget import BudgetSource, ScheduleBudget
from .choose import ChooseError, LutPoint, choose, fits, lowest_peak, lut_from_rows
from .deadline import REL_TOL, check_deadline_s, check_power, choose_deadline, finish_at
from .devices.base import Backend, DeviceError
from .driftwatch import DriftWatch, rows_from_points
from .sampler import PowerSampler

STATUS_OVER_BUDGET = "over-budget"
REASON_START = "start"
REASON_BUDGET = "budget-change"
REASON_SWITCH = "batch-switch"
REASON_GUARD = "guard"
REASON_REPROBE = "drift-reprobe"
REASON_REFRESH = "drift-refresh"
REASON_DEADLINE = "deadline"  # the running point stopped meeting the deadline: re-selected
LOOP_OBJECTIVES = ("time", "energy", "deadline")
BEHIND_CHECK_S = 0.25  # how often the deadline objective re-prices the running point


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


class ClosedLoopError(RuntimeError):
    """The loop cannot start (no point fits the first budget); one line."""


def _label(w: Optional[float]) -> str:
    return "unlimited" if w is None else "{:g} W".format(w)


def _finite(v: Optional[float]) -> Optional[float]:
    return v if v is not None and math.isfinite(v) else None


def _watts(w: Optional[float]) -> str:
    return "n/a" if w is None else "{:.3g} W".format(w)


class ClosedLoop(object):
    """Budget-following, guard-protected control of one device for one training run.

    Use as a context manager around the training; ``sampler`` is the running ``PowerSampler``
    to hand the trainer (one thread reads the rail for both), ``before_step()`` is the trainer's
    per-step hook. ``restore_on_exit`` gives the device back when the block ends.
    """

    def __init__(
        self,
        backend: Backend,
        points: List[LutPoint],
        efficiency: Dict[int, float],
        source: BudgetSource,
        objective: str = "time",
        guard_window_s: float = 0.2,
        settle_s: float = 0.1,
        hz: float = 20.0,
        max_batch: Optional[int] = None,
        clock: Callable[[], float] = time.monotonic,
        restore_on_exit: bool = True,
        log: Optional[Callable[[str], None]] = None,
        drift: Optional[DriftWatch] = None,
        deadline_s: Optional[float] = None,
    ) -> None:
        if objective not in LOOP_OBJECTIVES:
            raise ClosedLoopError(
                "objective must be one of {}, got {!r}".format(
                    ", ".join(LOOP_OBJECTIVES), objective
                )
            )
        self.deadline_s = None  # type: Optional[float]
        try:
            if objective == "deadline":
                if deadline_s is None:
                    raise ChooseError("the deadline objective needs deadline_s (seconds)")
                self.deadline_s = check_deadline_s(deadline_s)
                # the points it may pick, as the host prices them: batch sizes shipped
                check_power([p for p in points if p.batch_size in efficiency])
            elif deadline_s is not None:
                raise ChooseError("deadline_s is only for the deadline objective")
        except ChooseError as exc:
            raise ClosedLoopError(str(exc)) from None
        self.backend = backend
        self.drift = drift
        self.points = list(points)
        self.efficiency = dict(efficiency)
        self.source = source
        self.objective = objective
        self.guard_window_s = float(guard_window_s)
        self.settle_s = float(settle_s)
        self.hz = float(hz)
        self.max_batch = max_batch
        self._clock = clock
        self.restore_on_exit = restore_on_exit
        self._log = log
        self._mu = threading.RLock()
        self.infeasible = set()  # (batch, MHz) pairs the guard ruled out
        self.segments = []  # type: List[Dict[str, Any]]
        self.guard_events = []  # type: List[Dict[str, Any]]
        self.notes = []  # type: List[str]
        self.status = None  # type: Optional[str]
        self.stop_reason = None  # type: Optional[str]
        self.lock_log = []  # type: List[Tuple[float, float]]  # (t_s, MHz) of every lock
        self._t0 = 0.0
        self._end = None  # type: Optional[float]
        self._budget = None  # type: Optional[float]
        self._batch = 0
        self._freq = 0.0
        self._pending = None  # type: Optional[LutPoint]
        self._over_since = None  # type: Optional[float]
        self._settle_until = 0.0
        self._last = None  # type: Optional[Tuple[float, float]]
        self._energy_j = 0.0
        self._peak_w = None  # type: Optional[float]
        self._power_seen = False
        self.power_samples = 0
        self.over_samples = 0
        # deadline objective: progress, the plan at the start, and when it fell behind
        self.done = 0.0  # fraction of the target reached (shipped samples-to-accuracy)
        self.late = False  # no point met the deadline at the start: ran the fastest
        self.predicted_finish_s = None  # type: Optional[float]  # planned at the start
        self.predicted_energy_j = None  # type: Optional[float]
        self.last_finish_s = None  # type: Optional[float]  # the latest prediction
        self.behind_at_s = None  # type: Optional[float]
        self._reselect = False  # a guard step-down asks the deadline for a new point
        # how much hotter than its profile peak the rail measured at a guard event: deadline
        # re-selections keep that much under the budget (until a drift refresh re-measures)
        self.rail_excess_w = 0.0
        self._next_check = 0.0
        schedule = None  # type: Optional[List[Tuple[float, Optional[float]]]]
        if isinstance(source, ScheduleBudget):
            schedule = list(source.steps)  # known ahead: the deadline looks ahead over it
        self._schedule = schedule
        self.sampler = PowerSampler(backend.read_power_w, hz=hz, on_sample=self._on_sample)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ClosedLoop":
        """Select for the budget at 0 s, lock, and start watching the rail."""
        with self._mu:
            self._t0 = self._clock()
            self._budget = self.source.budget_at(0.0)
            p = self._choose(self._budget, 0.0)
            if p is None:
                raise ClosedLoopError(self._nothing_fits(self._budget))
            self._apply_point(p, 0.0)
            self._open_segment(0.0, REASON_START)
        self.sampler.start()
        return self

    def stop(self) -> None:
        """Stop watching and close the last segment (idempotent)."""
        self.sampler.stop()
        with self._mu:
            if self._end is None:
                self._end = self.now()
                if self.segments:
                    self.segments[-1]["end_s"] = self._end
                if self.drift is not None:
                    try:
                        self.drift.finish(self._end)
                    except (OSError, ValueError) as exc:
                        self._note("drift: refreshed profile not written: {}".format(exc))
        set_workload = getattr(self.backend, "set_workload", None)
        if callable(set_workload):
            set_workload(None)

    def __enter__(self) -> "ClosedLoop":
        try:
            return self.start()
        except BaseException:
            if self.restore_on_exit:
                self.backend.restore()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if self.restore_on_exit:
                self.backend.restore()

    def now(self) -> float:
        return self._clock() - self._t0

    # -- what the trainer calls -----------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self._batch

    @property
    def freq_mhz(self) -> float:
        return self._freq

    @property
    def budget_w(self) -> Optional[float]:
        return self._budget

    def before_step(self) -> Tuple[int, bool]:
        """(batch size for the next step, whether to stop). Applies a pending batch switch."""
        drift = self.drift
        if drift is not None:
            drift.step_started(self.now())
        if self._pending is None and self.stop_reason is None and not self._reselect:
            if drift is None or not drift.active():
                return self._batch, False  # the common case: no lock taken
        with self._mu:
            if self.stop_reason is not None:
                return self._batch, True
            p = self._pending
            self._pending = None
            if p is not None and (p.batch_size, p.freq_mhz) in self.infeasible:
                p = self._choose(self._budget)  # the guard struck in between: choose again
                if p is None:
                    self._stop(self._nothing_fits(self._budget))
                    return self._batch, True
            if p is not None and (p.batch_size != self._batch or p.freq_mhz != self._freq):
                t = self.now()
                self._apply_point(p, t)
                self._open_segment(t, REASON_SWITCH)
            if self._reselect and p is None:
                self._reselect = False
                self._reselect_for_deadline(self.now(), REASON_DEADLINE)
                if self.stop_reason is not None:
                    return self._batch, True
            if drift is not None and drift.active():
                self._drift_step()
                if self.stop_reason is not None:
                    return self._batch, True
            return self._batch, False

    def resumed(self, samples: int, batch: Optional[int]) -> None:
        """The trainer resumed a checkpoint that holds ``samples``: they count towards the target
        (deadline objective), and the next step re-selects for the work and time left. The
        checkpoint does not say at which batch sizes they ran; its running batch prices them."""
        if self.deadline_s is None or samples <= 0:
            return
        with self._mu:
            n = self.efficiency.get(batch or self._batch)
            if n:
                self.done = min(1.0, self.done + samples / n)
                self._reselect = True

    def after_step(self) -> None:
        """The trainer finished a step: count it towards the target (deadline objective), and
        the drift watch times it (see ``driftwatch.py``)."""
        if self.deadline_s is not None:
            with self._mu:
                n = self.efficiency.get(self._batch)
                if n:
                    self.done += self._batch / n
                self._check_behind(self.now())
        if self.drift is None:
            return
        with self._mu:
            event = self.drift.step_done(self.now(), (self._batch, self._freq), self._settle_until)
            if event is not None:
                self._note(
                    "drift at {}@{:g} MHz: step {:.4g} s (LUT {:.4g} s), peak {} (LUT {})".format(
                        event["batch_size"], event["freq_mhz"], event["measured_time_s"],
                        event["expected_time_s"], _watts(event["measured_peak_w"]),
                        _watts(event["expected_peak_w"]),
                    )
                )  # fmt: skip

    def _drift_step(self) -> None:
        """Run the refresh the drift watch began: the next re-probe point, or the refresh."""
        drift = self.drift
        by_key = dict(((p.batch_size, p.freq_mhz), p) for p in self.points)
        key = drift.probe_point()
        while key is not None:
            p = by_key.get(key)
            if p is not None and key not in self.infeasible and fits(p, self._budget):
                if key != (self._batch, self._freq):
                    t = self.now()
                    self._apply_point(p, t)
                    self._open_segment(t, REASON_REPROBE)
                return
            drift.skip_probe()  # the guard or a new budget ruled it out since
            key = drift.probe_point()
        if not drift.ready():
            return
        t = self.now()
        rows = drift.refresh(t)
        self.rail_excess_w = 0.0  # the refreshed table has measured the rail
        try:
            self.points = lut_from_rows(rows, "refreshed profile")
        except ChooseError as exc:
            self._note("drift: refreshed table unusable, keeping the old one: {}".format(exc))
        p = self._choose(self._budget, t)
        if p is None:
            self._stop(self._nothing_fits(self._budget))
            return
        if (p.batch_size, p.freq_mhz) != (self._batch, self._freq):
            self._apply_point(p, t)
        self._open_segment(t, REASON_REFRESH)
        self._note(
            "drift: profile refreshed ({} re-probe(s)); running {}@{:g} MHz".format(
                len(drift.refreshes[-1]["reprobed"]), p.batch_size, p.freq_mhz
            )
        )

    # -- the watcher (sampler thread) -----------------------------------------------------------
    def _on_sample(self, t_abs: float, watts: Optional[float]) -> None:
        with self._mu:
            if self._end is not None:
                return
            t = t_abs - self._t0
            try:
                self._follow_budget(t)
                if watts is not None:
                    self._account(t, watts)
                    if self.drift is not None:
                        self.drift.on_sample(watts)
                    self._guard(t, watts)
            except DeviceError as exc:  # a refused lock: stop rather than run unguarded
                self._stop("could not change the clock: {}".format(exc))

    def _follow_budget(self, t: float) -> None:
        budget = self.source.budget_at(t)
        if budget == self._budget or self.stop_reason is not None:
            return
        self._budget = budget
        self._over_since = None
        p = self._choose(budget, t)
        if p is None:
            self._stop(self._nothing_fits(budget))
            lowest = self._choose_for_batch(self._batch, budget, self._freq)
            if lowest is not None and lowest.freq_mhz < self._freq:
                self._lock(lowest.freq_mhz, t)  # the least power until the step ends
            self._open_segment(t, REASON_BUDGET)
            return
        if p.batch_size == self._batch:
            self._lock(p.freq_mhz, t)
        else:
            # Until the step boundary the running batch goes on at its fastest point that fits
            # the new budget, never above the new clock nor above the running one.
            bridge = self._choose_for_batch(self._batch, budget, p.freq_mhz)
            interim = min(p.freq_mhz, self._freq)
            if bridge is not None:
                interim = min(interim, bridge.freq_mhz)
            if interim != self._freq:
                self._lock(interim, t)
        self._pending = p if p.batch_size != self._batch else None
        self._open_segment(t, REASON_BUDGET)

    def _guard(self, t: float, watts: float) -> None:
        budget = self._budget
        if budget is None or t < self._settle_until:
            self._over_since = None
            return
        if watts <= budget:
            self._over_since = None
            return
        if self._over_since is None:
            self._over_since = t
            return
        if t - self._over_since < self.guard_window_s or self.stop_reason is not None:
            return
        self._over_since = None
        b, f = self._batch, self._freq
        for p in self.points:  # this point and every faster one at this batch size
            if p.batch_size == b and p.freq_mhz >= f:
                self.infeasible.add((b, p.freq_mhz))
        lower = sorted(
            p.freq_mhz
            for p in self.points
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
        self.guard_events.append(event)
        if not lower:
            self._stop(
                "measured {:.2f} W over the {} budget at the lowest profiled clock {:g} MHz "
                "(batch {})".format(watts, _label(budget), f, b)
            )
            return
        self._lock(lower[-1], t)
        if self._pending is not None and (
            (self._pending.batch_size, self._pending.freq_mhz) in self.infeasible
        ):
            self._pending = None
        if self.deadline_s is not None:
            self._reselect = True  # at the step boundary: the deadline point without these
            over = self._point(b, f)
            if over is not None and over.peak_power_w == over.peak_power_w:  # not NaN
                self.rail_excess_w = max(self.rail_excess_w, watts - over.peak_power_w)
        self._open_segment(t, REASON_GUARD)
        self._note(
            "guard: {:.2f} W over {} at {:g} MHz (batch {}); stepped down to {:g} MHz".format(
                watts, _label(budget), f, b, lower[-1]
            )
        )

    # -- helpers (hold self._mu) -----------------------------------------------------------------
    def _choose(
        self, budget: Optional[float], t: Optional[float] = None, margin_only: bool = False
    ) -> Optional[LutPoint]:
        """Eq. 4 (time, energy) or the deadline point at ``t``. After a guard event the
        deadline keeps the rail's measured excess under the budget; when nothing fits that
        way, the plain budget (the guard watches), unless ``margin_only``: then None."""
        if self.deadline_s is None:
            return choose(
                self.points, self.efficiency, budget, self.objective, self.infeasible,
                self.max_batch,
            )  # fmt: skip
        now = self.now() if t is None else t
        if self.done >= 1.0:
            return self._past_estimate(budget, now, margin_only)
        schedule = self._schedule or [(0.0, budget)]
        got = None
        if self.rail_excess_w > 0:  # the rail runs hotter than the profile: keep the margin
            got = choose_deadline(
                self.points, self.efficiency, [(at, self._derate(w)) for at, w in schedule],
                now, self.done, self.deadline_s, self._derate(budget), self.infeasible,
                self.max_batch,
            )  # fmt: skip
            if got is None and margin_only:
                return None
        if got is None:
            got = choose_deadline(
                self.points, self.efficiency, schedule, now, self.done, self.deadline_s, budget,
                self.infeasible, self.max_batch,
            )  # fmt: skip
        if got is None:
            return None
        rate, late, f, e = got
        self.last_finish_s = f
        if not self.segments:  # the start: the plan the round was promised
            self.late, self.predicted_finish_s, self.predicted_energy_j = late, f, e
            if late:
                self._note(
                    "deadline: predicted finish {:.1f} s misses the {:g} s deadline; running "
                    "the fastest point".format(f, self.deadline_s)
                )
        elif late:
            self._mark_behind(now)
        return rate.point

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
        self, budget: Optional[float], now: float, margin_only: bool
    ) -> Optional[LutPoint]:
        """The shipped samples-to-accuracy are used up and the target is not reached: the data
        needs more than estimated, nothing is left to plan on, so the device is behind and runs
        its fastest point (the host's ``DeadlineChooser`` does the same). Costing the remaining
        work as zero instead would make every point "on time" and pick the slowest."""
        p = None
        if self.rail_excess_w > 0:
            p = choose(
                self.points, self.efficiency, self._derate(budget), "time", self.infeasible,
                self.max_batch,
            )  # fmt: skip
            if p is None and margin_only:
                return None
        if p is None:
            p = choose(
                self.points, self.efficiency, budget, "time", self.infeasible, self.max_batch
            )
        if p is not None and self.segments:
            self._mark_behind(now)
        return p

    def _check_behind(self, t: float) -> None:
        """Does the running point still finish by the deadline (from here, at the LUT's rate,
        with the look-ahead)? If not, re-select now, at the step boundary. Checked also after
        the device was late or fell behind: a later budget change may have put it on a slower
        point that must keep up too; only the fastest point has nothing to switch to."""
        if (
            t < self._next_check
            or self._pending is not None
            or self.stop_reason is not None
            or (self.drift is not None and self.drift.active())
        ):
            return
        self._next_check = t + BEHIND_CHECK_S
        p = self._point(self._batch, self._freq)
        if p is None:
            return
        budget = self._derate(self._budget) if self.rail_excess_w > 0 else self._budget
        fastest = choose(
            self.points, self.efficiency, budget, "time", self.infeasible, self.max_batch
        )
        at_fastest = fastest == p  # then there is nothing to switch to, only to record
        if self.done >= 1.0:  # past the shipped estimate: the fastest point, now
            if at_fastest:
                self._mark_behind(t)
            else:
                self._reselect_for_deadline(t, REASON_DEADLINE)
            return
        schedule = self._schedule or [(0.0, self._budget)]
        if self.rail_excess_w > 0:
            schedule = [(at, self._derate(w)) for at, w in schedule]
        f, _ = finish_at(
            p, self.points, self.efficiency, schedule, t, self.done, self.infeasible,
            self.max_batch,
        )  # fmt: skip
        self.last_finish_s = f
        if f <= self.deadline_s * (1.0 + REL_TOL):
            return
        if at_fastest:
            self._mark_behind(t)
            return
        self._reselect_for_deadline(t, REASON_DEADLINE)

    def _derate(self, budget: Optional[float]) -> Optional[float]:
        return None if budget is None else max(budget - self.rail_excess_w, 1e-9)

    def _point(self, batch: int, freq: float) -> Optional[LutPoint]:
        return next((q for q in self.points if (q.batch_size, q.freq_mhz) == (batch, freq)), None)

    def _reselect_for_deadline(self, t: float, reason: str) -> None:
        """At a step boundary: run the deadline point for the remaining work and time. When
        nothing fits once the rail's excess is kept under the budget, the running point (the
        guard's, or the one the budget change chose) stays."""
        p = self._choose(self._budget, t, margin_only=True)
        if p is None:
            if self.rail_excess_w > 0:
                return
            self._stop(self._nothing_fits(self._budget))
            return
        if (p.batch_size, p.freq_mhz) != (self._batch, self._freq):
            self._apply_point(p, t)
            self._open_segment(t, reason)

    def _choose_for_batch(
        self, batch: int, budget: Optional[float], below_mhz: float
    ) -> Optional[LutPoint]:
        """The running batch's fastest point that fits ``budget`` at or under ``below_mhz``."""
        cands = [
            p
            for p in self.points
            if p.batch_size == batch
            and (batch, p.freq_mhz) not in self.infeasible
            and p.freq_mhz <= below_mhz
        ]
        ok = [p for p in cands if fits(p, budget)]
        if ok:
            return min(ok, key=lambda p: (p.time_per_batch_s, p.freq_mhz))
        return min(cands, key=lambda p: p.freq_mhz) if cands else None

    def _nothing_fits(self, budget: Optional[float]) -> str:
        low = lowest_peak(self.points)
        where = (
            "; the lowest profiled peak is {:.2f} W (batch {}, {:g} MHz)".format(
                low.peak_power_w, low.batch_size, low.freq_mhz
            )
            if low is not None
            else ""
        )
        extra = " ({} point(s) excluded by the guard)".format(len(self.infeasible))
        return "no profiled point fits the {} budget{}{}".format(
            _label(budget), where, extra if self.infeasible else ""
        )

    def _apply_point(self, p: LutPoint, t: float) -> None:
        if p.freq_mhz != self._freq or not self.lock_log:
            self._lock(p.freq_mhz, t)
        self._batch = p.batch_size
        set_workload = getattr(self.backend, "set_workload", None)
        if callable(set_workload):
            set_workload(p.batch_size)

    def _lock(self, freq: float, t: float) -> None:
        if self.backend.frequencies():
            self.backend.lock(freq)
            wait = getattr(self.backend, "wait_settled", None)
            if callable(wait):
                wait()  # bounded; samples before the clock arrives never trip the guard
        self._freq = freq
        if self.drift is not None:
            self.drift.reset_unit()
        self.lock_log.append((t, freq))
        self._settle_until = self.now() + self.settle_s
        self._over_since = None

    def _open_segment(self, t: float, reason: str) -> None:
        if self.segments:
            last = self.segments[-1]
            last["end_s"] = t
            if (
                last["batch_size"] == self._batch
                and last["freq_mhz"] == self._freq
                and last["budget_w"] == self._budget
            ):
                return  # nothing changed: keep one segment
        if self.drift is not None and self.drift.due():
            self.drift.begin(self._budget, self.infeasible, self.max_batch)  # a boundary
        seg = {
            "start_s": t,
            "end_s": t,
            "batch_size": self._batch,
            "freq_mhz": self._freq,
            "budget_w": self._budget,
            "reason": reason,
            "energy_j": 0.0,
        }  # type: Dict[str, Any]
        if self.deadline_s is not None:
            seg["done"] = self.done  # the fraction of the target reached when it began
        self.segments.append(seg)

    def _account(self, t: float, watts: float) -> None:
        self.power_samples += 1
        if self._budget is not None and watts > self._budget:
            self.over_samples += 1
        self._power_seen = True
        self._peak_w = watts if self._peak_w is None else max(self._peak_w, watts)
        seg = self.segments[-1] if self.segments else None
        if seg is not None:
            seg["end_s"] = max(seg["end_s"], t)
        if self._last is not None and seg is not None:
            t0, w0 = self._last
            e = max(0.0, t - t0) * (w0 + watts) / 2.0
            self._energy_j += e
            seg["energy_j"] = (seg.get("energy_j") or 0.0) + e
        self._last = (t, watts)

    def _stop(self, why: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = why
            self.status = STATUS_OVER_BUDGET
            self._note("stopping: " + why)

    def _note(self, message: str) -> None:
        self.notes.append(message)
        if self._log is not None:
            self._log(message)

    # -- results --------------------------------------------------------------------------------
    def summary(self) -> Dict[str, Any]:
        """Segments, guard events and the measured totals of the run (call after ``stop``)."""
        drift = self.drift
        with self._mu:
            end = self._end if self._end is not None else self.now()
            segs = [dict(s) for s in self.segments]
            if segs:
                segs[-1]["end_s"] = end
            for s in segs:
                if not self._power_seen:
                    s["energy_j"] = None
            return {
                "status": self.status,
                "stop_reason": self.stop_reason,
                "time_s": end,
                "energy_j": self._energy_j if self._power_seen else None,
                "peak_power_w": self._peak_w,
                "power_samples": self.power_samples,
                "over_budget_samples": self.over_samples,
                "segments": segs,
                "guard_events": [dict(e) for e in self.guard_events],
                "infeasible": sorted([b, f] for b, f in self.infeasible),
                "notes": list(self.notes),
                "budget_source": self.source.describe(),
                "objective": self.objective,
                "deadline_s": self.deadline_s,
                "done_fraction": self.done if self.deadline_s is not None else None,
                "predicted_finish_s": _finite(self.predicted_finish_s),  # inf: never finishes
                "predicted_energy_j": _finite(self.predicted_energy_j),
                "last_predicted_finish_s": _finite(self.last_finish_s),
                "late": self.late if self.deadline_s is not None else None,
                "behind_at_s": self.behind_at_s,
                "rail_excess_w": self.rail_excess_w if self.deadline_s is not None else None,
                "drift_events": [dict(e) for e in drift.events] if drift else [],
                "refreshes": [dict(r) for r in drift.refreshes] if drift else [],
                "refreshed_profile": drift.out_path if drift and drift.refreshes else None,
                "refreshed_profile_csv": drift.refreshed_csv if drift else None,
            }


def train_under_budget(
    backend: Backend,
    model: Any,
    train_set: Any,
    test_set: Any,
    points: List[LutPoint],
    efficiency: Dict[int, float],
    source: BudgetSource,
    ref_batch: int,
    lr: float,
    objective: str = "time",
    guard_window_s: float = 0.2,
    sampler_hz: float = 20.0,
    log: Optional[Callable[[str], None]] = None,
    drift: Optional[Dict[str, Any]] = None,
    deadline_s: Optional[float] = None,
    **train_options: Any,
) -> Tuple[Any, Dict[str, Any]]:
    """Fine-tune under the closed loop; the device is restored on every way out.

    The one entry point shared by ``powerfleet train`` and the agent's ``train`` command:
    ``train_options`` go to ``trainer.train_to_target`` (``batch_size``/``lr`` are the
    learning-rate reference pair there). Returns (TrainResult, ``ClosedLoop.summary()``) with the
    summary's ``status`` set to the trainer's unless the loop stopped the run.

    ``drift``: the drift watch's settings (``driftwatch.DriftWatch`` keywords: ``rows`` and
    ``comments`` of the profile, ``out_path`` for the refreshed profile, ``time_tol``,
    ``power_tol``, ...; without ``rows``, rows of ``points``); None or ``{"off": True}``: no drift
    watch. ``powerfleet train`` and the agent's ``train`` turn it on by default.
    """
    from .trainer import train_to_target

    n_train = _length(train_set)
    watch = None  # type: Optional[DriftWatch]
    opts = dict(drift or {"off": True})
    if not opts.pop("off", False):
        rows = opts.pop("rows", None) or rows_from_points(points)
        watch = DriftWatch(rows, hz=sampler_hz, **opts)
    loop = ClosedLoop(
        backend,
        points,
        efficiency,
        source,
        objective=objective,
        guard_window_s=guard_window_s,
        hz=sampler_hz,
        max_batch=n_train,
        log=log,
        drift=watch,
        deadline_s=deadline_s,
    )
    with loop:
        result = train_to_target(
            model,
            train_set,
            test_set,
            batch_size=ref_batch,
            lr=lr,
            power_read=loop.sampler,
            controller=loop,
            sampler_hz=sampler_hz,
            **train_options,
        )
    summary = loop.summary()
    if summary["status"] is None or result.status == "reached":
        summary["status"] = result.status
    summary["batch_size"] = loop.batch_size
    summary["freq_mhz"] = loop.freq_mhz
    return result, summary


def _length(data: Any) -> Optional[int]:
    tensors = getattr(data, "tensors", None)
    if tensors is not None:
        data = tensors
    if isinstance(data, (tuple, list)) and data:
        return len(data[0])
    try:
        return len(data)
    except TypeError:
        return None
