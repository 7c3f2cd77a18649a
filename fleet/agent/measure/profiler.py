"""Measure time per batch and power for every (batch size, frequency) point (paper §4.1).

Why it looks like this: time and power depend on the device, the model and the input shape,
never on the data, so a point is measured by locking the frequency, running a few real training
steps (forward, loss, backward, Adam step) on a seeded dummy batch and sampling the power rail
over the timed window. With a known budget the staircase plan (``staircase.py``) skips most of
the grid. Every exit path gives the device back its original clocks.

A backend that can answer for a point itself (the replay backend's ``measure(b, f)``) is asked
instead of training, so a virtual device profiles instantly and without torch. torch and the
models are imported only when training actually runs. Python 3.6 + torch 1.10 compatible.

This module is the sweep: which points, in which order (grid, staircase or predict design),
and what the profile says about itself. Measuring one point is ``measurers.py``; writing the
CSV is ``profile_writer.py``.
"""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from fleet.agent.devices.base import Backend, DeviceError
from fleet.agent.measure.measurers import ReplayMeasurer, TrainingMeasurer, measure_idle, settle
from fleet.agent.measure.sampler import sensor_hz
from fleet.agent.measure.staircase import Measurement, staircase_plan
from fleet.agent.measure.sweep_plan import (  # noqa: F401 - the sweep's defaults live there
    DEFAULT_BATCH_SIZES,
    IDLE_WINDOW_S,
    PredictPlan,
    SweepPlan,
)
from fleet.method.budget import check_budget
from fleet.method.power_window import PEAK_HORIZON_FACTOR
from fleet.method.profile_io import MEASURED, VIRTUAL, cell_number

Row = Dict[str, Any]
ProgressFn = Callable[[int, int, Optional[Row]], None]


ProfileResult = NamedTuple(
    "ProfileResult",
    [
        ("rows", List[Row]),  # one per probed point, sorted by (batch_size, freq_mhz)
        ("probes", int),  # points actually run (== len(rows))
        ("grid_size", int),  # |B| x |F|: what the full grid costs
        ("metadata", Dict[str, Any]),  # for write_profile: columns + comment lines
    ],
)


