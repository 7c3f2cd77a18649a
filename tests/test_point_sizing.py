"""Profile points sized by evidence, not steps (issue 30): at least ``MIN_POINT_S`` seconds and
``MIN_POWER_SAMPLES`` power samples, steps and warm-up as minimums, and each row saying what its
evidence was (samples, seconds, the statistic's window, the spread of its peak, of its steps).
"""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from fleet.agent.devices.base import Backend, DeviceError
from fleet.agent.measure.measurers import MIN_POINT_S, MIN_POWER_SAMPLES, point_peak
from fleet.agent.measure.profile_writer import write_profile
from fleet.core.profile import load_profile
from fleet.method.power_window import (
    PEAK_HORIZON_FACTOR,
    expected_max,
    peak_forecast,
    peak_of,
    window_sd,
)
from fleet.method.profile_io import read_rows
from tests.hardware_helpers import sweep


class AlternatingGpu(Backend):
    """One lockable clock; the rail reads 10 W and 20 W in turn and the budget statistic
    averages it over 0.2 s (as NVML's instantaneous field is averaged over its window)."""

    name = "alternating"
    power_average_s = 0.2
    power_window_s = 0.2

    def __init__(self):
        self._w = itertools.cycle([10.0, 20.0])
        self.restores = 0

    def frequencies(self):
        return [500.0]

    def lock(self, freq_mhz):
        if freq_mhz != 500.0:
            raise DeviceError("no")

    def restore(self):
        self.restores += 1

    def read_power_w(self):
        return next(self._w)


@pytest.mark.slow
def test_a_point_runs_until_it_has_its_seconds_and_samples(tmp_path):
    gpu = AlternatingGpu()
    result = sweep(
        gpu, "small_cnn", "1x28x28", [4, 8], steps=3, warmup=1, sampler_hz=50.0,
        min_window_s=0.5, min_power_samples=20, idle_s=0.0,
    )  # fmt: skip
    for r in result.rows:
        assert r["samples"] >= 3  # steps stay a minimum
        assert r["power_samples"] >= 20 and r["point_s"] >= 0.5
        assert r["power_window_s"] == 0.2
        # the peak is the statistic's (0.2 s means of 10 W / 20 W readings), not a 20 W reading
        # (the sampler's thread keeps this machine's time, so only the bounds are asserted: a
        # thread stalled for a window after a 20 W reading shows 20 W, never more)
        assert 12.0 <= r["peak_power_w"] <= 20.0
        assert r["mean_power_w"] == pytest.approx(15.0, abs=2.0)
        assert r["peak_spread_w"] is not None and 0.0 <= r["peak_spread_w"] < 10.0
        # the forecast over ten times the point never lies below what the point showed
        assert r["peak_power_w"] <= r["peak_forecast_w"]
        assert r["power_sd_w"] is not None and r["power_sd_w"] >= 0.0
        assert r["time_cv"] is not None and r["time_cv"] >= 0
    meta = result.metadata
    assert (meta["min_point_s"], meta["min_power_samples"]) == (0.5, 20)
    assert (meta["power_window_s"], meta["power_average_s"]) == (0.2, 0.2)
    assert meta["peak_forecast_horizon"] == 10.0
    out = tmp_path / "p.csv"
    write_profile(str(out), result.rows, result.metadata)
    header, rows, comments = read_rows(str(out))
    assert {"power_samples", "point_s", "power_window_s", "peak_spread_w", "time_cv"} <= set(header)
    assert {"peak_forecast_w", "power_sd_w"} <= set(header)
    assert "power_window_s=0.2" in comments and "peak_forecast_horizon=10.0" in comments
    assert len(load_profile(str(out)).points) == 2  # extra columns: still a profile


