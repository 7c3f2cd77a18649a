"""PowerSampler: the statistics on hand-computed sequences; the thread's pacing and overhead on
clocks the test holds (exact), and the thread on the real clock (bounds that hold at any speed)."""

import threading
import time
import types

import pytest

import fleet.agent.measure.sampler as sampler_module
from fleet.agent.measure.sampler import PowerSampler, WindowStats, idle_power, stats_from_samples


def wait_for(predicate, timeout=60.0):
    """Poll until predicate() holds: a hang guard (each wait here is for tens of ms of work)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"sampler did not get there in {timeout} s"
        time.sleep(0.01)


def test_stats_hand_computed_irregular():
    # Intervals 1 s, 0.5 s, 2 s; trapezoids: (10+20)/2*1 + (20+20)/2*0.5 + (20+5)/2*2 = 50 J
    s = stats_from_samples([0.0, 1.0, 1.5, 3.5], [10.0, 20.0, 20.0, 5.0])
    assert s.peak_w == 20.0
    assert s.energy_j == pytest.approx(50.0)
    assert s.duration_s == pytest.approx(3.5)
    assert s.mean_w == pytest.approx(50.0 / 3.5)  # time-weighted, not (10+20+20+5)/4
    assert s.n_samples == 4


def test_stats_time_weighting_differs_from_arithmetic_mean():
    # A long low stretch then a burst of closely spaced high samples.
    s = stats_from_samples([0.0, 9.0, 9.1, 9.2, 9.3], [2.0, 2.0, 10.0, 10.0, 10.0])
    assert s.energy_j == pytest.approx(18.0 + 0.6 + 1.0 + 1.0)
    assert s.mean_w == pytest.approx(20.6 / 9.3)
    assert s.mean_w < sum([2.0, 2.0, 10.0, 10.0, 10.0]) / 5


def test_stats_constant_power_energy_is_power_times_time():
    times = [0.05 * i for i in range(21)]
    s = stats_from_samples(times, [7.5] * 21)
    assert s.energy_j == pytest.approx(7.5)
    assert s.mean_w == pytest.approx(7.5) and s.peak_w == 7.5


def test_stats_degenerate_cases():
    assert stats_from_samples([], []) == WindowStats(None, None, 0.0, 0, 0.0)
    one = stats_from_samples([3.0], [4.0])
    assert one == WindowStats(4.0, 4.0, 0.0, 1, 0.0)
    same_instant = stats_from_samples([1.0, 1.0], [2.0, 4.0])
    assert same_instant.mean_w == 3.0 and same_instant.energy_j == 0.0
    # None readings are skipped; the trapezoid spans the gap they leave.
    gap = stats_from_samples([0.0, 1.0, 2.0], [4.0, None, 6.0])
    assert gap.n_samples == 2 and gap.energy_j == pytest.approx(10.0)


def test_stats_rejects_bad_input():
    with pytest.raises(ValueError, match="differ in length"):
        stats_from_samples([0.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="must not decrease"):
        stats_from_samples([1.0, 0.5], [1.0, 1.0])


class DeviceClock:
    """The sampler thread's clocks made explicit: wall time moves only when the thread waits or
    a read takes time, CPU time only when a read spends it. Installed into the sampler module
    (its ``time`` and ``threading.Event``), so every pacing decision and the overhead are exact
    and no verdict depends on how fast this machine runs the thread."""

    def __init__(self):
        self.wall = 0.0
        self.cpu = 0.0
        self.waits = []
        self.stopped = False

    def install(self, monkeypatch):
        clock = self

        class Event:  # the sampler's stop event: waiting advances the device clock instead
            def set(self):
                clock.stopped = True

            def clear(self):
                clock.stopped = False

            def is_set(self):
                return clock.stopped

            def wait(self, timeout):
                clock.waits.append(timeout)
                clock.wall += max(timeout, 0.0)
                return clock.stopped

        fake_time = types.SimpleNamespace(monotonic=lambda: self.wall, thread_time=lambda: self.cpu)
        fake_threading = types.SimpleNamespace(
            Event=Event, Lock=threading.Lock, Thread=threading.Thread
        )
        monkeypatch.setattr(sampler_module, "time", fake_time)
        monkeypatch.setattr(sampler_module, "threading", fake_threading)


def run_on_device_clock(sampler, clock):
    """Start the thread and let it run until a read stops it (``clock.stopped``)."""
    sampler.start()
    wait_for(lambda: not sampler.running)  # a hang guard: the thread runs on no real clock
    sampler.stop()


def test_thread_samples_at_about_20_hz(monkeypatch):
    """20 Hz on the sampler's own clock: one read at t=0, then one every 50 ms."""
    clock = DeviceClock()
    clock.install(monkeypatch)
    calls = []

    def read():
        calls.append(clock.wall)
        clock.wall += 0.004  # a read takes 4 ms of the period
        if len(calls) == 11:
            clock.stopped = True
        return 5.0

    sampler = PowerSampler(read, hz=20.0, clock=lambda: clock.wall)
    run_on_device_clock(sampler, clock)
    stats = sampler.window_stats()
    assert calls == pytest.approx([0.05 * i for i in range(11)])
    assert clock.waits[:-1] == pytest.approx([0.046] * 10)  # the rest of each period
    assert stats.n_samples == 11 and stats.duration_s == pytest.approx(0.5)
    assert stats.peak_w == 5.0 and stats.mean_w == pytest.approx(5.0)
    assert stats.energy_j == pytest.approx(5.0 * 0.5)
    assert [t.name for t in threading.enumerate()].count("power-sampler") == 0