def profile_grid(
    backend: Backend,
    plan: SweepPlan,
    predict: Optional[PredictPlan] = None,
    device: str = "cpu",
    progress: Optional[ProgressFn] = None,
    model: Any = None,
) -> ProfileResult:
    """Profile ``plan.model_name`` on ``backend``: the full grid, or the staircase under
    ``plan.budget_w``, or (``predict``) a design's probes and a prediction of the rest.

    The plan's fields (``sweep_plan.py``): ``freqs`` defaults to every frequency the backend
    offers; a backend without frequency control (CPU) yields one point per batch size at the
    current clock (0 if unknown).
    ``num_classes`` is the vocabulary size for text models (None: the model's default).
    ``model`` profiles an already-built module instead of building ``model_name`` (e.g. the
    weights just received; time and power do not depend on them).
    ``min_window_s`` and ``min_power_samples``: a point with a power reading runs past ``steps``
    until it has lasted that long and holds that many power samples (defaults
    ``measurers.MIN_POINT_S`` or twice the budget statistic's averaging window, and
    ``measurers.MIN_POWER_SAMPLES``): its size comes from the evidence, ``steps`` and ``warmup``
    are minimums. Each row records ``power_samples``, ``point_s`` (its timed seconds),
    ``power_window_s`` (the window its ``peak_power_w`` averages over), ``peak_spread_w`` (how far
    the peaks of its two halves differ), ``peak_forecast_w`` (the statistic's highest value
    expected over ten times the point's time, never below ``peak_power_w``:
    ``power_window.peak_forecast``), ``power_sd_w`` (the statistic's spread) and ``time_cv`` (its
    steps' spread).
    ``progress(done, total, row)`` is called after each point; under a budget ``total`` is the
    grid size (an upper bound) and a last call with ``done == total`` marks the end.
    ``predict`` (a ``PredictPlan``) probes only the design of ``design.design_probes`` and fills
    the rest with ``source=predicted`` rows; its ``adapt_budgets`` spend further probes two at a
    time where a measurement could change the choice (``prediction/adapt.next_probes``).
    ``idle_s``: before the sweep, with the clocks as found and nothing running, the rail is read
    for this long and its mean written as ``idle_power_w`` (what the board draws while it waits
    for a round to end); a backend without a power reading, or 0, leaves it absent, and a replay
    passes on the recorded profile's value.
    """
    (model_name, input_shape, batch_sizes, freqs, steps, warmup, budget_w, sampler_hz, num_classes,
     min_window_s, min_power_samples, seed, idle_s) = plan  # fmt: skip
    bs = _check_batch_sizes(batch_sizes)
    if int(steps) < 1:
        raise ValueError("steps must be >= 1, got {}".format(steps))
    if int(warmup) < 0:
        raise ValueError("warmup must be >= 0, got {}".format(warmup))
    if not float(sampler_hz) > 0:
        raise ValueError("sampler_hz must be > 0, got {}".format(sampler_hz))
    if min_window_s is not None and not float(min_window_s) >= 0:
        raise ValueError("min_point_s must be >= 0 s, got {}".format(min_window_s))
    if min_power_samples is not None and int(min_power_samples) < 0:
        raise ValueError("min_power_samples must be >= 0, got {}".format(min_power_samples))
    check_budget("budget_w", budget_w)  # the one grammar's refusal (a BudgetError: ValueError)
    if predict is not None and budget_w is not None:
        raise ValueError("predict mode probes the whole grid's design; drop the budget")
    points = _choose_freqs(backend, freqs)
    controllable = bool(backend.frequencies())
    if not points:
        points = [_current_freq(backend)]
    design = None  # type: Optional[List[Tuple[int, float]]]
    if predict is not None:
        from fleet.agent.prediction.design import design_probes

        design = design_probes(bs, points, predict.max_probes)  # PredictError before any probe
    model_name, input_shape = _resolve_model(model_name, input_shape)
    replay = callable(getattr(backend, "measure", None))
    if not replay:
        require_power(backend)
    # Never faster than the sensor converts: faster reads repeat (or block on) one conversion.
    sampler_hz = sensor_hz(backend, float(sampler_hz))
    # A replaying backend reports power with each point; a real one must have a readable rail.
    power_available = replay or backend.read_power_w() is not None
    if budget_w is not None and not power_available:
        raise DeviceError(
            "a budget-driven (staircase) profile needs power readings; backend '{}' has none: "
            "drop the budget to profile time only".format(backend.name)
        )
    total = len(bs) * len(points)
    rows = []  # type: List[Row]
    idle = None  # type: Optional[float]
    if replay:  # a replay measures nothing: it passes on what the recorded board idled at
        idle = cell_number(getattr(backend, "idle_power_w", None))
        if idle is not None and not (0 < idle < float("inf")):
            idle = None  # a recording's nonsense is not passed on (the profile would not load)
    elif power_available and float(idle_s) > 0:
        idle = measure_idle(backend, float(idle_s), float(sampler_hz))

    measurer = None  # type: Any
    try:
        if replay:
            measurer = ReplayMeasurer(backend)
        else:
            measurer = TrainingMeasurer(
                backend,
                model_name,
                input_shape,
                num_classes,
                device,
                int(steps),
                int(warmup),
                float(sampler_hz) if power_available else None,
                model,
                min_window_s,
                seed,
                min_power_samples,
            )

        def measure(b: int, f: float) -> Optional[Measurement]:
            if controllable:
                backend.lock(f)
                settle(backend)  # samples before this are never in a window: mark() comes later
            watch = _watch_point(backend)
            row = measurer(b, f)
            if watch is not None and row["status"] == "ok":
                row.update(watch.columns(row))  # what the backend saw meanwhile (NVML: clocks)
            rows.append(row)
            if progress is not None:
                progress(len(rows), total, row)
            if row["status"] != "ok":
                return None
            return Measurement(
                row["time_per_batch_s"], _or_inf(row["peak_power_w"]), row["mean_power_w"]
            )

        if design is not None:
            total = len(design)
            cannot_run = set()  # type: set
            for b, f in design:
                if b not in cannot_run and measure(b, f) is None and rows[-1]["status"] == "oom":
                    cannot_run.add(b)
            assert predict is not None  # a design is the predict plan's
            if predict.adapt_budgets:
                n = predict.adapt_probes
                extra = (len(bs) * len(points)) // 10 if n is None else int(n)
                total += extra
                adapt_eff = predict.adapt_efficiency
                _adapt(rows, bs, points, predict.adapt_budgets, adapt_eff, extra, measure)
        elif budget_w is None:
            for b in bs:
                for f in points:
                    if measure(b, f) is None and rows[-1]["status"] == "oom":
                        break  # out of memory does not depend on the frequency
        else:
            staircase_plan(bs, points, float(budget_w), measure)
    finally:
        try:
            if measurer is not None:
                measurer.close()
        finally:
            backend.restore()
    if progress is not None and len(rows) < total:
        progress(len(rows), len(rows), None)
    rows.sort(key=lambda r: (r["batch_size"], r["freq_mhz"]))
    metadata = _metadata(
        backend, model_name, input_shape, steps, warmup, sampler_hz, budget_w, device,
        num_classes, replay, measurer,
    )  # fmt: skip
    # What the profile was meant to cover, so a reader can tell what it never measured.
    metadata["grid_batch_sizes"] = ",".join(str(b) for b in bs)
    metadata["grid_freqs"] = ",".join("{:g}".format(f) for f in points)
    if idle is not None:
        metadata["idle_power_w"] = float("{:.6g}".format(idle))  # never rounds to 0
        if not replay:
            metadata["idle_window_s"] = float(idle_s)
    probes = len(rows)
    if metadata["source"] == VIRTUAL:
        for row in rows:  # every row says it: a row read alone must not pass for the board's
            row["source"] = VIRTUAL
    if design is not None:
        rows = _fill_predicted(rows, bs, points, metadata)
    if getattr(backend, "knob_measured", False):  # NVML current clocks: the clock each ran at
        from fleet.agent.devices.nvml_point import label_measured_clocks

        label_measured_clocks(rows)
    return ProfileResult(rows, probes, len(bs) * len(points), metadata)


