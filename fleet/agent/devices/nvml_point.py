"""What an NVML GPU did during one profile point: the SM clock it ran at and the energy its
hardware counter saw.

Why: in the default "current clocks" mode nothing is locked, so the clock a point ran at is the
card's own choice under that load. The clock at open is the idle one (the H100 of 2026-11-27 said
345 MHz while every point ran at 1110-1980 MHz), so it is sampled during the point, beside every
power reading, and the profile row records its mean and range. Energy: the sampled integral of
the instantaneous field agreed with the GPU's own counter (``nvmlDeviceGetTotalEnergyConsumption``)
within 0.02-0.53 % over 8-15 s windows, so where the counter exists it gives the point's mean
power (``mean_power_w``) and the sampled mean stays beside it (``sampled_mean_w``); over a window
shorter than ``COUNTER_MIN_WINDOW_S`` the counter's own update step could dominate, so there the
sampled mean stays the mean and the counter is only recorded.

The timed window is the measurer's: it ends when the measurer returns and lasts
``time_per_batch_s * samples`` (the row's own fields), so the watch needs no hook inside the
measurer: readings taken before the window (warm-up) are left out, the counter at the window's
start is interpolated between the readings around it.

Python 3.6 compatible, stdlib only.
"""

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

COUNTER_MIN_WINDOW_S = 0.5
"""Shortest window whose counter mean replaces the sampled mean (see the module docstring)."""


class PointWatch(object):
    """Readings of one point: ``(t, sm_mhz, counter_mj)`` beside every power reading."""

    def __init__(
        self, clock_fn: Callable[[], Optional[float]], counter_fn: Callable[[], Optional[float]]
    ) -> None:
        self._clock_fn = clock_fn
        self._counter_fn = counter_fn
        self.readings = []  # type: List[Tuple[float, Optional[float], Optional[float]]]
        self.done = False  # set by columns(): the backend stops feeding it (a run lasts hours)
        self.read()

    def read(self) -> None:
        """One reading now (the sampler thread calls this beside each power reading)."""
        self.readings.append((time.monotonic(), self._clock_fn(), self._counter_fn()))

    def columns(self, row: Dict[str, Any]) -> Dict[str, Any]:
        """The row's extra columns, from the window the row says it timed (ending now); ends
        the watch."""
        self.read()
        self.done = True
        t_end = self.readings[-1][0]
        window = _window_s(row)
        t_start = t_end - window if window is not None else self.readings[0][0]
        inside = [r for r in self.readings if r[0] >= t_start and r[1] is not None]
        if not inside:  # no reading landed in the window: the one at its end stands for it
            inside = [self.readings[-1]] if self.readings[-1][1] is not None else []
        out = {}  # type: Dict[str, Any]
        if inside:
            clocks = [float(r[1]) for r in inside]  # type: ignore[arg-type]
            out["sm_clock_mhz"] = int(round(sum(clocks) / len(clocks)))
            out["sm_clock_min_mhz"] = int(round(min(clocks)))
            out["sm_clock_max_mhz"] = int(round(max(clocks)))
            out["sm_clock_samples"] = len(clocks)
        energy_j = self._counter_energy_j(t_start, t_end)
        span = t_end - t_start
        if energy_j is not None and span > 0:
            out["counter_energy_j"] = round(energy_j, 4)
            out["counter_mean_w"] = round(energy_j / span, 4)
            out["sampled_mean_w"] = row.get("mean_power_w")
            if span >= COUNTER_MIN_WINDOW_S and energy_j > 0:
                out["mean_power_w"] = out["counter_mean_w"]
                out["energy_source"] = "counter"
            else:
                out["energy_source"] = "sampled"
        return out

    def _counter_energy_j(self, t_start: float, t_end: float) -> Optional[float]:
        points = [(t, e) for t, _c, e in self.readings if e is not None]
        if len(points) < 2:
            return None
        end = points[-1][1]
        start = _at(points, t_start)
        return (end - start) / 1000.0


def _window_s(row: Dict[str, Any]) -> Optional[float]:
    try:
        window = float(row["time_per_batch_s"]) * int(row["samples"])
    except (KeyError, TypeError, ValueError):
        return None
    return window if window > 0 else None


def _at(points: List[Tuple[float, float]], t: float) -> float:
    """The counter at ``t``, linear between the readings around it (the first before them)."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, e0), (t1, e1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def label_measured_clocks(rows: List[Dict[str, Any]]) -> None:
    """Current-clocks mode: each row's ``freq_mhz`` becomes the SM clock it ran at.

    A predicted row (never run) takes the clock of the measured batch size nearest to it (in
    log size), without a range: what the card would likely choose, not a reading."""
    measured = [r for r in rows if r.get("sm_clock_mhz") is not None]
    for row in rows:
        if row.get("sm_clock_mhz") is not None:
            row["freq_mhz"] = row["sm_clock_mhz"]
        elif measured:
            b = float(row["batch_size"])
            near = min(measured, key=lambda r: abs(_log2(float(r["batch_size"])) - _log2(b)))
            row["freq_mhz"] = near["sm_clock_mhz"]


def _log2(x: float) -> float:
    import math

    return math.log(x, 2) if x > 0 else 0.0
