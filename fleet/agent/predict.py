"""Predict the un-probed points of a profile from a few measured ones (issue 11).

Why this shape: on a DVFS GPU the step time is a part that does not scale with the clock plus a
part that does, ``t(b, f) = a(b) + c(b) / f``, and power is idle/host plus dynamic power,
``P(b, f) = p0(b) + s(b) * f * V(f)^2`` with an unknown voltage curve. Both are one *shared*
curve of the knob times a per-batch gain plus a per-batch offset::

    Y(b, k) = u(b) + v(b) * h(k)

so we learn ``h`` from the points measured across batch sizes (never assuming the knob is a
clock: a power-limit knob in watts gets its own learned curve) and two numbers per batch size.
Fitting is alternating weighted least squares on relative error. Between probed knobs ``h`` is
interpolated as a fitted power law ``alpha + beta * k^gamma`` plus a linearly interpolated
residual, which is exact for ``1/f`` and close for ``f V(f)^2``. A per-row monotone (linear)
interpolation is the fallback, picked when leave-one-out error on the probes says it does better.

The design (:func:`design_probes`) spends probes where this model needs them: every batch size
at the lowest and highest knob (two points fix ``u`` and ``v``), then the interior knobs of the
largest batch (the curve ``h``, where power's dynamic part is largest), then a middle knob for
every batch size, then the rest. By default a quarter of the grid.

Runs on the board: Python 3.6, numpy 1.19 (only old, stable numpy API). See
docs/architecture.md for where prediction sits (profile, select, verify-before-trust, drift).
"""

import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .profile_io import cell_number

Row = Dict[str, Any]
QUANTITIES = ("time_per_batch_s", "peak_power_w", "mean_power_w")
GAMMAS = np.linspace(-3.0, 3.0, 121)
DEFAULT_FRACTION = 0.25


class PredictError(ValueError):
    """The probes cannot support a prediction; the message says which and what is needed."""


Surface = NamedTuple(
    "Surface",
    [
        ("batch_sizes", List[int]),
        ("knobs", List[float]),
        ("u", Dict[int, float]),  # per-batch offset (the part the knob does not move)
        ("v", Dict[int, float]),  # per-batch gain of the shared knob curve
        ("h", Dict[float, float]),  # shared knob curve, 0 at the lowest probed knob, 1 at the top
        ("residual", float),  # RMS relative residual on the probes
    ],
)

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


# --------------------------------------------------------------------------------------------
# Design


def min_probes(batch_sizes: Sequence[int], knobs: Sequence[float]) -> int:
    """The fewest probes the model can use: both end knobs for every batch, one interior knob."""
    nb, nf = len(set(batch_sizes)), len(set(knobs))
    return nb * nf if nf <= 2 else 2 * nb + 1


def default_max_probes(batch_sizes: Sequence[int], knobs: Sequence[float]) -> int:
    """A quarter of the grid, but never fewer than :func:`min_probes`."""
    nb, nf = len(set(batch_sizes)), len(set(knobs))
    return max(min_probes(batch_sizes, knobs), int(math.floor(DEFAULT_FRACTION * nb * nf)))


def _spread_order(n: int) -> List[int]:
    """Interior indices 1..n-2, each next one as far as possible from those already chosen."""
    chosen = [0, n - 1]
    rest = list(range(1, n - 1))
    order = []
    while rest:
        best = max(rest, key=lambda i: (min(abs(i - c) for c in chosen), -i))
        order.append(best)
        chosen.append(best)
        rest.remove(best)
    return order