def _adapt(
    rows: List[Row],
    bs: Sequence[int],
    points: Sequence[float],
    budgets: Sequence[Optional[float]],
    efficiency: Optional[Dict[int, float]],
    extra: int,
    measure: Any,
) -> None:
    """Spend up to ``extra`` probes, two at a time, where the choice at ``budgets`` is in doubt;
    stop when no un-probed point could change it (or the probes cannot support a prediction)."""
    from fleet.agent.prediction.adapt import next_probes
    from fleet.agent.prediction.fit import PredictError
    from fleet.agent.prediction.predict import predict_profile

    eff = dict(efficiency) if efficiency else dict((b, 1.0) for b in bs)
    while extra > 0:
        try:
            pred = predict_profile([dict(r) for r in rows], bs, points)
        except PredictError:
            return
        done = set((int(r["batch_size"]), float(r["freq_mhz"])) for r in rows)
        step = [
            k
            for k in next_probes(pred.rows, budgets, [eff], min(2, extra), pred.margin or 0.0)
            if k not in done
        ]
        if not step:
            return
        for b, f in step:
            measure(b, f)
        extra -= len(step)


def _watch_point(backend: Backend) -> Any:
    """The backend's watch over one point (``watch_point()``: NVML samples the clock it ran at
    and its energy counter), or None for a backend that has nothing to add."""
    start = getattr(backend, "watch_point", None)
    return start() if callable(start) else None


def require_power(backend: Backend) -> None:
    """Refuse, in one line, to profile a board that cannot measure power (a Jetson Nano 2GB
    has no sensor): a profile without power cannot keep a budget. Its clocks still lock, so a
    recorded profile of the same board type can drive training there instead. A backend that
    never claims a sensor (a CPU without RAPL) is not refused: it profiles time only."""
    why = getattr(backend, "power_unavailable", None)
    if why:
        raise DeviceError(
            "cannot measure power on this board ({}): a profile needs power readings; use a "
            "recorded profile of the same board type instead (powerfleet train --profile "
            "PROFILE.csv)".format(why)
        )


def _fill_predicted(
    rows: List[Row], bs: Sequence[int], points: Sequence[float], metadata: Dict[str, Any]
) -> List[Row]:
    """Predict mode: mark probed rows with their source and add the predicted rest.

    If the probes cannot support a prediction the measured rows are kept alone (measurements
    are never thrown away) and the metadata says why.
    """
    from fleet.agent.prediction.fit import PredictError
    from fleet.agent.prediction.predict import predict_profile

    metadata["plan"] = "predict"
    metadata["probes"] = len(rows)
    for row in rows:
        row["source"] = metadata.get("source") or MEASURED
    try:
        prediction = predict_profile(rows, bs, points)
    except PredictError as exc:
        metadata["predict_error"] = str(exc)
        return rows
    for q, method in sorted(prediction.methods.items()):
        err = prediction.errors.get(q)
        metadata["predict_" + q] = "method={} cv_mean_rel_err={}".format(
            method, "n/a" if err is None else "{:.4f}".format(err)
        )
    metadata["predicted_rows"] = prediction.predicted
    return prediction.rows


