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

import math
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

#: The slowest power sampling a profile or a run may ask for (Hz). Why one floor for both: where
#: a sensor states no window the statistic is one sampling period (``budget_window``), so a
#: profile sampled slower than its run would bound a longer average than the run's guard
#: compares with; and the guard's own window (at most 0.4 s) must hold several readings.
MIN_SAMPLER_HZ = 20.0

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


#: Beside its ``peak_power_w`` (the highest value of the budget statistic the point showed), a
#: measured profile point records ``peak_forecast_w``: the highest value *expected over ten times
#: the point's own time*. Why: the highest of a noisy statistic grows with the time watched, so a
#: short point's peak falls short of what a longer run of the same work shows (H100, small_cnn
#: b=256: 151.3 W over 50 steps, 164.7 W over 300), and a point chosen right under the budget
#: may then spend time over it. Replayed with the spread measured there
#: (``tests/test_point_sizing.py``), a 2 s point's own peak fell 0.7 % short of a 20 s point's
#: in the median and 1.6 % at the card's limiter (5.7 % per reading); the forecast is within
#: 0.1 % of it in the median at both (``docs/measured/h100-2026-11-27-sensors.md``).
PEAK_HORIZON_FACTOR = 10.0

#: The highest value of a moving mean over ``H`` seconds is about that of ``3 H / average_s``
#: independent means of that window (overlapping windows peak more often than disjoint ones):
#: calibrated on replayed normal readings at 20 Hz with 1 s windows, median error about 0.1 %.
MOVING_MEANS_PER_WINDOW = 3.0

_MIN_FORECAST_READINGS = 8


def _normal_quantile(p: float) -> float:
    """The standard normal's ``p`` quantile, by bisection on ``erf`` (stdlib only, 3.6)."""
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def expected_max(m: float) -> float:
    """How many standard deviations above their mean the highest of ``m`` independent normal
    values lies, typically (Blom's plotting position); 0 for ``m`` <= 1."""
    if not m > 1.0:  # NaN included
        return 0.0
    m = min(m, 1e15)  # past that the quantile is beyond double precision anyway
    return _normal_quantile((m - 0.375) / (m + 0.25))


def _interval(pts: Sequence[Tuple[float, float]]) -> float:
    """The readings' usual interval: the median gap between consecutive ones (a gap where the
    sampler fell behind, or a reading left out, does not stretch it)."""
    gaps = sorted(b[0] - a[0] for a, b in zip(pts, pts[1:]))
    return gaps[len(gaps) // 2] if gaps else 0.0


def window_sd(
    times: Sequence[float], watts: Sequence[float], average_s: Optional[float]
) -> Optional[float]:
    """The spread (standard deviation, W) of the budget statistic from one point's readings,
    by batch means: consecutive blocks of one statistic window each where the readings span 8
    or more, else 8 shorter blocks whose spread is scaled to the window (means of ``k`` times
    longer blocks spread ``sqrt(k)`` times less, the readings being independent beyond a block).
    Block means, not readings, so that readings that swing together or against each other
    count as they average. A reading stands for the interval before it and is placed by its
    time, so a gap (a sampler that fell behind) leaves blocks empty instead of merging readings
    far apart. Non-finite readings are left out. None with fewer than 8 readings."""
    pts = [(float(t), float(w)) for t, w in zip(times, watts) if math.isfinite(float(w))]
    n = len(pts)
    if n < _MIN_FORECAST_READINGS or len(times) != len(watts):
        return None
    dt = _interval(pts)
    if not dt > 0:
        return None
    span = pts[-1][0] - pts[0][0] + dt  # each reading stands for one interval
    # a window shorter than a reading's interval is the reading itself
    window = max(float(average_s or 0.0), dt)
    block = window if span / window >= _MIN_FORECAST_READINGS else span / _MIN_FORECAST_READINGS
    blocks = max(1, int(span / block + _EPS))
    sums = [[] for _ in range(blocks)]  # type: List[List[float]]
    start = pts[0][0] - dt
    for t, w in pts:
        sums[min(max(int((t - start) / block - _EPS), 0), blocks - 1)].append(w)
    means = [sum(v) / len(v) for v in sums if v]
    if len(means) < 2:
        return None
    mu = sum(means) / len(means)
    sd = math.sqrt(sum((x - mu) ** 2 for x in means) / (len(means) - 1))
    return sd * math.sqrt(block / window) if block < window else sd


def peak_forecast(
    times: Sequence[float],
    watts: Sequence[float],
    average_s: Optional[float],
    horizon_s: float,
) -> Tuple[Optional[float], Optional[float]]:
    """(peak, spread): the budget statistic's highest value expected over ``horizon_s`` seconds
    of the same work, never below the highest it showed (:func:`peak_of`), and the statistic's
    spread it rests on (:func:`window_sd`; None, and the peak shown, with too few readings).
    The forecast is the readings' mean plus :func:`expected_max` of the independent statistic
    values ``horizon_s`` holds (:data:`MOVING_MEANS_PER_WINDOW` per window for a moving mean,
    one per reading where the reading is the statistic) times their spread."""
    finite = [(float(t), float(w)) for t, w in zip(times, watts) if math.isfinite(float(w))]
    seen = peak_of([t for t, _w in finite], [w for _t, w in finite], average_s)
    sd = window_sd(times, watts, average_s)
    if seen is None or sd is None:
        return seen, sd
    dt = _interval(finite)
    a = float(average_s or 0.0)
    values = MOVING_MEANS_PER_WINDOW * horizon_s / a if a > dt else horizon_s / dt
    mean = sum(w for _t, w in finite) / len(finite)
    return max(seen, mean + sd * expected_max(values)), sd


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
