"""The closed loop on the device: follow the budget, re-select, and guard the rail while training.

Why: a decision taken once at the start trusts two things that change on a real board, the
budget (a schedule, a battery or solar controller writing a file) and the power the profile
promised (temperature, ageing and a different rail drift it upwards). So the loop follows the
budget at every power sample and re-selects (eq. 4) at every change, handing the trainer the new
batch size at its next step; guards the rail's budget statistic (``power_window.py``; over the
budget for longer than the guard window: a lower clock, the point ruled out; at the lowest clock:
stop, status ``over-budget``; a clock the device refuses: stop, status ``error``); records every
stretch at one (batch, frequency, budget) as a segment with its measured energy; with a
``DriftWatch`` re-probes and refreshes the LUT when the board drifts from it; with the
``deadline`` objective runs the deadline point for the remaining work and time; with a learner
chooses again when the learnt samples-to-target move. At a budget
change the clock may only go *down* before the batch switch (``BudgetFollower.move``), so no
moment of the switch runs a point the profile says is over the new budget. Times are seconds
since ``start()`` on the monotonic clock; the schedule is read on the same scale. Python 3.6
compatible, stdlib only.

The state is split by who owns it: ``BudgetFollower`` and ``Guard`` (``budgetwatch.py``),
``DeadlineReselector`` (``deadline_reselect.py``), ``LearnerHook`` (``loop_learning.py``),
``DriftWatch`` (``driftwatch.py``), ``SegmentLog`` (segments, energy, the budget statistic, time
above the budget: ``segments.py``), ``RunningPoint`` (the clock, the batch, pacing:
``running.py``). This module coordinates: it holds the LUT, the switch pending at the next step,
the notes and the status, hands the parts what they decide on (one ``table.Table``) and applies
what they return. ``underbudget.train_under_budget`` trains under it."""

import contextlib
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

from fleet.agent.devices.base import Backend, DeviceError
from fleet.agent.loop.budgetwatch import BudgetFollower, Guard, guard_text
from fleet.agent.loop.deadline_reselect import deadline_fields, deadline_for
from fleet.agent.loop.driftwatch import DriftWatch, drift_fields, drift_text
from fleet.agent.loop.loop_learning import REASON_LEARNED, LearnerHook
from fleet.agent.loop.loop_plan import LoopHooks, LoopParts, LoopPlan
from fleet.agent.loop.running import RunningPoint
from fleet.agent.loop.segments import (
    REASON_BUDGET,
    REASON_DEADLINE,
    REASON_GUARD,
    REASON_REFRESH,
    REASON_REPROBE,
    REASON_START,
    REASON_SWITCH,
    SegmentLog,
    merge_record,
)
from fleet.agent.loop.table import Table
from fleet.agent.measure.sampler import PowerSampler, budget_window, sampling_note, sensor_hz
from fleet.method.agent_records import STATUS_ERROR, STATUS_OVER_BUDGET
from fleet.method.point import Point
from fleet.method.selection import ChooseError, lut_from_rows

LOOP_OBJECTIVES = ("time", "energy", "deadline")


class ClosedLoopError(RuntimeError):
    """The loop cannot start (no point fits the first budget); one line."""