def _resolve_model(model_name: str, input_shape: Any) -> Tuple[str, Any]:
    """Canonical model name and 'CxHxW'/'T' shape; a typo fails before any point is probed,
    on a replay-only host too (``inputs`` needs no torch)."""
    from fleet.agent.models import inputs

    name = inputs.canonical_name(model_name)
    return name, inputs.format_shape(inputs.input_spec(name, input_shape).shape)


def _check_batch_sizes(batch_sizes: Sequence[int]) -> List[int]:
    try:
        bs = sorted(set(int(b) for b in batch_sizes))
    except (TypeError, ValueError):
        raise ValueError("batch sizes must be integers, got {!r}".format(batch_sizes)) from None
    if not bs or bs[0] < 1:
        raise ValueError("batch sizes must be >= 1 and not empty, got {!r}".format(batch_sizes))
    return bs


def _choose_freqs(backend: Backend, freqs: Optional[Sequence[float]]) -> List[float]:
    available = sorted(float(f) for f in backend.frequencies())
    if freqs is None:
        return available
    wanted = sorted(set(float(f) for f in freqs))
    if not wanted:
        return available
    if not available:
        raise DeviceError("backend '{}' cannot lock frequencies; drop --freqs".format(backend.name))
    unknown = [f for f in wanted if not any(abs(f - a) < 1e-3 for a in available)]
    if unknown:
        raise DeviceError(
            "backend '{}' does not offer {} (offers {})".format(
                backend.name,
                ", ".join("{:g}".format(f) for f in unknown),
                ", ".join("{:g}".format(a) for a in available),
            )
        )
    return [min(available, key=lambda a: abs(a - f)) for f in wanted]


def _current_freq(backend: Backend) -> float:
    """The clock an uncontrolled device runs at, if it can say; 0 means 'unknown, current'."""
    for attr in ("current_mhz", "current_freq_mhz", "current_frequency"):
        fn = getattr(backend, attr, None)
        if callable(fn):
            try:
                value = cell_number(fn())
            except Exception:  # noqa: BLE001 - a clock we cannot read is simply unknown
                value = None
            if value is not None:
                return value
    desc = backend.describe()
    for key in ("current_freq_mhz", "freq_mhz", "cur_freq_mhz"):
        value = cell_number(desc.get(key))
        if value is not None:
            return value
    return 0.0


def _metadata(
    backend: Backend,
    model_name: str,
    input_shape: Any,
    steps: int,
    warmup: int,
    sampler_hz: float,
    budget_w: Optional[float],
    device: str,
    num_classes: Optional[int],
    replay: bool,
    measurer: Any,
) -> Dict[str, Any]:
    desc = dict(backend.describe())
    shape = input_shape
    if isinstance(measurer, TrainingMeasurer):
        num_classes = measurer.classes
    if isinstance(shape, (list, tuple)):
        shape = "x".join(str(int(d)) for d in shape)
    point = {}  # type: Dict[str, Any]
    if isinstance(measurer, TrainingMeasurer) and measurer.window_s is not None:
        point = {
            "min_point_s": measurer.min_window_s,
            "min_power_samples": measurer.min_samples,
            "power_window_s": measurer.window_s,  # the budget statistic's (power_window.py)
            "power_average_s": measurer.average_s,
            # peak_forecast_w: the highest expected over this many times the point's seconds
            "peak_forecast_horizon": PEAK_HORIZON_FACTOR,
        }
    meta = {
        "device": _device_name(desc, backend),
        "model": model_name,
        "input_shape": shape,
        "backend": desc.pop("backend", None) or backend.name,
        # How each point was measured; a replay measured nothing, so these would only mislead.
        "steps": None if replay else int(steps),
        "warmup": None if replay else int(warmup),
        "sampler_hz": None if replay else float(sampler_hz),
        # measured on this board, or "virtual" (a virtual board: host times) as it says itself
        "source": "replayed" if replay else str(desc.pop("source", None) or "measured"),
        "plan": "grid" if budget_w is None else "staircase",
        "budget_w": budget_w,
        "torch_device": None if replay else str(device),
        "num_classes": num_classes,
    }  # type: Dict[str, Any]
    meta.update(point)
    for key, value in desc.items():
        if key not in meta and isinstance(value, (str, int, float, bool)):
            meta[key] = value
    return meta


def _device_name(desc: Dict[str, Any], backend: Backend) -> str:
    """The most specific name the backend gives: Jetson board, NVML GPU, or the backend kind."""
    for key in ("device", "board", "gpu"):
        value = desc.get(key)
        if value:
            return " ".join(str(value).split())
    return backend.name


def _or_inf(value: Optional[float]) -> float:
    return float("inf") if value is None else value
