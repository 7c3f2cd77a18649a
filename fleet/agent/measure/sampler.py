"""Background power sampling with per-window peak, mean and energy.

Why a thread: the training step and the power rail live on different clocks. The profile needs
the *peak* power of a (batch, frequency) point (the budget is a peak constraint) and its mean
power (for energy), so the rail is read at a fixed rate (>= 10 Hz, default 20 Hz) beside the
training loop, and the loop only marks where a measurement window begins and asks for its stats.

Energy is the trapezoid integral of the samples over time, and the mean is that energy divided by
the sampled span, so irregular sampling (a late wake-up, a skipped reading) weights each reading
by the time it stands for rather than counting it once. The window covers first-to-last sample:
up to one period at each end is not integrated; callers that want energy over their own elapsed
time use ``mean_w * elapsed``.

Overhead: ``overhead()`` reports the sampler thread's CPU seconds per wall second, measured in
the thread itself with ``time.thread_time`` (Python 3.7+) or ``getrusage(RUSAGE_THREAD)`` (Linux,
also on 3.6). Reading one sysfs file 20 times a second typically costs well under 1% of a core.

Python 3.6 compatible, stdlib only.
"""

import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]  # no such module there: checked before use

WindowStats = NamedTuple(
    "WindowStats",
    [
        ("peak_w", Optional[float]),  # None: no sample in the window
        ("mean_w", Optional[float]),
        ("energy_j", float),
        ("n_samples", int),
        ("duration_s", float),  # from the first to the last sample
    ],
)


def stats_from_samples(times: Sequence[float], watts: Sequence[Optional[float]]) -> WindowStats:
    """Peak, time-weighted mean, trapezoid energy of (time, watts) samples; None readings skipped.

    With fewer than two samples, or all at one instant, there is no span to weight by: the mean
    falls back to the arithmetic mean and the energy is 0.
    """
    if len(times) != len(watts):
        raise ValueError(
            "times and watts differ in length: {} vs {}".format(len(times), len(watts))
        )
    pts = [(float(t), float(w)) for t, w in zip(times, watts) if w is not None]
    for (t0, _), (t1, _) in zip(pts, pts[1:]):
        if t1 < t0:
            raise ValueError("sample times must not decrease: {} after {}".format(t1, t0))
    n = len(pts)
    if n == 0:
        return WindowStats(None, None, 0.0, 0, 0.0)
    peak = max(w for _, w in pts)
    duration = pts[-1][0] - pts[0][0]
    energy = 0.0
    for (t0, w0), (t1, w1) in zip(pts, pts[1:]):
        energy += (t1 - t0) * (w0 + w1) / 2.0
    if n >= 2 and duration > 0:
        mean = energy / duration
    else:
        mean = sum(w for _, w in pts) / n
    return WindowStats(peak, mean, energy, n, duration)