class ClosedLoop(object):
    """Budget-following, guard-protected control of one device for one training run.

    Use as a context manager around the training; ``sampler`` is the running ``PowerSampler``
    to hand the trainer (one thread reads the rail for both), ``before_step()`` is the trainer's
    per-step hook. Three records (``loop_plan.py``): ``plan`` what the request decided (its
    ``drift``/``learn`` keywords are not read here: the run builds them into ``parts``),
    ``parts`` the built drift watch, learner and batch cap, ``hooks`` the clock, sleep, log,
    sampling rate and whether the device is given back when the block ends.
    """

    def __init__(
        self,
        backend: Backend,
        plan: LoopPlan,
        parts: Optional[LoopParts] = None,
        hooks: Optional[LoopHooks] = None,
    ) -> None:
        parts = parts if parts is not None else LoopParts()
        hooks = hooks if hooks is not None else LoopHooks()
        objective, points, efficiency = plan.objective, plan.points, plan.efficiency
        if objective not in LOOP_OBJECTIVES:
            known = ", ".join(LOOP_OBJECTIVES)
            raise ClosedLoopError("objective must be one of {}, got {!r}".format(known, objective))
        try:
            deadline = deadline_for(objective, plan.deadline_s, points, efficiency, self._note)
        except ChooseError as exc:
            raise ClosedLoopError(str(exc)) from None
        self.backend = backend
        self.objective = objective
        self.points = list(points)  # the LUT in force (a drift refresh replaces it)
        self.max_batch = parts.max_batch
        hz = float(hooks.hz)
        self.hz = sensor_hz(backend, hz)  # never faster than the sensor converts
        self.restore_on_exit = hooks.restore_on_exit
        self._clock = hooks.clock
        self._log = hooks.log
        self._mu = threading.RLock()
        self.notes = []  # type: List[str]
        self.status = None  # type: Optional[str]
        self.stop_reason = None  # type: Optional[str]
        self.follower = BudgetFollower(plan.source)
        self.guard = Guard(plan.guard_window_s)
        self.deadline = deadline
        self.learning = LearnerHook(parts.learner, efficiency, self.deadline is not None)
        self.drift = parts.drift
        self.log = SegmentLog(*budget_window(backend, self.hz))
        self.running = RunningPoint(
            backend, hooks.settle_s, self.now, plan.pace, hooks.clock, hooks.sleep
        )
        self._t0 = 0.0
        self._pending = None  # type: Optional[Point]  # the switch at the next step
        self._pending_reason = REASON_SWITCH
        self.sampler = PowerSampler(  # stamped on the loop's clock, as the steps are
            backend.read_power_w, hz=self.hz, clock=hooks.clock, on_sample=self.on_sample
        )
        self.power_unavailable = getattr(backend, "power_unavailable", None)  # type: Optional[str]
        said = sampling_note(backend, hz)  # no watts: the schedule is still followed
        if said is not None:
            self._note(said)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ClosedLoop":
        """Select for the budget at 0 s, lock, and start watching the rail."""
        with self._mu:
            self._t0 = self._clock()
            budget = self.follower.start()
            p = self._choose(budget, 0.0)
            if p is None:
                raise ClosedLoopError(self.table().nothing_fits(budget))
            self._apply_point(p, 0.0)
            self._open(0.0, REASON_START)
        self.sampler.start()
        return self

    def stop(self) -> None:
        """Stop watching and close the last segment (idempotent)."""
        self.sampler.stop()
        with self._mu:
            end = self.now()
            if self.log.end(end) and self.drift is not None:
                try:
                    self.drift.finish(end)
                except (OSError, ValueError) as exc:
                    self._note("drift: refreshed profile not written: {}".format(exc))
        self.running.release()

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
        return self.running.batch

    @property
    def freq_mhz(self) -> float:
        return self.running.freq

    @property
    def budget_w(self) -> Optional[float]:
        return self.follower.budget

    @property
    def noise_tracker(self) -> Any:
        """What the trainer feeds every step's gradients (``device`` learning), or None."""
        return self.learning.noise_tracker

    @property
    def segments(self) -> List[Dict[str, Any]]:
        return self.log.segments

    @property
    def guard_events(self) -> List[Dict[str, Any]]:
        return self.guard.events

    @property
    def done(self) -> float:
        """The deadline objective's fraction of the target reached (0 for another)."""
        return self.deadline.done if self.deadline is not None else 0.0

    @property
    def late(self) -> bool:
        """No point met the deadline at the start: the device ran its fastest."""
        return self.deadline.late if self.deadline is not None else False

    def before_step(self) -> Tuple[int, bool]:
        """(batch size for the next step, whether to stop). Applies a pending batch switch."""
        self.running.step_began()
        drift, deadline = self.drift, self.deadline
        if drift is not None:
            drift.step_started(self.now())
        asked = deadline is not None and deadline.requested()
        if self._pending is None and self.stop_reason is None and not asked:
            if drift is None or not drift.active():
                return self.running.batch, False  # the common case: no lock taken
        with self._mu, self._refusal_stops():
            self._begin_step()
        return self.running.batch, self.stop_reason is not None

    def _begin_step(self) -> None:
        """(Lock held.) The pending switch, the deadline's re-selection, the drift watch's next
        probe; each may stop the run instead."""
        drift, deadline = self.drift, self.deadline
        if self.stop_reason is None:
            p = self._pending
            self._pending = None
            if p is not None and (p.batch_size, p.freq_mhz) in self.guard.infeasible:
                p = self._choose(self.budget_w)  # the guard struck in between: choose again
                if p is None:
                    self._stop(self.table().nothing_fits(self.budget_w))
                    return
            reason, self._pending_reason = self._pending_reason, REASON_SWITCH
            if p is not None:
                self._switch(p, self.now(), reason)
            elif deadline is not None and deadline.requested():
                self._reselect_for_deadline(self.now(), deadline.take_request())
        if self.stop_reason is None and drift is not None and drift.active():
            self._drift_step(drift)

    def resumed(self, samples: int, batch: Optional[int]) -> None:
        """The trainer resumed a checkpoint that holds ``samples``: they count towards the target
        (deadline objective), and the next step re-selects for the work and time left. The
        checkpoint does not say at which batch sizes they ran; its running batch prices them."""
        if self.deadline is None or samples <= 0:
            return
        with self._mu:
            n = self.learning.efficiency.get(batch or self.running.batch)
            if n:
                self.deadline.resumed(samples, n)

    def carry(self, prior: Dict[str, Any]) -> None:
        """The trainer resumed a checkpoint: ``prior`` is the record of the calls before this one
        (its ``history()``); the summary and the next ``history()`` are the whole run's. What the
        guard ruled out is not carried: a new call measures the rail afresh."""
        with self._mu:
            self.log.carry(prior)
            why = self.learning.restore(self.log.prior)
            if why is not None:
                self._note(why)

    def evaluated(self, samples: int, accuracy: float) -> None:
        """The trainer evaluated: the learner learns, and when its belief moved the loop chooses
        again with it (``loop_learning.py``)."""
        with self._mu:
            if not self.learning.evaluated(accuracy, self.now()):
                return
            if self.deadline is not None:  # the deadline point for the work left, next step
                self.deadline.relearnt(self.learning.done())
                return
            if self._pending is not None or self.stop_reason is not None:
                return  # a budget change is being applied: it chooses with the new belief anyway
            running = self.running.key()
            p = self.learning.switch(self.table(), self.budget_w, self.objective, running)
            if p is not None:
                self._pending, self._pending_reason = p, REASON_LEARNED

    def reached(self) -> None:
        """The trainer reached the target (the learner knows the count at the running batch)."""
        with self._mu:
            self.learning.reached()

    def history(self) -> Dict[str, Any]:
        """The run's record up to now, which the trainer writes into every checkpoint; a learning
        loop's learner state rides along (the latest, not merged: it is cumulative itself)."""
        with self._mu:
            record = self._record()[1]
            if self.learning.active():
                record["learning"] = self.learning.state()
            return record

    def after_step(self) -> None:
        """The trainer finished a step: pace it; then, under one hold of the lock, count the step,
        read the budget (every decision here is made under the budget in force now), time it."""
        if self.running.pace:
            self.running.step_ended(self.table().point(*self.running.key()))
        deadline, drift = self.deadline, self.drift
        with self._mu, self._refusal_stops():
            if self.learning.active():  # counted first: a refused clock below ends the block
                self.learning.stepped(self.running.batch)
            if deadline is not None:
                deadline.stepped(self.running.batch, self.learning.efficiency)
            if self.log.end_s is None:
                self._follow_budget(self.now())
            if deadline is not None:
                t, table, ahead = self.now(), self.table(), self.follower.ahead
                busy = self._pending is not None or self.stop_reason is not None
                busy = busy or (drift is not None and drift.active())
                if deadline.behind(table, ahead, self.budget_w, t, self.running.key(), busy):
                    self._reselect_for_deadline(t, REASON_DEADLINE)
            if drift is not None:
                event = drift.step_done(self.now(), self.running.key(), self.running.settle_until)
                if event is not None:
                    self._note(drift_text(event))

    def _drift_step(self, drift: DriftWatch) -> None:
        """Run the refresh the drift watch began: the next re-probe point, or the refresh."""
        p = drift.next_probe(self.table(), self.budget_w)
        if p is not None:
            self._switch(p, self.now(), REASON_REPROBE)
            return
        if not drift.ready():
            return
        t = self.now()
        rows = drift.refresh(t)
        if self.deadline is not None:
            self.deadline.rail_refreshed()
        try:
            self.points = lut_from_rows(rows, "refreshed profile")
        except ChooseError as exc:
            self._note("drift: refreshed table unusable, keeping the old one: {}".format(exc))
        p = self._choose(self.budget_w, t)
        if p is None:
            self._stop(self.table().nothing_fits(self.budget_w))
            return
        if not self.running.runs(p):
            self._apply_point(p, t)
        self._open(t, REASON_REFRESH)
        self._note(drift.refreshed_text(p.batch_size, p.freq_mhz))

    # -- the watcher (sampler thread) -----------------------------------------------------------
    def on_sample(self, t_abs: float, watts: Optional[float]) -> None:
        """The sampler's callback (its thread) at every reading: follow the budget, count the
        energy, feed the drift watch, guard the rail."""
        with self._mu, self._refusal_stops():
            if self.log.end_s is not None:
                return
            t = t_abs - self._t0
            # the reading closes a stretch run under the budget in force until now
            settled = t >= self.running.settle_until
            stat = None if watts is None else self.log.account(t, watts, self.budget_w, settled)
            self._follow_budget(t)
            if stat is not None:  # the guard and drift judge the budget statistic
                if self.drift is not None:
                    self.drift.on_sample(stat)
                self._guard(t, stat)

    def _follow_budget(self, t: float) -> None:
        """Read the budget at ``t``; re-select when it changed. Samples and step boundaries read
        it: a boundary just after a schedule step decides under the new budget, not the last
        sample's (50 ms ago, or later under load)."""
        if self.follower.poll(t, self.stop_reason is not None):
            self._budget_changed(t)

    def _budget_changed(self, t: float) -> None:
        """Re-select for the new budget, lock (down first) and open a segment; a new batch size
        waits for the step boundary (``_pending``, applied by ``before_step``)."""
        budget = self.budget_w
        self.guard.reset()
        p = self._choose(budget, t)
        table = self.table()
        if p is None:
            self._stop(table.nothing_fits(budget))
        lock, pending = self.follower.move(p, table, self.running.batch, self.running.freq)
        if lock is not None:
            self._lock(lock, t)
        if p is not None:
            self._pending = pending
        self._open(t, REASON_BUDGET)

    def _guard(self, t: float, watts: float) -> None:
        """The guard's verdict on a reading: step down (the deadline re-selects at the next step
        without the points ruled out, keeping the rail's measured excess), or stop."""
        b, f = self.running.batch, self.running.freq
        event = self.guard.sample(
            t, watts, self.budget_w, self.running.settle_until, (b, f), self.points,
            self.stop_reason is not None,
        )  # fmt: skip
        if event is None:
            return
        if event["to_mhz"] is None:
            self._stop(guard_text(event))
            return
        self._lock(event["to_mhz"], t)
        pending = self._pending
        if pending is not None and (pending.batch_size, pending.freq_mhz) in self.guard.infeasible:
            self._pending = None
        if self.deadline is not None:  # at the next step: the deadline point without these
            self.deadline.guarded(self.table().point(b, f), watts)
        self._open(t, REASON_GUARD)
        self._note(guard_text(event))

    # -- helpers (hold self._mu) -----------------------------------------------------------------
    def table(self) -> Table:
        """The points the parts may choose among now."""
        return Table(self.points, self.learning.efficiency, self.guard.infeasible, self.max_batch)

    def _choose(
        self, budget: Optional[float], t: Optional[float] = None, margin_only: bool = False
    ) -> Optional[Point]:
        """Eq. 4 (time, energy) or the deadline point at ``t`` (``deadline_reselect.py``)."""
        if self.deadline is None:
            return self.table().choose(budget, self.objective)
        return self.deadline.choose(
            self.table(), self.follower.ahead, budget, self.now() if t is None else t,
            self.log.started, margin_only,
        )  # fmt: skip

    def _reselect_for_deadline(self, t: float, reason: str) -> None:
        """At a step boundary: run the deadline point for the remaining work and time. When
        nothing fits once the rail's excess is kept under the budget, the running point (the
        guard's, or the one the budget change chose) stays."""
        p = self._choose(self.budget_w, t, margin_only=True)
        if p is not None:
            self._switch(p, t, reason)
        elif not (self.deadline is not None and self.deadline.rail_excess_w > 0):
            self._stop(self.table().nothing_fits(self.budget_w))

    def _switch(self, p: Point, t: float, reason: str) -> None:
        """Run ``p`` from ``t`` in a new segment (``reason``), unless it runs already."""
        if not self.running.runs(p):
            self._apply_point(p, t)
            self._open(t, reason)

    def _open(self, t: float, reason: str) -> None:
        """A segment for the point and budget now (unless nothing changed); a new segment is a
        boundary, where a due drift refresh begins."""
        done = self.deadline.done if self.deadline is not None else None
        if not self.log.open(t, self.running.batch, self.running.freq, self.budget_w, reason, done):
            return
        drift = self.drift
        if drift is not None and drift.due():
            drift.begin(self.budget_w, self.guard.infeasible, self.max_batch)

    def _apply_point(self, p: Point, t: float) -> None:
        if self.running.apply(p, t):
            self._locked()

    def _lock(self, freq: float, t: float) -> None:
        self.running.lock(freq, t)
        self._locked()

    def _locked(self) -> None:
        """A new clock: the drift watch's unit, the guard's window and the budget statistic's
        average (over this point's readings only, as a profile's peak is) start again."""
        if self.drift is not None:
            self.drift.reset_unit()
        self.guard.reset()
        self.log.window.reset()

    @contextlib.contextmanager
    def _refusal_stops(self) -> Iterator[None]:
        """A clock the device refuses (permission lost, a node gone) stops the run, whoever
        asked for it (budget change, guard, switch, deadline, drift): the trainer gets a stop
        at its next step, not an exception mid-training; the exit paths restore the device."""
        try:
            yield
        except DeviceError as exc:
            self._stop("could not change the clock: {}".format(exc), STATUS_ERROR)

    def _stop(self, why: str, status: str = STATUS_OVER_BUDGET) -> None:
        if self.stop_reason is None:
            self.stop_reason = why
            self.status = status
            self._note("stopping: " + why)

    def _note(self, message: str) -> None:
        self.notes.append(message)
        if self._log is not None:
            self._log(message)

    def _record(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:  # (this call's, the run's)
        events = self.drift.events if self.drift is not None else []
        this = self.log.this_call(self.now(), self.guard.events, events)
        return this, merge_record(self.log.prior, this)

    # -- results --------------------------------------------------------------------------------
    def summary(self) -> Dict[str, Any]:
        """Segments, guard events and the measured totals of the run (call after ``stop``); a
        resumed run's (``SegmentLog.prior``) come first (``segments`` module docstring)."""
        with self._mu:
            this, run = self._record()
            out = {"status": self.status, "stop_reason": self.stop_reason}  # type: Dict[str, Any]
            out.update(self.log.totals(this, run))
            out["infeasible"] = sorted([b, f] for b, f in self.guard.infeasible)
            out["notes"] = list(self.notes)
            out["budget_source"] = self.follower.describe()
            out["objective"] = self.objective
            out.update(deadline_fields(self.deadline))
            out.update(drift_fields(self.drift, run["drift_events"]))
            out["learning"] = self.learning.summary()
            return out