def design_probes(
    batch_sizes: Sequence[int], knobs: Sequence[float], max_probes: Optional[int] = None
) -> List[Tuple[int, float]]:
    """Which (batch size, knob) points to probe, in priority order, at most ``max_probes``.

    Raises PredictError when fewer than two batch sizes are given or the budget is below
    :func:`min_probes` (the model could not be fitted from what would be probed).
    """
    bs = sorted(set(int(b) for b in batch_sizes))
    fs = sorted(set(float(f) for f in knobs))
    if len(bs) < 2:
        raise PredictError("prediction needs at least 2 batch sizes, got {}".format(bs))
    if not fs:
        raise PredictError("prediction needs at least one knob value")
    need = min_probes(bs, fs)
    budget = default_max_probes(bs, fs) if max_probes is None else int(max_probes)
    if budget < need:
        raise PredictError(
            "{} probes are too few for {} batch sizes x {} knobs: the design needs at least {} "
            "(both end knobs for every batch size and one interior knob)".format(
                budget, len(bs), len(fs), need
            )
        )
    order = []  # type: List[Tuple[int, float]]
    seen = set()

    def add(b: int, f: float) -> None:
        if (b, f) not in seen:
            seen.add((b, f))
            order.append((b, f))

    for b in bs:
        add(b, fs[0])
        add(b, fs[-1])
    interior = [fs[i] for i in _spread_order(len(fs))]
    for f in interior:
        add(bs[-1], f)
    mid = fs[len(fs) // 2]
    for b in reversed(bs):
        add(b, mid)
    for f in interior:
        add(bs[0], f)
    for f in interior:  # then everything else, spread over knobs first
        for b in reversed(bs):
            add(b, f)
    return order[: min(budget, len(order))]


# --------------------------------------------------------------------------------------------
# The shared-curve model


def _phi(k: np.ndarray, gamma: float) -> np.ndarray:
    if abs(gamma) < 1e-9:
        return np.log(k)
    return k**gamma


def _smooth_curve(knobs: np.ndarray, known: Dict[int, float]) -> np.ndarray:
    """h at every knob: a fitted alpha + beta*k^gamma plus linearly interpolated residuals.

    Knobs <= 0 (a CPU's "current clock" 0) get a straight line instead of a power law.
    """
    idx = np.array(sorted(known), dtype=int)
    hk = np.array([known[i] for i in idx])
    kx = knobs[idx]
    if len(idx) < 3 or np.any(knobs <= 0):
        base_all = np.interp(knobs, kx, hk) if len(idx) >= 2 else np.full(len(knobs), hk[0])
        return base_all
    best = None
    for gamma in GAMMAS:
        x = _phi(kx, gamma)
        design = np.vstack([np.ones_like(x), x]).T
        coef, _res, rank, _sv = np.linalg.lstsq(design, hk, rcond=None)
        if rank < 2:
            continue
        err = float(np.sum((design.dot(coef) - hk) ** 2))
        if best is None or err < best[0] - 1e-15:
            best = (err, gamma, coef)
    if best is None:
        return np.interp(knobs, kx, hk)
    _err, gamma, coef = best
    base = coef[0] + coef[1] * _phi(knobs, gamma)
    resid = hk - base[idx]
    return base + np.interp(knobs, kx, resid)


def fit_surface(
    obs: Dict[Tuple[int, float], float],
    batch_sizes: Sequence[int],
    knobs: Sequence[float],
    iterations: int = 300,
) -> Surface:
    """Fit ``Y(b, k) = u(b) + v(b) h(k)`` to observations ``{(b, k): y}`` (all y > 0).

    Relative least squares (weights 1/y^2) so a 0.2 s step and a 4 s step count alike.
    ``knobs`` must lie within the probed knob range (no extrapolation). Raises PredictError
    naming the batch size or knob the probes cannot support.
    """
    bs = sorted(set(int(b) for b in batch_sizes))
    probed_k = sorted(set(k for (_b, k) in obs))
    ks = sorted(set(float(k) for k in knobs) | set(probed_k))
    if len(set(b for (b, _k) in obs)) < 2:
        raise PredictError("prediction needs probes at 2 or more batch sizes")
    if len(probed_k) < 2:
        raise PredictError("prediction needs probes at 2 or more knob values")
    lo, hi = probed_k[0], probed_k[-1]
    outside = [k for k in ks if k < lo or k > hi]
    if outside:
        raise PredictError(
            "knob {:g} is outside the probed range {:g}..{:g}; prediction does not "
            "extrapolate".format(outside[0], lo, hi)
        )
    for b in bs:
        mine = set(k for (bb, k) in obs if bb == b)
        if len(mine) < 2:
            raise PredictError(
                "batch size {} has {} probed knob value(s); prediction needs at least 2 "
                "per batch size".format(b, len(mine))
            )
    kx = np.array(ks, dtype=float)
    kpos = {k: j for j, k in enumerate(ks)}
    rows_of = {b: [(kpos[k], y) for (bb, k), y in obs.items() if bb == b] for b in bs}
    extra = set(b for (b, _k) in obs) - set(bs)
    for b in extra:  # probes of batch sizes not asked for still teach the shared curve
        mine = [(kpos[k], y) for (bb, k), y in obs.items() if bb == b]
        if len(set(j for j, _ in mine)) >= 2:
            rows_of[b] = mine
    j_lo, j_hi = kpos[lo], kpos[hi]
    observed_j = sorted(set(kpos[k] for k in probed_k))
    # Start from a straight line in the knob; alternating least squares does the rest.
    h = (kx - lo) / (hi - lo)
    u = {}  # type: Dict[int, float]
    v = {}  # type: Dict[int, float]
    prev = None
    for _ in range(int(iterations)):
        for b, pts in rows_of.items():
            j = np.array([p[0] for p in pts])
            y = np.array([p[1] for p in pts])
            w = 1.0 / y**2
            a = np.vstack([np.ones_like(y), h[j]]).T
            ata = (a * w[:, None]).T.dot(a)
            if abs(np.linalg.det(ata)) < 1e-18 * max(1.0, float(np.trace(ata)) ** 2):
                raise PredictError(
                    "batch size {}: its probes do not separate the knob curve (probe two "
                    "knob values further apart)".format(b)
                )
            sol = np.linalg.solve(ata, (a * w[:, None]).T.dot(y))
            u[b], v[b] = float(sol[0]), float(sol[1])
        known = {}  # type: Dict[int, float]
        for jj in observed_j:
            num = den = 0.0
            for b, pts in rows_of.items():
                for j, y in pts:
                    if j == jj:
                        w = 1.0 / y**2
                        num += w * v[b] * (y - u[b])
                        den += w * v[b] ** 2
            if den > 1e-300:
                known[jj] = num / den
        if j_lo not in known or j_hi not in known or abs(known[j_hi] - known[j_lo]) < 1e-300:
            raise PredictError("the probes do not determine the knob curve")
        # Gauge: h = 0 at the lowest probed knob, 1 at the highest (u, v absorb the rest).
        h0, h1 = known[j_lo], known[j_hi]
        known = {jj: (val - h0) / (h1 - h0) for jj, val in known.items()}
        for jj, val in known.items():  # unprobed knobs do not enter the fit: fill them last
            h[jj] = val
        sse = 0.0
        for b, pts in rows_of.items():
            for j, y in pts:
                sse += ((u[b] + v[b] * h[j] - y) / y) ** 2
        if prev is not None and abs(prev - sse) <= 1e-13 * max(prev, 1e-30):
            break
        prev = sse
    h = _smooth_curve(kx, {jj: float(h[jj]) for jj in observed_j})
    # Final row solve on the final curve so u, v match h exactly.
    for b, pts in rows_of.items():
        j = np.array([p[0] for p in pts])
        y = np.array([p[1] for p in pts])
        w = 1.0 / y**2
        a = np.vstack([np.ones_like(y), h[j]]).T
        sol = np.linalg.solve((a * w[:, None]).T.dot(a), (a * w[:, None]).T.dot(y))
        u[b], v[b] = float(sol[0]), float(sol[1])
    n = sum(len(p) for p in rows_of.values())
    sse = sum(((u[b] + v[b] * h[j] - y) / y) ** 2 for b, pts in rows_of.items() for j, y in pts)
    return Surface(
        bs,
        ks,
        {b: u[b] for b in bs},
        {b: v[b] for b in bs},
        {k: float(h[kpos[k]]) for k in ks},
        math.sqrt(sse / max(n, 1)),
    )


def surface_value(surface: Surface, batch_size: int, knob: float) -> float:
    """The fitted value at one grid point (batch size and knob must be in the surface)."""
    return surface.u[batch_size] + surface.v[batch_size] * surface.h[float(knob)]


def interpolate_row(
    obs: Dict[Tuple[int, float], float], batch_size: int, knob: float
) -> Optional[float]:
    """Monotone fallback: linear interpolation between the probes of the same batch size."""
    pts = sorted((k, y) for (b, k), y in obs.items() if b == batch_size)
    if not pts or knob < pts[0][0] or knob > pts[-1][0]:
        return None
    return float(np.interp(knob, [p[0] for p in pts], [p[1] for p in pts]))


def _loo_errors(
    obs: Dict[Tuple[int, float], float], batch_sizes: Sequence[int], knobs: Sequence[float]
) -> Tuple[List[float], List[float]]:
    """Leave-one-out relative errors of the shape model and of the interpolation fallback,
    on the probes whose removal leaves both able to predict them."""
    shape_err, interp_err = [], []  # type: List[float], List[float]
    for key, y in obs.items():
        rest = dict(obs)
        del rest[key]
        guess = interpolate_row(rest, key[0], key[1])
        if guess is None:
            continue
        try:
            surf = fit_surface(rest, batch_sizes, knobs, iterations=100)
        except PredictError:
            continue
        shape_err.append(abs(surface_value(surf, key[0], key[1]) - y) / y)
        interp_err.append(abs(guess - y) / y)
    return shape_err, interp_err


def _rms(xs: Sequence[float]) -> Optional[float]:
    return math.sqrt(sum(x * x for x in xs) / len(xs)) if xs else None


# --------------------------------------------------------------------------------------------
# Whole profiles


def _ok(row: Row) -> bool:
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
    failed_b = set(int(float(r["batch_size"])) for r in rows if not _ok(r))
    wanted_b = [b for b in bs if b not in failed_b]
    measured = {}  # type: Dict[Tuple[int, float], Row]
    for r in rows:
        measured[(int(float(r["batch_size"])), float(r["freq_mhz"]))] = r
    obs = {}  # type: Dict[str, Dict[Tuple[int, float], float]]
    for q in QUANTITIES:
        vals = {}
        for key, r in measured.items():
            value = cell_number(r.get(q))
            if _ok(r) and value is not None and value > 0:
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
            _check_rows(obs[q], wanted_b)
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
    shape_err, interp_err = _loo_errors(obs, bs, fs)
    use_interp = bool(shape_err) and (_rms(interp_err) or 0.0) < 0.5 * (_rms(shape_err) or 0.0)
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
    err = _rms(interp_err if use_interp else shape_err)
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


def _check_rows(obs: Dict[Tuple[int, float], float], bs: Sequence[int]) -> None:
    for b in bs:
        mine = set(k for (bb, k) in obs if bb == b)
        if len(mine) < 2:
            raise PredictError(
                "batch size {} has {} probed knob value(s); prediction needs at least 2 "
                "per batch size".format(b, len(mine))
            )


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


# --------------------------------------------------------------------------------------------
# Carrying measured deviations across a table (drift, verify-before-trust)


def carry_deviation(
    rows: Sequence[Row], updates: Sequence[Row], power: float = 2.0, scale_measured: bool = True
) -> List[Row]:
    """Refresh a full table from a few re-measured points.

    Each row of ``updates`` (a measured profile row) replaces its grid point; every other
    ``ok`` row is scaled by the measured/old ratio of each column, interpolated from the
    updated points by inverse-distance weighting on log ratios over (batch-size rank, knob
    rank), so a deviation seen near a point moves it most (paper §4.1: "interpolating the
    deviations across operating points"). Scaled rows become ``source=predicted``: they are no
    longer what was measured there. Points of ``updates`` absent from ``rows`` are added.
    ``scale_measured=False`` leaves measured rows alone (verify-before-trust corrects only
    predictions; drift moves the whole table).
    """
    table = {}  # type: Dict[Tuple[int, float], Row]
    for r in rows:
        table[(int(float(r["batch_size"])), float(r["freq_mhz"]))] = dict(r)
    bs = sorted(set(k[0] for k in table) | set(int(float(u["batch_size"])) for u in updates))
    ks = sorted(set(k[1] for k in table) | set(float(u["freq_mhz"]) for u in updates))
    bpos = dict((b, i / max(len(bs) - 1, 1)) for i, b in enumerate(bs))
    kpos = dict((k, j / max(len(ks) - 1, 1)) for j, k in enumerate(ks))
    ratios = {}  # type: Dict[str, List[Tuple[float, float, float]]]
    new_keys = set()
    for u in updates:
        key = (int(float(u["batch_size"])), float(u["freq_mhz"]))
        new_keys.add(key)
        old = table.get(key)
        for q in QUANTITIES:
            now, before = (
                cell_number(u.get(q)),
                cell_number(old.get(q)) if old is not None else None,
            )
            if now is not None and before is not None and now > 0 and before > 0:
                ratios.setdefault(q, []).append(
                    (bpos[key[0]], kpos[key[1]], math.log(now / before))
                )
    if not scale_measured:  # measured rows are right: the deviation fades towards them
        for key, row in table.items():
            if key not in new_keys and _ok(row) and row.get("source") != "predicted":
                for pts in ratios.values():
                    pts.append((bpos[key[0]], kpos[key[1]], 0.0))
    out = []
    for key in sorted(table):
        row = table[key]
        if key in new_keys or not _ok(row):
            continue
        if not scale_measured and row.get("source") != "predicted":
            out.append(row)
            continue
        changed = False
        for q, pts in ratios.items():
            value = cell_number(row.get(q))
            if value is None:
                continue
            num = den = 0.0
            for pb, pk, lr in pts:
                w = 1.0 / ((bpos[key[0]] - pb) ** 2 + (kpos[key[1]] - pk) ** 2) ** (power / 2)
                num += w * lr
                den += w
            row[q] = value * math.exp(num / den)
            changed = True
        if changed:
            row["source"] = "predicted"
        out.append(row)
    out.extend(table[k] for k in sorted(table) if k not in new_keys and not _ok(table[k]))
    for u in updates:
        row = dict(u)
        if not row.get("source"):
            row["source"] = "measured"
        out.append(row)
    out.sort(key=lambda r: (int(float(r["batch_size"])), float(r["freq_mhz"])))
    return out