def test_a_point_peak_is_never_below_its_mean():
    """Readings of 10 W and 20 W whose 20 W ones land late in each 0.2 s window (a sampler
    kept waiting by a busy core): every full window's mean is under the point's 15 W mean, and
    a row with mean above peak is no profile. The peak is then the mean; otherwise the
    statistic's own highest value."""
    times = [0.0, 0.05, 0.1, 0.19, 0.2, 0.25, 0.3, 0.39, 0.4, 0.45, 0.5, 0.59, 0.6]
    watts = [10.0, 10.0, 10.0, 20.0] * 3 + [10.0]
    seen = peak_of(times, watts, 0.2)
    assert seen is not None and seen < 15.0  # the premise: uneven readings, a low statistic
    assert point_peak(times, watts, 0.2, 15.0) == 15.0
    assert point_peak(times, watts, 0.2, 12.0) == seen  # a mean below it changes nothing
    assert point_peak(times, watts, 0.2, None) == seen


def _readings(n: int, seed: int, sd: float, rho: float = 0.0, spikes: float = 0.0) -> list:
    """``n`` seeded readings around 1 with relative spread ``sd``; ``rho``: each reading carries
    that share of the previous one's deviation (an AR(1) series, readings swinging together);
    ``spikes``: that fraction of readings jump to 1.18 (train_135.json's 151.3 W over 128 W)."""
    rng = random.Random(seed)
    x, out = 0.0, []
    for _ in range(n):
        x = rho * x + (1.0 - rho * rho) ** 0.5 * rng.gauss(0.0, 1.0)
        out.append(1.18 if spikes and rng.random() < spikes else 1.0 + sd * x)
    return out


def _peak_gap(
    seconds: float, seed: int, sd: float, average_s: float = 1.0, forecast: bool = False, **shape
) -> float:
    """Relative shortfall of a ``seconds`` point's peak against a 10x longer one's: seeded 20 Hz
    readings (:func:`_readings`), the statistic averaged over ``average_s`` (1 s: NVML's; 0: the
    raw reading, as the profile's peak was before). The point's peak is the highest value it
    showed (``peak_power_w``), or with ``forecast`` its ``peak_forecast_w`` (``peak_forecast``
    over ten times the point)."""
    hz = 20.0
    n = int(round(10 * seconds * hz))
    times = [i / hz for i in range(n)]
    watts = _readings(n, seed, sd, **shape)
    short = int(round(seconds * hz))
    if forecast:
        horizon = PEAK_HORIZON_FACTOR * seconds
        short_peak = peak_forecast(times[:short], watts[:short], average_s, horizon)[0]
    else:
        short_peak = peak_of(times[:short], watts[:short], average_s)
    return peak_of(times, watts, average_s) / short_peak - 1.0


#: The spread per reading the H100 showed: small_cnn b=256 over 300 steps, peak 164.656 W, mean
#: 157.669 W over 15 samples, the maximum of 15 normal readings lying 1.74 sd above the mean.
H100_SD = (164.656 / 157.669 - 1.0) / 1.74
#: At the card's own limiter (steady bf16 matmuls, 20 Hz): 300 readings peaking 2.9 sd above
#: their 698.4 W mean at 813.7 W.
LIMITER_SD = (813.7 / 698.4 - 1.0) / 2.9


def test_the_default_point_holds_its_peak_within_one_percent_of_a_ten_times_longer_one():
    """Why ``MIN_POINT_S`` = 2 s and ``MIN_POWER_SAMPLES`` = 40, and why a point also records
    ``peak_forecast_w``: with the spread the H100 showed and the 1 s statistic, the highest value
    a 2 s point shows (its ``peak_power_w``) is within 1 % of a 20 s point's in the median
    (0.7 %), but not at the card's limiter (1.6 %); the old 3-sample point's raw peak fell short
    by more (the files: 2.6-8.1 % short of the 300-step points). The forecast over ten times the
    point is within 1 % at both, in the median and (typical spread) at the 90th percentile."""
    assert (MIN_POINT_S, MIN_POWER_SAMPLES) == (2.0, 40)
    assert H100_SD == pytest.approx(0.025, abs=0.001)
    assert LIMITER_SD == pytest.approx(0.057, abs=0.001)
    seeds = range(80)
    seen = [_peak_gap(MIN_POINT_S, seed, H100_SD) for seed in seeds]
    assert 0.005 < statistics.median(seen) <= 0.01
    at_limiter = [_peak_gap(MIN_POINT_S, seed, LIMITER_SD) for seed in seeds]
    assert statistics.median(at_limiter) > 0.012
    old = [_peak_gap(0.15, seed, H100_SD, average_s=0.0) for seed in seeds]
    assert statistics.median(old) > 0.01
    for sd in (H100_SD, LIMITER_SD):
        gaps = sorted(_peak_gap(MIN_POINT_S, seed, sd, forecast=True) for seed in seeds)
        assert abs(statistics.median(gaps)) <= 0.003, sd
        if sd == H100_SD:
            assert gaps[int(0.9 * len(gaps))] <= 0.01
            assert gaps[int(0.1 * len(gaps))] >= -0.01  # and not far above it either


