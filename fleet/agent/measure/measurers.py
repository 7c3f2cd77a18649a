"""Measure one (batch size, frequency) point of a profile (paper §4.1).

A point is measured by running a few real training steps (forward, loss, backward, Adam step)
on a seeded dummy batch with the power rail sampled over the timed window
(:class:`TrainingMeasurer`), or, on a backend that can answer for a point itself (the replay
backend's ``measure(b, f)``), by asking it (:class:`ReplayMeasurer`: no torch, no waiting).
Also here: the idle rail read before a sweep, waiting for a just-locked clock to settle, and
telling an out-of-memory step from a real failure.

Separate from ``profiler.py``, which plans the sweep (which points, in which order, under which
budget) and never touches torch itself: everything that runs or times a step is here. torch
and the models are imported only when a training measurer is built. Python 3.6 + torch 1.10
compatible.
"""

import gc
import math
import time
from typing import Any, Dict, List, Optional, Sequence

from fleet.agent.devices.base import Backend, DeviceError
from fleet.method.power_window import PEAK_HORIZON_FACTOR, peak_forecast, peak_of, peak_spread
from fleet.method.profile_io import cell_number

#: A measured point runs until it has at least this many seconds and power samples (and at
#: least ``steps`` timed steps): a point sized by evidence, not by steps. Why 2 s and 40: on the
#: H100 (``docs/measured/h100-2026-11-27-sensors.md``) a 50-step small_cnn point had 3-4 samples
#: and its peak came out 2.6-8.1 % below the same point over 300 steps (13-23 samples); with the
#: budget statistic (NVML: 1 s means) and the spread measured there (about 2.5 % of the mean per
#: sample), a 2 s point's peak is within 1 % of a 20 s point's in the median (0.7 %;
#: ``tests/test_point_sizing.py`` replays it), 40 samples being 2 s at the default 20 Hz (two
#: averaging windows, 21 full-window values). Twice the averaging window where that is longer.
MIN_POINT_S = 2.0
MIN_POWER_SAMPLES = 40
#: A point never runs longer than this many times its minimum (a sensor that stopped answering
#: must not hold the sweep forever); the row then says how few samples it got.
MAX_POINT_FACTOR = 5.0

Row = Dict[str, Any]


class ReplayMeasurer:
    """Ask a backend that already knows each point (replay); no torch, no waiting."""

    source = "replayed"

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __call__(self, b: int, f: float) -> Row:
        m = self.backend.measure(b, f)  # type: ignore[attr-defined]  # replay's, not in Backend
        if m is None:
            # Recorded as not runnable, or not recorded at all: the replay cannot tell which.
            return _row(b, f, None, None, None, None, "unavailable")
        if isinstance(m, dict):
            get = m.get
        else:

            def get(key: str, default: Any = None) -> Any:
                return getattr(m, key, default)

        status = get("status", "ok") or "ok"
        if status != "ok":
            return _row(b, f, None, None, None, None, str(status))
        row = _row(
            b,
            f,
            cell_number(get("time_per_batch_s")),
            cell_number(get("peak_power_w")),
            cell_number(get("mean_power_w")),
            _int_or_none(get("samples")),
            "ok",
        )
        if row["time_per_batch_s"] is None:
            raise DeviceError("replay backend gave no time for batch {} at {}".format(b, f))
        return row

    def close(self) -> None:
        pass