def test_a_late_read_is_not_made_up_by_a_burst(monkeypatch):
    """A read that overruns its period (a slow i2c bus): the next one follows at once, then
    the 50 ms pace resumes from there; the thread never samples faster to catch up."""
    clock = DeviceClock()
    clock.install(monkeypatch)
    calls = []

    def read():
        calls.append(clock.wall)
        clock.wall += 0.12 if len(calls) == 2 else 0.0
        if len(calls) == 5:
            clock.stopped = True
        return 1.0

    run_on_device_clock(PowerSampler(read, hz=20.0), clock)
    assert calls == pytest.approx([0.0, 0.05, 0.17, 0.22, 0.27])
    assert clock.waits[:-1] == pytest.approx([0.05, 0.0, 0.05, 0.05])


def test_thread_samples_on_the_real_clock():
    """The same thread on the real clock: it samples, never faster than its rate (a lower bound
    the pacing guarantees however busy the machine is), and stops with its context."""
    calls = []

    def read():
        calls.append(time.monotonic())
        return 5.0

    started = time.monotonic()  # before the thread reads its own start time
    with PowerSampler(read, hz=20.0) as sampler:
        wait_for(lambda: len(calls) >= 6)  # 0.25 s of sampling
        stats = sampler.window_stats()
    assert not sampler.running
    assert stats.n_samples >= 6 and stats.peak_w == 5.0 and stats.mean_w == pytest.approx(5.0)
    assert stats.energy_j == pytest.approx(5.0 * stats.duration_s)
    # read k is never due before k periods after the thread's start (a late read shifts the
    # schedule later, never earlier)
    assert all(t - started >= 0.05 * k - 0.002 for k, t in enumerate(calls))
    assert [t.name for t in threading.enumerate()].count("power-sampler") == 0


def test_mark_starts_a_new_window_and_returns_the_old_one():
    level = {"w": 2.0}
    sampler = PowerSampler(lambda: level["w"], hz=100.0).start()
    try:
        wait_for(lambda: sampler.window_stats().n_samples >= 3)
        first = sampler.mark()
        level["w"] = 9.0
        wait_for(lambda: sampler.window_stats().n_samples >= 5)
        second = sampler.window_stats()
    finally:
        sampler.stop()
    assert first.n_samples >= 3 and first.peak_w == 2.0
    # A reading or two in flight at the switch may still be 2 W; the window's peak is the new level.
    assert second.n_samples >= 3 and second.peak_w == 9.0


