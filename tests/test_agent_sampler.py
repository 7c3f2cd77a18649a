"""PowerSampler: the statistics on hand-computed sequences, and the thread on a real clock."""

import threading
import time

import pytest

from fleet.agent.sampler import PowerSampler, WindowStats, idle_power, stats_from_samples


def wait_for(predicate, timeout=3.0):
    """Poll until predicate() holds: a loaded CI box may sample late, never this late."""
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


def test_thread_samples_at_about_20_hz():
    calls = []

    def read():
        calls.append(time.monotonic())
        return 5.0

    with PowerSampler(read, hz=20.0) as sampler:
        time.sleep(0.5)
        stats = sampler.window_stats()
    assert not sampler.running
    # Expect ~11 (one at t=0, then every 50 ms); loose bounds for a busy CI box.
    assert 6 <= stats.n_samples <= 14, stats
    assert stats.peak_w == 5.0 and stats.mean_w == pytest.approx(5.0)
    assert stats.energy_j == pytest.approx(5.0 * stats.duration_s)
    assert 0.25 <= stats.duration_s <= 0.55
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.05, abs=0.02)
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


def test_overhead_is_reported_and_small():
    with PowerSampler(lambda: 1.0, hz=50.0) as sampler:
        time.sleep(0.3)
        ov = sampler.overhead()
    assert ov is not None and 0.0 <= ov < 0.5


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