class TrainingMeasurer:
    """Run warm-up plus timed real training steps and sample power over the timed window."""

    source = "measured"

    def __init__(
        self,
        backend: Backend,
        model_name: str,
        input_shape: Any,
        num_classes: Optional[int],
        device: str,
        steps: int,
        warmup: int,
        sampler_hz: Optional[float],
        model: Any,
        min_window_s: Optional[float],
        seed: int,
        min_power_samples: Optional[int] = None,
    ) -> None:
        import torch

        from fleet.agent.models import registry as models

        self.torch = torch
        self.models = models
        self.backend = backend
        self.device = str(device)
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise DeviceError("device '{}' requested but torch sees no CUDA GPU".format(device))
        self.name = models.canonical_name(model_name)
        self.spec = models.input_spec(self.name, input_shape)
        self.classes = int(num_classes) if num_classes else models.default_classes(self.name)
        if model is None:
            model = models.build_model(self.name, self.classes, self.spec.shape, seed=seed)
        self.model = model.to(self.device)
        self.model.train()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)  # type: Any  # None: closed
        self.steps = steps
        self.warmup = warmup
        self.seed = seed
        self.sampler = None  # type: Any
        self.average_s = 0.0  # the budget statistic's averaging (fleet/method/power_window.py)
        self.window_s = None  # type: Optional[float]
        self.min_samples = 0
        if sampler_hz is not None:
            from fleet.agent.measure.sampler import PowerSampler, budget_window

            self.average_s, self.window_s = budget_window(backend, sampler_hz)
            default_s = max(MIN_POINT_S, 2.0 * self.average_s)
            self.min_window_s = default_s if min_window_s is None else float(min_window_s)
            self.min_samples = (
                MIN_POWER_SAMPLES if min_power_samples is None else int(min_power_samples)
            )
            self.sampler = PowerSampler(backend.read_power_w, hz=sampler_hz)
            self.sampler.start()
        else:
            self.min_window_s = 0.0

    def _sync(self) -> None:
        self.backend.synchronize()
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def _step(self, inputs: Any, targets: Any) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = self.models.loss_fn(self.model(inputs), targets)
        loss.backward()
        self.opt.step()

    def __call__(self, b: int, f: float) -> Row:
        inputs = targets = None
        oom = False
        try:
            inputs, targets = self.models.make_batch(
                self.name, b, self.spec.shape, self.classes, self.seed, self.device
            )
            for _ in range(self.warmup):
                self._step(inputs, targets)
            self._sync()
            if self.sampler is not None:
                self.sampler.mark()
            start = time.perf_counter()
            n, step_s = self._timed(inputs, targets, start)
            elapsed = time.perf_counter() - start
            stats = self.sampler.window_stats() if self.sampler is not None else None
            series = self.sampler.samples() if self.sampler is not None else None
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            oom = True
        finally:
            del inputs, targets
        if oom:
            self._free()
            return _row(b, f, None, None, None, None, "oom")
        peak = mean = spread = forecast = sd = None  # type: Optional[float]
        power_samples = None  # type: Optional[int]
        if stats is not None and series is not None:
            _peak, mean, _energy, power_samples, _dur = stats
            # the budget's own statistic (fleet/method/power_window.py), highest at this point;
            # beside it, the highest expected over ten times this point's time
            peak = point_peak(series[0], series[1], self.average_s, mean)
            horizon = PEAK_HORIZON_FACTOR * elapsed
            forecast, sd = peak_forecast(series[0], series[1], self.average_s, horizon)
            spread = peak_spread(series[0], series[1], self.average_s)
            if not power_samples:
                # Not one sample landed in the window: an instant reading beats no reading.
                peak = mean = cell_number(self.backend.read_power_w())
                power_samples = 0 if peak is None else 1
        row = _row(b, f, elapsed / n, cell_number(peak), cell_number(mean), n, "ok")
        row["power_samples"] = power_samples
        if self.sampler is not None:  # what the point's evidence was (extra profile columns)
            row["point_s"] = round(elapsed, 4)
            row["power_window_s"] = self.window_s
            row["peak_spread_w"] = None if spread is None else round(spread, 4)
            # rounded, never below the peak it stands beside
            if forecast is not None:
                forecast = max(round(forecast, 4), peak if peak is not None else forecast)
            row["peak_forecast_w"] = forecast
            row["power_sd_w"] = None if sd is None else round(sd, 4)
        row["time_cv"] = step_cv(step_s)
        return row

    def _timed(self, inputs: Any, targets: Any, start: float) -> Any:
        """Run the timed steps: at least ``steps``, and with a sampler until the window holds
        ``min_window_s`` seconds and ``min_samples`` power samples (bounded by
        ``MAX_POINT_FACTOR`` times that). Each step's host time is kept, as the closed loop's
        drift watch times steps (no device sync per step: the mean stays the pipelined one)."""
        n = 0
        step_s = []  # type: List[float]
        limit = MAX_POINT_FACTOR * self.min_window_s
        while True:
            t0 = time.perf_counter()
            self._step(inputs, targets)
            t1 = time.perf_counter()
            step_s.append(t1 - t0)
            n += 1
            if n < self.steps:
                continue
            if self.sampler is None or t1 - start >= limit:
                break
            if t1 - start >= self.min_window_s and len(self.sampler.samples()[0]) >= (
                self.min_samples
            ):
                break
        self._sync()
        return n, step_s

    def _free(self) -> None:
        """Drop what an out-of-memory step left behind so the next batch size starts clean."""
        self.opt.zero_grad(set_to_none=True)
        gc.collect()
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        self.model = None
        self.opt = None
        gc.collect()
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()