def idle_power(
    read_fn: Callable[[], Optional[float]],
    seconds: float = 1.0,
    hz: float = 20.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WindowStats:
    """The rail over ``seconds`` with nothing running: what the board draws while it waits.

    Read in the caller's thread (no training runs beside it, so there is nothing to keep pace
    with); a failed or None reading is skipped. The time-weighted ``mean_w`` is the idle power;
    ``n_samples == 0`` means the rail gave nothing (no idle power to report).
    """
    if not hz > 0:
        raise ValueError("sampling rate must be > 0 Hz, got {}".format(hz))
    times = []  # type: List[float]
    watts = []  # type: List[Optional[float]]
    end = clock() + max(float(seconds), 0.0)
    while True:
        t0 = clock()
        try:
            value = read_fn()
        except Exception:  # noqa: BLE001 - one failed read is a skipped sample, as in the sampler
            value = None
        times.append((t0 + clock()) / 2.0)
        watts.append(None if value is None else float(value))
        if clock() >= end:
            break
        sleep(1.0 / hz)
    return stats_from_samples(times, watts)


def sensor_hz(backend: Any, hz: float) -> float:
    """``hz``, or the sensor's own refresh rate where that is slower: ``min(hz, 1 / period)``.

    Why: a power monitor converts at its own pace (the INA3221's ``update_interval``, the
    JetPack 4 driver's polling delay); reading it faster returns the same conversion again
    (or blocks until the next), so extra samples only weigh one reading several times. A
    backend says its period in ``sensor_period_s`` (None or absent: unknown, ``hz`` stands).
    """
    period = getattr(backend, "sensor_period_s", None)
    if isinstance(period, (int, float)) and period > 0:
        return min(float(hz), 1.0 / float(period))
    return float(hz)


def sampling_note(backend: Any, hz: float) -> Optional[str]:
    """What a run at ``hz`` on ``backend`` should say about its power readings, or None: that
    there are none (the budget is then met from the recorded profile alone, unguarded), or
    that the sensor refreshes slower than asked (``sensor_hz``)."""
    unavailable = getattr(backend, "power_unavailable", None)
    if unavailable:
        return (
            "power is not measured ({}): the budget is met from the recorded profile only; "
            "the runtime guard is off".format(unavailable)
        )
    got = sensor_hz(backend, hz)
    if got < hz:
        return "sampling power at {:.3g} Hz, not {:g}: the sensor refreshes every {:.3g} ms".format(
            got, hz, 1000.0 / got
        )
    return None


def budget_window(backend: Any, hz: float) -> Tuple[float, float]:
    """(``average_s``, ``window_s``) of the budget statistic on ``backend``
    (``fleet/method/power_window.py``): the seconds its readings are averaged over (0: each
    reading is the statistic) and the window the budget is stated over (the backend's
    ``power_window_s``; else the averaging, else one sampling period at ``hz``, never shorter
    than the sensor's own refresh)."""
    avg = getattr(backend, "power_average_s", 0.0)
    avg = float(avg) if isinstance(avg, (int, float)) and avg > 0 else 0.0
    win = getattr(backend, "power_window_s", None)
    if not (isinstance(win, (int, float)) and win > 0):
        win = avg if avg > 0 else 1.0 / sensor_hz(backend, hz)
    return avg, float(win)


def _thread_cpu_fn() -> Optional[Callable[[], float]]:
    """A function giving the calling thread's CPU seconds, or None where none exists."""
    fn = getattr(time, "thread_time", None)  # 3.7+
    if fn is not None:
        return fn
    who = getattr(resource, "RUSAGE_THREAD", None) if resource is not None else None
    if who is not None:

        def rusage_thread() -> float:
            ru = resource.getrusage(who)
            return ru.ru_utime + ru.ru_stime

        return rusage_thread
    return None


class PowerSampler:
    """Calls ``read_fn()`` (watts, or None) ``hz`` times a second in a daemon thread.

    A reading of None is skipped (counted in ``none_readings``); an exception is counted in
    ``errors`` (the last one kept in ``last_error``) and sampling goes on, since one failed i2c
    read must not lose a whole profiling point.

    ``on_sample(t, watts_or_None)`` (an attribute a watcher may wrap), when given, is called in
    the sampler thread after every read: the closed loop's runtime guard watches the rail there,
    so it reacts while a long training step is still running. An exception from it is counted
    like a failed read.
    """

    def __init__(
        self,
        read_fn: Callable[[], Optional[float]],
        hz: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Optional[Callable[[float, Optional[float]], None]] = None,
    ) -> None:
        if not hz > 0:
            raise ValueError("sampling rate must be > 0 Hz, got {}".format(hz))
        self._read_fn = read_fn
        self.hz = float(hz)
        self._clock = clock
        self.on_sample = on_sample
        self._lock = threading.Lock()
        self._times = []  # type: List[float]
        self._watts = []  # type: List[float]
        self._opened = float("-inf")  # when the open window began (its last mark())
        self.errors = 0
        self.none_readings = 0
        self.last_error = None  # type: Optional[BaseException]
        self._stop = threading.Event()
        self._thread = None  # type: Optional[threading.Thread]
        self._cpu_s = None  # type: Optional[float]
        self._wall_s = 0.0

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "PowerSampler":
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power-sampler")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "PowerSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        period = 1.0 / self.hz
        cpu_fn = _thread_cpu_fn()
        cpu0 = cpu_fn() if cpu_fn is not None else None
        wall0 = time.monotonic()
        next_at = wall0
        while not self._stop.is_set():
            self._sample_once()
            now = time.monotonic()
            if cpu_fn is not None and cpu0 is not None:
                self._cpu_s = cpu_fn() - cpu0
            self._wall_s = now - wall0
            next_at += period
            if next_at < now:  # fell behind (slow read, busy CPU): do not burst to catch up
                next_at = now
            self._stop.wait(next_at - now)

    def _sample_once(self) -> None:
        t0 = self._clock()
        try:
            value = self._read_fn()
        except Exception as exc:  # noqa: BLE001 - counted, never fatal
            with self._lock:
                self.errors += 1
                self.last_error = exc
            return
        t = (t0 + self._clock()) / 2.0  # stamp the middle of a (possibly slow) read
        with self._lock:
            if value is None:
                self.none_readings += 1
            elif t0 >= self._opened:  # a read begun before mark() is the closed window's
                self._times.append(t)
                self._watts.append(float(value))
        if self.on_sample is not None:
            try:
                self.on_sample(t, None if value is None else float(value))
            except Exception as exc:  # noqa: BLE001 - counted, never fatal
                with self._lock:
                    self.errors += 1
                    self.last_error = exc

    # -- windows ----------------------------------------------------------------------------------
    def mark(self) -> WindowStats:
        """Start a new window; return the stats of the window it closes. A reading begun before
        this call and stored after it (the sampler's thread preempted in between) is left out of
        the new window: the trainer marks after an evaluation, and its power is not training's."""
        with self._lock:
            times, watts = self._times, self._watts
            self._times, self._watts = [], []
            self._opened = self._clock()
        return stats_from_samples(times, watts)

    def window_stats(self) -> WindowStats:
        """Stats of the samples since the last ``mark()`` (or start); the window stays open."""
        times, watts = self.samples()
        return stats_from_samples(times, watts)

    def samples(self) -> Tuple[List[float], List[float]]:
        """Copies of the current window's (times, watts)."""
        with self._lock:
            return list(self._times), list(self._watts)

    def overhead(self) -> Optional[float]:
        """Sampler-thread CPU seconds per wall second so far, or None if not measurable yet."""
        if self._cpu_s is None or self._wall_s <= 0:
            return None
        return self._cpu_s / self._wall_s
