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

Where the parts live: this module is the loop itself and the trainer's hooks (``before_step``,
``after_step``, ``resumed``); what it does at each power sample is ``budgetwatch.py`` (follow
the budget, guard the rail), the deadline objective's re-selection is ``deadline_reselect.py``,
the record of the run (segments, energy, the summary) is ``segments.py``, and the entry point
that trains under the loop is ``underbudget.train_under_budget``.
"""

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from fleet.agent.devices.base import Backend, DeviceError
from fleet.agent.learning.efficiency_learner import EfficiencyLearner
from fleet.agent.loop import loop_learning
from fleet.agent.loop.budgetwatch import follow_budget, guard, nothing_fits
from fleet.agent.loop.deadline_reselect import (
    check_behind,
    choose_deadline_point,
    reselect_for_deadline,
)
from fleet.agent.loop.driftwatch import DriftWatch
from fleet.agent.loop.loop_learning import make_tracker
from fleet.agent.loop.segments import (
    REASON_DEADLINE,
    REASON_REFRESH,
    REASON_REPROBE,
    REASON_START,
    REASON_SWITCH,
    account,
    loop_history,
    loop_summary,
    open_segment,
)
from fleet.agent.measure.sampler import PowerSampler, sensor_hz
from fleet.method.budget import BudgetSource, ScheduleBudget
from fleet.method.deadline import check_deadline_s, check_power
from fleet.method.selection import ChooseError, LutPoint, choose, fits, lut_from_rows

STATUS_OVER_BUDGET = "over-budget"
LOOP_OBJECTIVES = ("time", "energy", "deadline")


class ClosedLoopError(RuntimeError):
    """The loop cannot start (no point fits the first budget); one line."""


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
        pace: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        learner: Optional[EfficiencyLearner] = None,
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
        # Rehearsal: every step lasts at least the LUT's time at the point that ran it (see
        # ``_pace``), so a host faster than the board lives the board's timeline.
        self.pace = bool(pace)
        self._sleep = sleep
        self._step_t = None  # type: Optional[float]  # clock() when the running step began
        self.points = list(points)
        self.shipped = dict(efficiency)  # what the coordinator shipped (the learner's prior)
        self.efficiency = dict(efficiency)  # what the loop chooses with (learnt, when learning)
        # online correction of the samples-to-target (``loop_learning.py``): the learner, and
        # the noise tracker the trainer feeds with every step's gradients (``device`` learning)
        self.learner = learner
        self.noise_tracker = make_tracker(learner)
        self._pending_reason = REASON_SWITCH
        self._reselect_reason = REASON_DEADLINE
        self.source = source
        self.objective = objective
        self.guard_window_s = float(guard_window_s)
        self.settle_s = float(settle_s)
        self.hz = sensor_hz(backend, float(hz))  # never faster than the sensor converts
        self.max_batch = max_batch
        self._clock = clock
        self.restore_on_exit = restore_on_exit
        self._log = log
        self._mu = threading.RLock()
        self.infeasible: Set[Tuple[int, float]] = set()  # (batch, MHz) the guard ruled out
        self.segments = []  # type: List[Dict[str, Any]]
        self.guard_events = []  # type: List[Dict[str, Any]]
        self.notes = []  # type: List[str]
        self.status = None  # type: Optional[str]
        self.stop_reason = None  # type: Optional[str]
        self.lock_log = []  # type: List[Tuple[float, float]]  # (t_s, MHz) of every lock
        self.prior = {}  # type: Dict[str, Any]  # the record of a resumed run's earlier calls
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
        self.sampler = PowerSampler(backend.read_power_w, hz=self.hz, on_sample=self._on_sample)
        self.power_unavailable = getattr(backend, "power_unavailable", None)  # type: Optional[str]
        if self.power_unavailable:  # the schedule is still followed: samples tick without watts
            self._note(
                "power is not measured ({}): the budget is met from the recorded profile only; "
                "the runtime guard is off".format(self.power_unavailable)
            )
        elif self.hz < float(hz):
            self._note(
                "sampling power at {:.3g} Hz, not {:g}: the sensor refreshes every {:.3g} "
                "ms".format(self.hz, float(hz), 1000.0 / self.hz)
            )

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ClosedLoop":
        """Select for the budget at 0 s, lock, and start watching the rail."""
        with self._mu:
            self._t0 = self._clock()
            self._budget = self.source.budget_at(0.0)
            p = self._choose(self._budget, 0.0)
            if p is None:
                raise ClosedLoopError(nothing_fits(self, self._budget))
            self._apply_point(p, 0.0)
            open_segment(self, 0.0, REASON_START)
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
        if self.pace:
            self._step_t = self._clock()
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
                    self._stop(nothing_fits(self, self._budget))
                    return self._batch, True
            reason, self._pending_reason = self._pending_reason, REASON_SWITCH
            if p is not None and (p.batch_size != self._batch or p.freq_mhz != self._freq):
                t = self.now()
                self._apply_point(p, t)
                open_segment(self, t, reason)
            if self._reselect and p is None:
                self._reselect = False
                why, self._reselect_reason = self._reselect_reason, REASON_DEADLINE
                reselect_for_deadline(self, self.now(), why)
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

    def carry(self, prior: Dict[str, Any]) -> None:
        """The trainer resumed a checkpoint: ``prior`` is the record of the calls before this one
        (``history()`` as that checkpoint saved it); the summary and the next ``history()`` are
        the whole run's (``segments.merge_record``). What the guard ruled out is not carried: a
        new call measures the rail afresh."""
        with self._mu:
            self.prior = dict(prior or {})
            loop_learning.restore(self, self.prior)

    def evaluated(self, samples: int, accuracy: float) -> None:
        """The trainer evaluated: the learning curve's point (``loop_learning.py``)."""
        with self._mu:
            loop_learning.evaluated(self, samples, accuracy)

    def history(self) -> Dict[str, Any]:
        """The run's record up to now, which the trainer writes into every checkpoint."""
        return loop_history(self)

    def after_step(self) -> None:
        """The trainer finished a step: count it towards the target (deadline objective), and
        the drift watch times it (see ``driftwatch.py``)."""
        if self.pace:
            self._pace()
        if self.learner is not None:
            with self._mu:
                loop_learning.stepped(self)
        if self.deadline_s is not None:
            with self._mu:
                n = self.efficiency.get(self._batch)
                if n:
                    self.done += self._batch / n
                check_behind(self, self.now())
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
        assert drift is not None  # called only while the drift watch runs
        by_key = dict(((p.batch_size, p.freq_mhz), p) for p in self.points)
        key = drift.probe_point()
        while key is not None:
            p = by_key.get(key)
            if p is not None and key not in self.infeasible and fits(p, self._budget):
                if key != (self._batch, self._freq):
                    t = self.now()
                    self._apply_point(p, t)
                    open_segment(self, t, REASON_REPROBE)
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
            self._stop(nothing_fits(self, self._budget))
            return
        if (p.batch_size, p.freq_mhz) != (self._batch, self._freq):
            self._apply_point(p, t)
        open_segment(self, t, REASON_REFRESH)
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
                follow_budget(self, t)
                if watts is not None:
                    account(self, t, watts)
                    if self.drift is not None:
                        self.drift.on_sample(watts)
                    guard(self, t, watts)
            except DeviceError as exc:  # a refused lock: stop rather than run unguarded
                self._stop("could not change the clock: {}".format(exc))

    # -- helpers (hold self._mu) -----------------------------------------------------------------
    def _choose(
        self, budget: Optional[float], t: Optional[float] = None, margin_only: bool = False
    ) -> Optional[LutPoint]:
        """Eq. 4 (time, energy) or the deadline point at ``t`` (``deadline_reselect.py``). After a
        guard event the deadline keeps the rail's measured excess under the budget; when nothing
        fits that way, the plain budget (the guard watches), unless ``margin_only``: then None."""
        if self.deadline_s is None:
            return choose(
                self.points, self.efficiency, budget, self.objective, self.infeasible,
                self.max_batch,
            )  # fmt: skip
        return choose_deadline_point(self, budget, self.now() if t is None else t, margin_only)

    def _pace(self) -> None:
        """Hold the step until the LUT's ``time_per_batch_s`` at the running point has passed
        since it began. Why: on a board a step takes what the profile says; a virtual board or a
        rehearsal on a faster host would otherwise run the same samples in less time, and every
        time-based behaviour (a schedule step, a deadline, a live budget file) would be lived
        on this CPU's clock instead of the device's. A slower host is not sped up."""
        began = self._step_t
        p = self._point(self._batch, self._freq)
        if began is None or p is None:
            return
        left = p.time_per_batch_s - (self._clock() - began)
        if left > 0:
            self._sleep(left)

    def _point(self, batch: int, freq: float) -> Optional[LutPoint]:
        return next((q for q in self.points if (q.batch_size, q.freq_mhz) == (batch, freq)), None)

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
        """Segments, guard events and the measured totals of the run (call after ``stop``);
        see ``segments.loop_summary``."""
        return loop_summary(self)