def test_a_read_begun_before_mark_stays_out_of_the_new_window():
    """The trainer marks after an evaluation: a reading the sampler began during it (100 W) and
    stored only after the mark (its thread preempted in between, here held by the test) is the
    evaluation's, not the new window's. Before, it landed in training's window as its peak."""
    began, release = threading.Event(), threading.Event()
    calls = [0]

    def read():
        calls[0] += 1
        if calls[0] == 2:  # the second read is in flight while the test marks
            began.set()
            assert release.wait(60)
            return 100.0
        return 5.0

    sampler = PowerSampler(read, hz=1000.0).start()
    try:
        assert began.wait(60)
        closed = sampler.mark()
        release.set()
        wait_for(lambda: sampler.window_stats().n_samples >= 3)
        opened = sampler.window_stats()
    finally:
        sampler.stop()
    assert (closed.n_samples, closed.peak_w) == (1, 5.0)
    assert opened.peak_w == 5.0 and 100.0 not in sampler.samples()[1]


def test_none_readings_and_errors_are_counted_not_fatal():
    seq = iter([1.0, None, ValueError("i2c read failed"), 3.0, None])

    def read():
        try:
            item = next(seq)
        except StopIteration:
            return 4.0
        if isinstance(item, Exception):
            raise item
        return item

    sampler = PowerSampler(read, hz=200.0).start()
    wait_for(lambda: len(sampler.samples()[1]) >= 3)
    sampler.stop()
    times, watts = sampler.samples()
    assert watts[:3] == [1.0, 3.0, 4.0]
    assert sampler.errors == 1 and isinstance(sampler.last_error, ValueError)
    assert sampler.none_readings == 2
    assert sampler.window_stats().n_samples == len(watts)


def test_all_none_gives_empty_stats():
    with PowerSampler(lambda: None, hz=100.0) as sampler:
        wait_for(lambda: sampler.none_readings >= 2)
    s = sampler.window_stats()
    assert s.n_samples == 0 and s.peak_w is None and s.mean_w is None and s.energy_j == 0.0
    assert sampler.none_readings >= 2


def test_injected_clock_stamps_samples():
    ticks = iter(range(1000))
    # Each sample calls the clock twice (before/after the read) and is stamped at the midpoint.
    with PowerSampler(lambda: 1.0, hz=200.0, clock=lambda: float(next(ticks))) as sampler:
        wait_for(lambda: len(sampler.samples()[0]) >= 3)
    times, _ = sampler.samples()
    assert times[:3] == [0.5, 2.5, 4.5]


def test_overhead_is_reported_and_small(monkeypatch):
    """CPU seconds of the sampler thread per wall second, on clocks the test holds: ten reads
    of 1 ms CPU each at 20 Hz are 10 ms over 0.451 s (the last read ends 1 ms after the
    tenth period starts), 2.2 % of a core."""
    clock = DeviceClock()
    clock.install(monkeypatch)
    reads = []

    def read():
        reads.append(clock.wall)
        clock.wall += 0.001
        clock.cpu += 0.001
        if len(reads) == 10:
            clock.stopped = True
        return 1.0

    sampler = PowerSampler(read, hz=20.0)
    assert sampler.overhead() is None  # nothing measured yet
    run_on_device_clock(sampler, clock)
    ov = sampler.overhead()
    assert ov == pytest.approx(0.010 / 0.451)
    assert 0.0 < ov < 0.05


def test_rejects_non_positive_rate():
    with pytest.raises(ValueError, match="> 0 Hz"):
        PowerSampler(lambda: 1.0, hz=0)


def test_idle_power_reads_the_rail_over_its_window_skipping_failed_reads():
    """4 Hz for 1.25 s on a fake clock: reads at 0, 0.25, ..., 1.25 s. The first raises, the
    second is None (both skipped); 2, 2, 4, 4 W remain: trapezoids 0.25 x (2 + 3 + 4) = 2.25 J
    over 0.75 s, so the idle power is 3.0 W."""
    now = [0.0]

    def sleep(s):
        now[0] += s

    readings = iter([OSError("i2c"), None, 2.0, 2.0, 4.0, 4.0])

    def read():
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    stats = idle_power(read, seconds=1.25, hz=4, clock=lambda: now[0], sleep=sleep)
    assert stats.n_samples == 4 and stats.duration_s == 0.75
    assert stats.mean_w == 3.0 and stats.peak_w == 4.0
    assert (
        idle_power(lambda: None, seconds=0.5, hz=4, clock=lambda: now[0], sleep=sleep).n_samples
        == 0
    )
