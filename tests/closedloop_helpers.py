"""A board whose power really follows the locked clock, for the closed-loop tests and benchmark.

Power at (batch b, clock f) is ``idle + k * f * (1 + b / 64) + drift``; ``drift_w`` can be set
at any moment (another thread, a timer) to play a rail that runs hotter than its profile. Every
lock is logged with its monotonic time so tests can assert the clock over time.
"""

import threading
import time

from fleet.agent.devices.base import Backend

FREQS = [200.0, 400.0, 600.0, 800.0]
BATCHES = [8, 16, 32]
IDLE_W = 1.0
K_W_PER_MHZ = 0.004
STEP_S = 0.015  # a board-like training step; the LUT says 5-15 ms
EFF = {8: 4000.0, 16: 4000.0, 32: 4400.0}  # samples to the target: b=32 wins where its clock fits


class FakeClock:
    """The loop's monotonic seconds, moved only by the test (a step "computes") or by the loop's
    own sleep: what the loop decides then depends on these times alone, never on the host."""

    def __init__(self) -> None:
        self.t = 100.0
        self.slept = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


def model_power(b, f):
    return IDLE_W + K_W_PER_MHZ * f * (1.0 + b / 64.0)


def model_time(b, f):
    """Seconds per step: bigger batches are more efficient per sample, faster clocks faster."""
    return (0.002 + 0.0004 * b) * 800.0 / f


def lut_rows():
    rows = []
    for b in BATCHES:
        for f in FREQS:
            p = model_power(b, f)
            rows.append(
                {
                    "batch_size": b,
                    "freq_mhz": f,
                    "time_per_batch_s": model_time(b, f),
                    "peak_power_w": p + 0.05,
                    "mean_power_w": p,
                }
            )
    return rows


class FollowBackend(Backend):
    name = "follow"

    def __init__(self, freqs=None):
        self._freqs = list(freqs or FREQS)
        self.locked = None
        self.batch = None
        self.drift_w = 0.0
        self.lock_log = []  # (monotonic time, MHz)
        self.restores = 0
        self._mu = threading.Lock()

    def frequencies(self):
        return list(self._freqs)

    def lock(self, freq_mhz):
        with self._mu:
            self.locked = float(freq_mhz)
            self.lock_log.append((time.monotonic(), float(freq_mhz)))

    def restore(self):
        with self._mu:
            if self.locked is not None:
                self.restores += 1
            self.locked = None

    def set_workload(self, batch):
        self.batch = batch

    def read_power_w(self):
        f = self.locked if self.locked is not None else max(self._freqs)
        b = self.batch or 0
        return model_power(b, f) + self.drift_w

    def locked_at(self, t):
        """The clock locked at monotonic time t (None before the first lock)."""
        cur = None
        for when, f in self.lock_log:
            if when <= t:
                cur = f
        return cur


def under_budget(backend, model, train_set, test_set, points, efficiency, source, ref_b, lr, **kw):
    """``train_under_budget`` with the tests' keywords split into its records: the trainer
    plan's fields, the loop plan's fields, the hooks' fields and the call's own (device,
    checkpoint_path, log)."""
    from fleet.agent.loop.loop_plan import LoopPlan
    from fleet.agent.loop.underbudget import train_under_budget
    from fleet.agent.training.plan import TrainHooks, TrainPlan

    loop = {k: kw.pop(k) for k in list(kw) if k in LoopPlan._fields}
    hooks = TrainHooks(**{k: kw.pop(k) for k in list(kw) if k in TrainHooks._fields})
    call = {k: kw.pop(k) for k in ("device", "checkpoint_path", "log") if k in kw}
    plan = TrainPlan(ref_b, lr, **kw)
    loop_plan = LoopPlan(points, efficiency, source, **loop)
    return train_under_budget(
        backend, model, train_set, test_set, plan, loop_plan, hooks=hooks, **call
    )


def slow_step(x, gen):
    """A board-like step (``STEP_S``) as an ``augment`` hook."""
    time.sleep(STEP_S)
    return x


def at_step(n, action):
    """An ``augment`` hook (each step slept as ``slow_step``) that runs ``action`` once, at
    the ``n``-th step: paced by training, not by a timer thread, which a loaded host may wake
    after the run has ended (or before its first step). The run's own augment: a resumed run
    passes the same one (its checkpoint names it)."""
    count = [0]

    def augment(x, gen):
        count[0] += 1
        if count[0] == n:
            action()
        return slow_step(x, gen)

    return augment