def step_cv(step_s: List[float]) -> Optional[float]:
    """The spread of a point's step times (standard deviation over mean; None under 3 steps):
    the noise the drift watch judges a running point's time against."""
    if len(step_s) < 3:
        return None
    mean = sum(step_s) / len(step_s)
    if not mean > 0:
        return None
    var = sum((s - mean) ** 2 for s in step_s) / (len(step_s) - 1)
    return round(math.sqrt(var) / mean, 4)


def point_peak(
    times: Sequence[float], watts: Sequence[float], average_s: Optional[float],
    mean: Optional[float],
) -> Optional[float]:  # fmt: skip
    """A point's ``peak_power_w``: the budget statistic's highest value, never below the
    point's ``mean``. Why: the statistic's windows cover the point, so their highest mean is at
    least the point's mean; readings that land unevenly (a sampler thread kept waiting by a busy
    core) can put every full window just under it, and a row whose mean exceeds its peak is
    refused by every profile reader. The mean is then the best lower bound of the peak."""
    peak = peak_of(times, watts, average_s)
    if peak is not None and mean is not None and mean > peak:
        return mean
    return peak


def measure_idle(backend: Backend, seconds: float, hz: float) -> Optional[float]:
    """The board's idle power: the rail read for ``seconds`` before anything is locked or run
    (clocks as the owner left them, the GPU idle), or None if the rail gave no reading."""
    from fleet.agent.measure.sampler import idle_power

    stats = idle_power(backend.read_power_w, seconds, hz)
    mean = cell_number(stats.mean_w)
    return mean if mean is not None and mean > 0 else None


def settle(backend: Backend) -> bool:
    """Wait (bounded) until a just-locked clock really runs at its target; False on timeout.

    Right after a lock devfreq may still run the old clock for a few ms; power sampled then
    belongs to the old point (with ``--warmup 0`` it once placed a staircase step too low). A
    backend without ``wait_settled`` switches instantly (replay) or cannot tell (CPU): True.
    """
    wait = getattr(backend, "wait_settled", None)
    return bool(wait()) if callable(wait) else True


def is_oom(exc: BaseException) -> bool:
    """Out of memory on GPU or CPU (torch.cuda.OutOfMemoryError is a RuntimeError subclass)."""
    if isinstance(exc, MemoryError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    return any(s in text for s in ("out of memory", "can't allocate memory", "not enough memory"))


def _row(
    b: int,
    f: float,
    time_s: Optional[float],
    peak: Optional[float],
    mean: Optional[float],
    samples: Optional[int],
    status: str,
) -> Row:
    return {
        "batch_size": int(b),
        "freq_mhz": _clean_freq(f),
        "time_per_batch_s": time_s,
        "peak_power_w": peak,
        "mean_power_w": mean,
        "samples": samples,
        "status": status,
    }


def _clean_freq(f: float) -> Any:
    f = float(f)
    return int(f) if f == int(f) else f


def _int_or_none(value: Any) -> Optional[int]:
    out = cell_number(value)
    return None if out is None else int(out)
