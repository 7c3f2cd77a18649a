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
from fleet.agent.measure.measurers import MIN_POINT_S, MIN_POWER_SAMPLES
from fleet.agent.measure.profile_writer import write_profile
from fleet.core.profile import load_profile
from fleet.method.power_window import peak_of
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
        # (the sampler's thread keeps this machine's time, so only the bounds are asserted)
        assert 12.0 <= r["peak_power_w"] < 20.0
        assert r["mean_power_w"] == pytest.approx(15.0, abs=2.0)
        assert r["peak_spread_w"] is not None and 0.0 <= r["peak_spread_w"] < 10.0
        assert r["time_cv"] is not None and r["time_cv"] >= 0
    meta = result.metadata
    assert (meta["min_point_s"], meta["min_power_samples"]) == (0.5, 20)
    assert (meta["power_window_s"], meta["power_average_s"]) == (0.2, 0.2)
    out = tmp_path / "p.csv"
    write_profile(str(out), result.rows, result.metadata)
    header, rows, comments = read_rows(str(out))
    assert {"power_samples", "point_s", "power_window_s", "peak_spread_w", "time_cv"} <= set(header)
    assert "power_window_s=0.2" in comments
    assert len(load_profile(str(out)).points) == 2  # extra columns: still a profile


def _peak_gap(seconds: float, seed: int, sd: float, average_s: float = 1.0) -> float:
    """Relative shortfall of a ``seconds`` point's peak against a 10x longer one: seeded 20 Hz
    readings around 1 with relative spread ``sd``, the statistic averaged over ``average_s``
    (1 s: NVML's; 0: the raw reading, as the profile's peak was before)."""
    hz = 20.0
    rng = random.Random(seed)
    n = int(round(10 * seconds * hz))
    times = [i / hz for i in range(n)]
    watts = [1.0 + rng.gauss(0.0, sd) for _ in range(n)]
    short = int(round(seconds * hz))
    long, short_peak = (
        peak_of(times, watts, average_s),
        peak_of(times[:short], watts[:short], average_s),
    )
    return long / short_peak - 1.0


def test_the_default_point_holds_its_peak_within_one_percent_of_a_ten_times_longer_one():
    """Why ``MIN_POINT_S`` = 2 s and ``MIN_POWER_SAMPLES`` = 40: with the spread the H100 showed
    (small_cnn b=256 over 300 steps: peak 164.656 W, mean 157.669 W over 15 samples, the maximum
    of 15 normal readings lying 1.74 sd above the mean: sd 2.5 % of the mean) and the 1 s
    statistic, a 2 s point's peak is within 1 % of a 20 s point's in the median; the old 3-sample
    point's raw peak fell short of a 10x longer one by more (the files: 2.6-8.1 % short of the
    300-step points)."""
    assert (MIN_POINT_S, MIN_POWER_SAMPLES) == (2.0, 40)
    sd = (164.656 / 157.669 - 1.0) / 1.74
    assert sd == pytest.approx(0.025, abs=0.001)
    gaps = [_peak_gap(MIN_POINT_S, seed, sd) for seed in range(60)]
    assert statistics.median(gaps) <= 0.01
    old = [_peak_gap(0.15, seed, sd, average_s=0.0) for seed in range(60)]
    assert statistics.median(old) > 0.01
