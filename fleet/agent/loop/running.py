"""The point the device runs in the closed loop: the clock locked on the backend and the batch
size the trainer runs.

Why a part of its own: every decision of the loop (a budget change, a guard step-down, a deadline
re-selection, a learnt switch, a drift re-probe) ends in the same act on the device: lock a clock
(waiting until the backend says it arrived), tell a virtual board which batch runs, remember the
lock and when the clock will have settled (readings before that never trip the guard nor time a
drift unit). ``RunningPoint`` owns that, and the pacing of a rehearsal: with ``pace`` every step
lasts at least the LUT's time at its point, so a host faster than the board lives the board's
timeline. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Callable, List, Optional, Tuple

from fleet.method.point import Point


class RunningPoint(object):
    """``batch`` and ``freq`` running now, ``lock_log`` ((t_s, MHz) of every lock),
    ``settle_until`` (loop time when the last lock has settled). ``now``: the loop's time;
    ``clock``/``sleep``: the monotonic clock and the sleep pacing uses."""

    def __init__(
        self, backend: Any, settle_s: float, now: Callable[[], float], pace: bool,
        clock: Callable[[], float], sleep: Callable[[float], None],
    ) -> None:  # fmt: skip
        self.backend = backend
        self.settle_s = float(settle_s)
        self.pace = bool(pace)
        self.batch = 0
        self.freq = 0.0
        self.lock_log: List[Tuple[float, float]] = []
        self.settle_until = 0.0
        self._now = now
        self._clock = clock
        self._sleep = sleep
        self._step_t = None  # type: Optional[float]  # clock() when the running step began

    def key(self) -> Tuple[int, float]:
        return self.batch, self.freq

    def runs(self, p: Point) -> bool:
        """``p`` is the point running now."""
        return (p.batch_size, p.freq_mhz) == (self.batch, self.freq)

    def lock(self, freq: float, t: float) -> None:
        """Lock ``freq`` at loop time ``t`` (bounded wait until it arrived)."""
        if self.backend.frequencies():
            self.backend.lock(freq)
            wait = getattr(self.backend, "wait_settled", None)
            if callable(wait):
                wait()  # bounded; samples before the clock arrives never trip the guard
        self.freq = freq
        self.lock_log.append((t, freq))
        self.settle_until = self._now() + self.settle_s

    def apply(self, p: Point, t: float) -> bool:
        """Run ``p`` from ``t``; True when its clock was locked (a new clock, or the first)."""
        locked = p.freq_mhz != self.freq or not self.lock_log
        if locked:
            self.lock(p.freq_mhz, t)
        self.batch = p.batch_size
        self._workload(p.batch_size)
        return locked

    def release(self) -> None:
        """The run is over: a virtual board runs no batch any more."""
        self._workload(None)

    def _workload(self, batch: Optional[int]) -> None:
        set_workload = getattr(self.backend, "set_workload", None)
        if callable(set_workload):
            set_workload(batch)

    def step_began(self) -> None:
        if self.pace:
            self._step_t = self._clock()

    def step_ended(self, p: Optional[Point]) -> None:
        """(With ``pace``.) Hold the step until the LUT's ``time_per_batch_s`` at ``p`` (the
        running point) has passed since it began. Why: on a board a step takes what the profile
        says; a virtual board or a rehearsal on a faster host would otherwise run the same
        samples in less time, and every time-based behaviour (a schedule step, a deadline, a
        live budget file) would be lived on this CPU's clock instead of the device's. A slower
        host is not sped up."""
        began = self._step_t
        if began is None or p is None:
            return
        left = p.time_per_batch_s - (self._clock() - began)
        if left > 0:
            self._sleep(left)