@pytest.mark.parametrize(
    "average_s, sd, shape",
    [
        (1.0, LIMITER_SD, {"rho": 0.5}),  # readings that swing together
        (1.0, 0.016, {"spikes": 0.014}),  # train_135.json: 128 +- 2 W, 4 of 280 at 151.3 W
        (0.0, 0.02, {}),  # a Jetson rail: the reading is the statistic
    ],
)
def test_the_forecast_holds_on_readings_it_was_not_calibrated_on(average_s, sd, shape):
    """``MOVING_MEANS_PER_WINDOW`` was calibrated on independent normal readings with a 1 s
    window; on correlated readings, spiky ones and unaveraged ones the forecast still lies
    within 1 % of a 10x longer point's peak in the median, where the peak the point showed
    does not (1.3-2.8 % short)."""
    seeds = range(60)
    seen = [_peak_gap(MIN_POINT_S, s, sd, average_s, **shape) for s in seeds]
    told = [_peak_gap(MIN_POINT_S, s, sd, average_s, forecast=True, **shape) for s in seeds]
    assert statistics.median(seen) > 0.01
    assert abs(statistics.median(told)) <= 0.01


def test_expected_max_and_window_spread_against_brute_force():
    rng = random.Random(7)
    for m in (5, 20, 100):
        draws = [max(rng.gauss(0.0, 1.0) for _ in range(m)) for _ in range(4000)]
        assert expected_max(m) == pytest.approx(statistics.mean(draws), abs=0.04)
    assert expected_max(1) == 0.0
    times = [i / 20.0 for i in range(40)]
    assert window_sd(times, [5.0] * 40, 1.0) == 0.0
    assert peak_forecast(times, [5.0] * 40, 1.0, 20.0) == (5.0, 0.0)
    # unaveraged: the readings' own spread; 1 s windows over 2 s: 8 blocks of 5 readings, their
    # means' spread scaled by sqrt(0.25 s / 1 s)
    watts = [float(i % 7) for i in range(40)]
    assert window_sd(times, watts, 0.0) == pytest.approx(statistics.stdev(watts))
    blocks = [statistics.mean(watts[i : i + 5]) for i in range(0, 40, 5)]
    assert window_sd(times, watts, 1.0) == pytest.approx(statistics.stdev(blocks) * 0.5)
    # a 20 s point of 1 s windows: 20 blocks of one window each, no scaling
    long_t = [i / 20.0 for i in range(400)]
    long_w = _readings(400, 3, 0.05)
    means = [statistics.mean(long_w[i : i + 20]) for i in range(0, 400, 20)]
    assert window_sd(long_t, long_w, 1.0) == pytest.approx(statistics.stdev(means))
    assert window_sd(times[:5], watts[:5], 1.0) is None  # too few readings to tell
    # a sampler that fell behind: 5 s at 10 W, nothing for 5 s, 5 s at 20 W. Placed by time, no
    # 1 s block mixes the two (blocks 0-4 hold 10 W, 10-14 hold 20 W, 5-9 are empty); placed
    # by index they would
    gap_t = [i / 20.0 for i in range(100)] + [10.0 + i / 20.0 for i in range(100)]
    gap_w = [10.0] * 100 + [20.0] * 100
    assert window_sd(gap_t, gap_w, 1.0) == pytest.approx(statistics.stdev([10.0] * 5 + [20.0] * 5))
    # a reading the sensor could not give (NaN) is left out, not spread into every figure
    holed = list(watts)
    holed[3] = float("nan")
    assert window_sd(times, holed, 0.0) == pytest.approx(statistics.stdev(watts[:3] + watts[4:]))
