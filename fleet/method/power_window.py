"""What a power budget bounds: the sensor's power averaged over a stated window, in one place.

Why: a budget in watts means nothing until it says *which* power. A Jetson's INA3221 reports a
conversion that is already an average (its own hardware averaging over its refresh period); a
datacenter GPU's NVML instantaneous field is a near-point sample that swings far above what the
card's own limiter holds (H100, steady bf16 matmuls under the enforced 700 W limit: instantaneous
samples peaked at 814-927 W while NVML's 1 s average peaked at 713-716 W; the numbers and their
source: ``docs/measured/h100-2026-11-27-sensors.md``). So the budget bounds the **budget
statistic**: the time-weighted mean of the readings over the trailing ``average_s`` seconds (each
reading standing for the time since the previous one), or the reading itself where the sensor
already averages (``average_s`` 0: Jetson rails, RAPL, NVML's own 1 s average). Each backend
states its window (``Backend.power_window_s``, ``Backend.power_average_s``); the default for
NVML's instantaneous field is :data:`NVML_INSTANT_AVERAGE_S`.

Everything that compares power with a budget uses this one statistic: the profile's
``peak_power_w`` (its highest value at a point, ``peak_of``), the closed loop's guard, the drift
watch's power, and the run's account of time and energy spent above the budget
(:class:`OverBudget`). Python 3.6, stdlib only.
"""

from typing import List, Optional, Sequence, Tuple

#: NVML's instantaneous power field is averaged over 1 s to make the budget statistic. Why 1 s:
#: it is the window of the card's own power limiter and of ``nvmlDeviceGetPowerUsage`` (on the
#: H100, 1 s-average peaks 712.7-715.7 W against the enforced 700 W, +1.8-2.2 %, while the
#: instantaneous samples of the same runs peaked at 813.7-926.6 W, +16-32 %): a budget on the
#: instantaneous field could not be held even by the card's own limiter. The samples' mean over a
#: window agrees with the hardware energy counter within 0.02-0.53 %, so the average of the
#: sampled field is the window's true mean power. The instantaneous spread of those runs (about
#: 5.7 % of the mean at 20 Hz: a 300-sample maximum 2.9 sd above 698 W) predicts a 20-sample
#: mean spread of 1.3 %, and so a 15-window maximum of about 713 W: what the 1 s API showed.
NVML_INSTANT_AVERAGE_S = 1.0

_EPS = 1e-9


class WindowedPower(object):
    """The budget statistic, streamed: ``add(t, watts)`` returns its value at ``t``.

    With ``average_s`` 0 (or None) the value is the reading itself. Otherwise it is the
    time-weighted mean of the readings over ``[t - average_s, t]``, a reading at ``t_i`` standing
    for ``(t_{i-1}, t_i]``; until ``average_s`` of readings exist it is the mean over what there
    is (``full`` False). Readings must come in time order.
    """

    def __init__(self, average_s: Optional[float] = 0.0) -> None:
        a = float(average_s or 0.0)
        if not a >= 0:
            raise ValueError("power averaging window must be >= 0 s, got {}".format(average_s))
        self.average_s = a
        self._pts = []  # type: List[Tuple[float, float]]
        self.full = True  # the last value covered the whole window

    def reset(self) -> None:
        self._pts = []

    def add(self, t: float, watts: float) -> float:
        t, w = float(t), float(watts)
        if self.average_s <= 0:
            self.full = True
            return w
        pts = self._pts
        if pts and t < pts[-1][0]:
            raise ValueError("power readings must come in time order: {} after {}".format(
                t, pts[-1][0]))  # fmt: skip
        pts.append((t, w))
        start = t - self.average_s
        # keep one reading at or before the window's start: it bounds the first interval
        while len(pts) > 2 and pts[1][0] <= start + _EPS:
            del pts[0]
        energy = 0.0
        span = 0.0
        for (t0, _), (t1, w1) in zip(pts, pts[1:]):
            lo = max(t0, start)
            if t1 > lo:
                energy += (t1 - lo) * w1
                span += t1 - lo
        self.full = pts[0][0] <= start + _EPS
        if span <= _EPS:
            return w
        return energy / span


def windowed(
    times: Sequence[float], watts: Sequence[float], average_s: Optional[float]
) -> List[Tuple[float, float, bool]]:
    """(t, statistic, full window) at every reading of a time-ordered series."""
    wp = WindowedPower(average_s)
    out = []
    for t, w in zip(times, watts):
        value = wp.add(t, w)
        out.append((float(t), value, wp.full))
    return out


def peak_of(
    times: Sequence[float], watts: Sequence[float], average_s: Optional[float]
) -> Optional[float]:
    """The highest value of the budget statistic over full windows (a profile point's
    ``peak_power_w``); a series shorter than one window gives the highest partial value
    (never lower than the full-window peak would be on average, as partial means are noisier)."""
    series = windowed(times, watts, average_s)
    if not series:
        return None
    full = [v for _, v, ok in series if ok]
    return max(full) if full else max(v for _, v, _ in series)


def peak_spread(
    times: Sequence[float], watts: Sequence[float], average_s: Optional[float]
) -> Optional[float]:
    """How settled a point's peak is: the difference (W) between the statistic's highest values
    in the first and the second half of the point's time (0 when both halves peak alike; None
    with fewer than two full-window values in either half)."""
    series = [(t, v) for t, v, ok in windowed(times, watts, average_s) if ok]
    if len(series) < 4:
        return None
    mid = (series[0][0] + series[-1][0]) / 2.0
    first = [v for t, v in series if t <= mid]
    second = [v for t, v in series if t > mid]
    if len(first) < 2 or len(second) < 2:
        return None
    return abs(max(first) - max(second))


class OverBudget(object):
    """Time and energy the budget statistic spent above the budget.

    ``add(t, value, budget)`` takes the statistic at each reading: the interval since the
    previous reading counts as over when the value at its end is above the budget in force then;
    ``seconds`` sums those intervals, ``joules`` the energy above the budget line over them
    ((value - budget) x interval), ``excursions`` counts the separate stretches over, ``longest_s``
    the longest, ``samples`` the readings over.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.joules = 0.0
        self.excursions = 0
        self.longest_s = 0.0
        self.samples = 0
        self._last_t = None  # type: Optional[float]
        self._run_s = None  # type: Optional[float]  # the stretch over now (None: not over)

    def add(self, t: float, value: float, budget: Optional[float]) -> None:
        t = float(t)
        dt = 0.0 if self._last_t is None else max(0.0, t - self._last_t)
        self._last_t = t
        if budget is None or not value > budget:
            self._run_s = None
            return
        self.samples += 1
        if self._run_s is None:
            self.excursions += 1
            self._run_s = 0.0
        self._run_s += dt
        self.seconds += dt
        self.joules += dt * (float(value) - float(budget))
        self.longest_s = max(self.longest_s, self._run_s)

    def gap(self) -> None:
        """The readings stopped (an evaluation, a pause): the next one starts afresh."""
        self._last_t = None
        self._run_s = None
