"""Predict the un-probed points of a profile from a few measured ones (issue 11).

:func:`predict_profile` fills the grid ``batch sizes x knobs`` from the measured rows: for each
column (time, peak and mean power) it fits the shared-curve model of ``predict_fit.py`` and
keeps it, or the per-row interpolation when leave-one-out says that does better; a power-limit
knob (power pinned to the knob in watts) is recognised and filled by its own rule. Predicted
rows say ``source=predicted``; :func:`describe` writes the header lines that say how they were
made. Which points to probe is ``predict_design.py``; carrying a re-measured deviation across a
table (drift, verify-before-trust) is ``deviation.py``.

Runs on the board: Python 3.6, numpy 1.19 (only old, stable numpy API). See
docs/architecture.md for where prediction sits (profile, select, verify-before-trust, drift).
"""

import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .predict_fit import (
    PredictError,
    check_rows,
    fit_surface,
    interpolate_row,
    loo_errors,
    rms,
    surface_value,
)
from .profile_io import cell_number

Row = Dict[str, Any]
QUANTITIES = ("time_per_batch_s", "peak_power_w", "mean_power_w")

Prediction = NamedTuple(
    "Prediction",
    [
        ("rows", List[Row]),  # the full grid: measured rows as given, then predicted ones
        ("errors", Dict[str, Optional[float]]),  # per quantity: leave-one-out RMS relative error
        ("methods", Dict[str, str]),  # per quantity: "shape" or "interp"
        ("measured", int),
        ("predicted", int),
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
    values = {}  # type: Dict[str, Dict[Tuple[int, float], float]]
    rho = _cap_ratio(obs["peak_power_w"])
    for q in QUANTITIES:
        if not obs[q] or not todo:  # nothing to predict: a full grid passes through as is
            continue
        if rho is not None:
            check_rows(obs[q], wanted_b)
            values[q] = _predict_capped(q, obs, rho, todo)
            methods[q], errors[q] = "cap", None
            continue
        values[q], methods[q], errors[q] = _predict_quantity(q, obs[q], wanted_b, fs, todo)
    meta = {}
    for r in rows:
        for col in ("device", "model", "input_shape", "idle_power_w"):
            if r.get(col) not in (None, "") and col not in meta:
                meta[col] = r[col]
    out = []  # type: List[Row]
    for key in sorted(measured):
        row = dict(measured[key])
        if row.get("source") in (None, ""):
            row["source"] = "measured"
        out.append(row)
    for b, f in todo:
        row = {"batch_size": b, "freq_mhz": _clean(f)}  # type: Row
        for q in QUANTITIES:
            row[q] = values[q][(b, f)] if q in values else None
        row["status"] = "ok"
        row.update(meta)
        row["source"] = "predicted"
        out.append(row)
    out.sort(key=lambda r: (int(float(r["batch_size"])), float(r["freq_mhz"])))
    return Prediction(out, errors, methods, len(measured), len(todo))


def _predict_quantity(
    name: str,
    obs: Dict[Tuple[int, float], float],
    bs: Sequence[int],
    fs: Sequence[float],
    todo: Sequence[Tuple[int, float]],
) -> Tuple[Dict[Tuple[int, float], float], str, Optional[float]]:
    """Predict one column at ``todo``; pick shape model or interpolation by leave-one-out."""
    try:
        surf = fit_surface(obs, bs, fs)
    except PredictError as exc:
        raise PredictError("{}: {}".format(name, exc)) from None
    shape_err, interp_err = loo_errors(obs, bs, fs)
    use_interp = bool(shape_err) and (rms(interp_err) or 0.0) < 0.5 * (rms(shape_err) or 0.0)
    out = {}
    for b, f in todo:
        value = surface_value(surf, b, f)
        if use_interp:
            alt = interpolate_row(obs, b, f)
            value = alt if alt is not None else value
        if not value > 0:
            alt = interpolate_row(obs, b, f)
            if alt is None:
                raise PredictError(
                    "{}: the fitted model goes non-positive at batch_size={}, knob={:g}; probe "
                    "that point".format(name, b, f)
                )
            value = alt
        out[(b, f)] = value
    method = "interp" if use_interp else "shape"
    err = rms(interp_err if use_interp else shape_err)
    return out, method, err


def _cap_ratio(peak: Dict[Tuple[int, float], float]) -> Optional[float]:
    """If the knob is a power limit in watts, the ratio peak/limit where power sits at it.

    Recognised when some batch size has 3+ probes whose peak is the same fraction (within
    3 %, between 0.5 and 1.2) of the knob: power pinned to the knob. A clock in MHz never
    looks like that (power is affine in the clock with a large offset). None otherwise.
    """
    if not peak:
        return None
    ratios = {}  # type: Dict[int, List[float]]
    for (b, k), p in peak.items():
        if k > 0:
            ratios.setdefault(b, []).append(p / k)
    best = max(max(r) for r in ratios.values())
    if not 0.5 <= best <= 1.2:
        return None
    pinned = [x for r in ratios.values() for x in r if x >= 0.97 * best]
    if not any(sum(1 for x in r if x >= 0.97 * best) >= 3 for r in ratios.values()):
        return None
    return float(np.median(pinned))


def _predict_capped(
    name: str,
    obs: Dict[str, Dict[Tuple[int, float], float]],
    rho: float,
    todo: Sequence[Tuple[int, float]],
) -> Dict[Tuple[int, float], float]:
    """Power-limit knob: below its knee a batch size draws ``rho * limit`` (pinned); above it,
    what it draws unconstrained (its highest probe, if that one was not pinned). Time and mean
    power follow the same knee: flat above it, interpolated between pinned probes below it.
    """
    out = {}
    peak = obs["peak_power_w"]
    for b, k in todo:
        row = sorted((kk, y) for (bb, kk), y in obs[name].items() if bb == b)
        top_k = row[-1][0]
        free = peak[(b, top_k)] < 0.97 * rho * top_k
        knee = peak[(b, top_k)] / rho if free else float("inf")
        if k < row[0][0] or k > top_k:
            raise PredictError(
                "{}: knob {:g} is outside batch size {}'s probed range {:g}..{:g}; prediction "
                "does not extrapolate".format(name, k, b, row[0][0], top_k)
            )
        if k >= knee:
            out[(b, k)] = row[-1][1]
            continue
        if name == "peak_power_w":
            out[(b, k)] = rho * k
            continue
        anchors = [(kk, y) for kk, y in row if peak[(b, kk)] >= 0.97 * rho * kk]
        if free:
            anchors.append((knee, row[-1][1]))
        if not anchors or k < anchors[0][0]:
            anchors = row
        # Pinned, a step costs roughly a power of the limit: interpolate on log-log axes.
        xs = [math.log(a[0]) for a in anchors]
        ys = [math.log(a[1]) for a in anchors]
        out[(b, k)] = math.exp(float(np.interp(math.log(k), xs, ys)))
    return out


def _clean(f: float) -> Any:
    return int(f) if f == int(f) else f


def describe(prediction: Prediction) -> List[str]:
    """Header comment lines saying how the predicted rows were made (for the profile CSV)."""
    lines = [
        "predicted: {} of {} rows; source=predicted rows come from fleet/agent/predict.py "
        "(shared knob curve: Y(b,k) = u(b) + v(b) h(k), relative least squares; 'interp' = "
        "per-batch linear interpolation)".format(
            prediction.predicted, prediction.predicted + prediction.measured
        )
    ]
    for q in QUANTITIES:
        if q in prediction.methods:
            err = prediction.errors.get(q)
            lines.append(
                "predict_{}: method={} loo_rms_rel_err={}".format(
                    q, prediction.methods[q], "n/a" if err is None else "{:.4f}".format(err)
                )
            )
    return lines
