"""The shared-curve model of a profile column: fit it, evaluate it, score it (issue 11).

Why this shape: on a DVFS GPU the step time is a part that does not scale with the clock plus a
part that does, ``t(b, f) = a(b) + c(b) / f``, and power is idle/host plus dynamic power,
``P(b, f) = p0(b) + s(b) * f * V(f)^2`` with an unknown voltage curve. Both are one *shared*
curve of the knob times a per-batch gain plus a per-batch offset::

    Y(b, k) = u(b) + v(b) * h(k)

so we learn ``h`` from the points measured across batch sizes (never assuming the knob is a
clock: a power-limit knob in watts gets its own learned curve) and two numbers per batch size.
Fitting is alternating weighted least squares on relative error. Between probed knobs ``h`` is
interpolated as a fitted power law ``alpha + beta * k^gamma`` plus a linearly interpolated
residual, which is exact for ``1/f`` and close for ``f V(f)^2``. It is one of the candidate
models of ``predict_models.py`` (``shape``); ``predict_select.py`` scores it against the others
by validation across whole probed rows.

Separate from ``predict.py`` because this is the numerical model of one column on its own
(observations in, a surface out); filling a whole profile table (which quantities, failed batch
sizes, power-limit knobs, row metadata) is the caller's job. ``PredictError`` lives here, the
lowest of the prediction modules, since the design and the table filling raise it too.

Runs on the board: Python 3.6, numpy 1.19 (only old, stable numpy API).
"""

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

GAMMAS = np.linspace(-3.0, 3.0, 121)


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
    # Every gamma's straight-line fit of hk on phi(k, gamma) at once, in closed form (centred
    # sums: a line through two or more distinct x); the first gamma whose error is lowest by
    # more than 1e-15 wins, as a scan in GAMMAS' order would choose.
    x = np.array([_phi(kx, g) for g in GAMMAS])  # (gammas, probes)
    xc = x - x.mean(axis=1)[:, None]
    sxx = np.sum(xc * xc, axis=1)
    ok = sxx > (np.finfo(float).eps * len(kx) * np.max(np.abs(x), axis=1)) ** 2
    slope = np.where(ok, np.sum(xc * (hk - hk.mean()), axis=1) / np.where(ok, sxx, 1.0), 0.0)
    icpt = hk.mean() - slope * x.mean(axis=1)
    errs = np.sum((icpt[:, None] + slope[:, None] * x - hk) ** 2, axis=1)
    best = None
    for i in np.flatnonzero(ok):
        err = float(errs[i])
        if best is None or err < best[0] - 1e-15:
            best = (err, float(GAMMAS[i]), (float(icpt[i]), float(slope[i])))
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
    check_rows(obs, bs)
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
    # Every probe once, flat, in the rows' order: its row, its knob's index, y and weight 1/y^2
    # (relative error). Sums over a row or over a knob are then one ``bincount`` each, so an
    # iteration costs a handful of array operations, not a Python loop over the probes (this
    # fit runs hundreds of times in one validated prediction, on the board too).
    rows = list(rows_of.items())
    rb = np.array([i for i, (_b, pts) in enumerate(rows) for _p in pts], dtype=int)
    rj = np.array([j for _b, pts in rows for j, _y in pts], dtype=int)
    ry = np.array([y for _b, pts in rows for _j, y in pts], dtype=float)
    rw = 1.0 / ry**2
    n_rows, n_k = len(rows), len(ks)
    observed = np.array(observed_j, dtype=int)
    # Start from a straight line in the knob; alternating least squares does the rest.
    h = (kx - lo) / (hi - lo)
    prev = None
    for _ in range(int(iterations)):
        u, v = _row_solve(h, rb, rj, ry, rw, n_rows, rows, check=True)
        vb = v[rb]
        num = np.bincount(rj, rw * vb * (ry - u[rb]), n_k)[observed]
        den = np.bincount(rj, rw * vb * vb, n_k)[observed]
        floor = max(1e-300, 1e-12 * float(np.max(den)))  # a knob only flat rows saw: unknown
        known = {int(jj): float(nn / dd) for jj, nn, dd in zip(observed, num, den) if dd > floor}
        if j_lo not in known or j_hi not in known or abs(known[j_hi] - known[j_lo]) < 1e-300:
            raise PredictError("the probes do not determine the knob curve")
        # Gauge: h = 0 at the lowest probed knob, 1 at the highest (u, v absorb the rest).
        h0, h1 = known[j_lo], known[j_hi]
        for jj, val in known.items():  # unprobed knobs do not enter the fit: fill them last
            h[jj] = (val - h0) / (h1 - h0)
        sse = float(np.sum(((u[rb] + v[rb] * h[rj] - ry) / ry) ** 2))
        if prev is not None and abs(prev - sse) <= 1e-13 * max(prev, 1e-30):
            break
        prev = sse
    h = _smooth_curve(kx, {jj: float(h[jj]) for jj in observed_j})
    # Final row solve on the final curve so u, v match h exactly.
    u, v = _row_solve(h, rb, rj, ry, rw, n_rows, rows, check=False)
    n = len(ry)
    sse = float(np.sum(((u[rb] + v[rb] * h[rj] - ry) / ry) ** 2))
    row_of = {b: i for i, (b, _pts) in enumerate(rows)}
    return Surface(
        bs,
        ks,
        {b: float(u[row_of[b]]) for b in bs},
        {b: float(v[row_of[b]]) for b in bs},
        {k: float(h[kpos[k]]) for k in ks},
        math.sqrt(sse / max(n, 1)),
    )


def _row_solve(
    h: np.ndarray,
    rb: np.ndarray,
    rj: np.ndarray,
    ry: np.ndarray,
    rw: np.ndarray,
    n_rows: int,
    rows: List[Tuple[int, List[Tuple[int, float]]]],
    check: bool,
) -> Tuple[np.ndarray, np.ndarray]:
    """Every row's (u, v) at once: the weighted least squares of ``y = u + v h(k)`` over its
    probes, by the 2x2 normal equations. With ``check``, a row whose probes cannot separate
    the curve (a singular system) is named."""
    hj = h[rj]
    s0 = np.bincount(rb, rw, n_rows)
    s1 = np.bincount(rb, rw * hj, n_rows)
    s2 = np.bincount(rb, rw * hj * hj, n_rows)
    t0 = np.bincount(rb, rw * ry, n_rows)
    t1 = np.bincount(rb, rw * hj * ry, n_rows)
    det = s0 * s2 - s1 * s1
    if check:
        bad = np.abs(det) < 1e-18 * np.maximum(1.0, (s0 + s2) ** 2)
        if np.any(bad):
            raise PredictError(
                "batch size {}: its probes do not separate the knob curve (probe two "
                "knob values further apart)".format(rows[int(np.argmax(bad))][0])
            )
    return (s2 * t0 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det


def check_rows(obs: Dict[Tuple[int, float], float], bs: Sequence[int]) -> None:
    """Every batch size needs two probed knob values or more: a curve through one point is a
    guess, and prediction refuses to guess."""
    for b in bs:
        mine = set(k for (bb, k) in obs if bb == b)
        if len(mine) < 2:
            raise PredictError(
                "batch size {} has {} probed knob value(s); prediction needs at least 2 "
                "per batch size".format(b, len(mine))
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
