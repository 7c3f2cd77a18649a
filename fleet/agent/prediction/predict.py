"""Predict the un-probed points of a profile from a few measured ones (issues 11 and 21).

:func:`predict_profile` fills the grid ``batch sizes x knobs`` from the measured rows. For each
column (time, peak and mean power) every candidate model of ``predict_models.py`` is fitted and
validated across whole probed rows (a row's interior held out, its ends kept: what a target row
knows), and the simplest within the noise of the best is kept (``select.py``): the
physical shared-curve model where the device behaves like one, a separable or frame fit, plain
interpolation, or the power-limit model where the knob is a power limit in watts. Predicted
rows say ``source=predicted`` and carry ``peak_power_bound_w``, an upper bound on their peak
power from the chosen model's validation residuals, which selection uses instead of the
prediction; :func:`describe` writes the header lines that say how they were made (model and
validation error per column, every candidate's error, the bound's margin). Which points to probe
is ``predict_design.py``; carrying a re-measured deviation across a table (drift,
verify-before-trust) is ``deviation.py``.

Runs on the board: Python 3.6, numpy 1.19 (only old, stable numpy API). See
docs/architecture.md for where prediction sits (profile, select, verify-before-trust, drift).
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from fleet.agent.prediction.fit import PredictError
from fleet.agent.prediction.select import choose
from fleet.method.profile_io import MEASURED, PREDICTED, cell_number

Row = Dict[str, Any]
QUANTITIES = ("time_per_batch_s", "peak_power_w", "mean_power_w")
BOUND_COLUMN = "peak_power_bound_w"

Prediction = NamedTuple(
    "Prediction",
    [
        ("rows", List[Row]),  # the full grid: measured rows as given, then predicted ones
        ("errors", Dict[str, Optional[float]]),  # per quantity: the chosen model's mean
        # |relative| error on the held-out probes of whole rows (None: too few to validate)
        ("methods", Dict[str, str]),  # per quantity: the chosen model (predict_models.MODELS)
        ("measured", int),
        ("predicted", int),
        ("candidates", Dict[str, Dict[str, float]]),  # per quantity: every candidate's error
        ("margin", Optional[float]),  # peak power's upper-bound margin (None: no power)
    ],
)


def row_ok(row: Row) -> bool:
    """A row whose point ran (status ok or empty): only those are fitted or scaled."""
    return str(row.get("status") or "ok").lower() == "ok"


def predict_profile(
    rows: Sequence[Row], batch_sizes: Sequence[int], knobs: Sequence[float]
) -> Prediction:
    """Fill the grid ``batch_sizes x knobs`` from the measured ``rows`` (profile-CSV dicts).

    Measured rows come back unchanged (their ``source`` set to ``measured`` only where empty);
    every missing grid point gets a row with ``source=predicted``, status ``ok`` and the
    metadata columns (device, model, input_shape) of the measured rows. Batch sizes that could
    not run at a probed point (status other than ok, e.g. oom) are not predicted. Power
    columns are predicted only when the probes have them (a time-only profile stays one).
    """
    bs = sorted(set(int(b) for b in batch_sizes))
    fs = sorted(set(float(f) for f in knobs))
    failed_b = set(int(float(r["batch_size"])) for r in rows if not row_ok(r))
    wanted_b = [b for b in bs if b not in failed_b]
    measured = {}  # type: Dict[Tuple[int, float], Row]
    for r in rows:
        measured[(int(float(r["batch_size"])), float(r["freq_mhz"]))] = r
    obs = {}  # type: Dict[str, Dict[Tuple[int, float], float]]
    for q in QUANTITIES:
        vals = {}
        for key, r in measured.items():
            value = cell_number(r.get(q))
            if row_ok(r) and value is not None and value > 0:
                vals[key] = value
        obs[q] = vals
    if not obs["time_per_batch_s"]:
        raise PredictError("no measured point has a time_per_batch_s to predict from")
    n_time = len(obs["time_per_batch_s"])
    for q in ("peak_power_w", "mean_power_w"):
        if obs[q] and len(obs[q]) != n_time:
            raise PredictError(
                "{} is set on {} of {} measured points; a profile is either time-only or fully "
                "powered".format(q, len(obs[q]), n_time)
            )
    todo = [(b, f) for b in wanted_b for f in fs if (b, f) not in measured]
    errors = {}  # type: Dict[str, Optional[float]]
    methods = {}  # type: Dict[str, str]
    candidates = {}  # type: Dict[str, Dict[str, float]]
    values = {}  # type: Dict[str, Dict[Tuple[int, float], float]]
    columns = dict((q, obs[q]) for q in QUANTITIES if obs[q])
    margin = None
    upper = {}  # type: Dict[Tuple[int, float], float]
    if todo:  # nothing to predict: a full grid passes through as is
        _check_rows(obs["time_per_batch_s"], wanted_b)
        for q in columns:
            got = choose(q, columns, wanted_b, fs, todo)
            values[q], methods[q], errors[q], candidates[q] = (
                got.values,
                got.model,
                got.cv_error,
                got.cv_errors,
            )
            if q == "peak_power_w":
                margin, upper = got.margin, got.upper
    meta = {}
    for r in rows:
        for col in ("device", "model", "input_shape", "idle_power_w"):
            if r.get(col) not in (None, "") and col not in meta:
                meta[col] = r[col]
    out = []  # type: List[Row]
    for key in sorted(measured):
        kept = dict(measured[key])
        if kept.get("source") in (None, ""):
            kept["source"] = MEASURED
        out.append(kept)
    for b, f in todo:
        row = {"batch_size": b, "freq_mhz": _clean(f)}  # type: Row
        for q in QUANTITIES:
            row[q] = values[q][(b, f)] if q in values else None
        if row["peak_power_w"] is not None and row["mean_power_w"] is not None:
            row["mean_power_w"] = min(row["mean_power_w"], row["peak_power_w"])
        if (b, f) in upper and row["peak_power_w"] is not None:
            row[BOUND_COLUMN] = max(upper[(b, f)], row["peak_power_w"])
        row["status"] = "ok"
        row.update(meta)
        row["source"] = PREDICTED
        out.append(row)
    out.sort(key=lambda r: (int(float(r["batch_size"])), float(r["freq_mhz"])))
    return Prediction(out, errors, methods, len(measured), len(todo), candidates, margin)


def _check_rows(obs: Dict[Tuple[int, float], float], bs: Sequence[int]) -> None:
    """Every batch size to predict needs a probe, and the grid two probed knob values: a
    batch size nobody ran is a guess, and prediction refuses to guess."""
    if len(set(b for b, _ in obs)) < 2:
        raise PredictError("prediction needs probes at 2 or more batch sizes")
    if len(set(k for _, k in obs)) < 2:
        raise PredictError("prediction needs probes at 2 or more knob values")
    for b in bs:
        if not any(bb == b for bb, _ in obs):
            raise PredictError(
                "batch size {} has no probed knob value; prediction needs at least 1 per "
                "batch size (2 for the shared-curve model)".format(b)
            )


def _clean(f: float) -> Any:
    return int(f) if f == int(f) else f


def describe(prediction: Prediction) -> List[str]:
    """Header comment lines saying how the predicted rows were made (for the profile CSV)."""
    lines = [
        "predicted: {} of {} rows; source=predicted rows come from "
        "fleet/agent/prediction/predict.py "
        "(per column the simplest candidate model within one standard error of the lowest "
        "error on held-out probed rows; "
        "{} = upper bound on predicted peak power, used by selection)".format(
            prediction.predicted, prediction.predicted + prediction.measured, BOUND_COLUMN
        )
    ]
    for q in QUANTITIES:
        if q in prediction.methods:
            err = prediction.errors.get(q)
            others = ", ".join(
                "{} {:.4f}".format(m, e)
                for m, e in sorted(prediction.candidates.get(q, {}).items())
            )
            lines.append(
                "predict_{}: method={} cv_mean_rel_err={} candidates: {}".format(
                    q,
                    prediction.methods[q],
                    "n/a" if err is None else "{:.4f}".format(err),
                    others or "n/a",
                )
            )
    if prediction.margin is not None:
        lines.append("predict_peak_power_bound: margin={:.4f}".format(prediction.margin))
    return lines
