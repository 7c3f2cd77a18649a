"""The candidate models of one profile column, each a plain function (issue 21).

No single model of a profile column holds on every device. The shared knob curve of
``predict_fit.py`` is right for a DVFS clock (``t = a + c/f``), but real grids measured
elsewhere (power-limit knobs on datacenter GPUs, Jetson power modes) bend differently from batch
to batch, and a model that is right for our own device model can be 2-3x worse than a naive one
there. So prediction keeps a small table of candidates and lets cross-validation on the probes
pick per grid and per column (``predict_select.py``):

- ``shape``: the shared knob curve ``u(b) + v(b) h(k)`` (the physical one for clock knobs);
- ``separable``: ``log y = a(b) + c(k)``, least squares (every batch scales alike);
- ``frame``: ``separable`` plus its residuals interpolated across the probed frame (a Coons
  patch: row and column interpolation minus the corners' bilinear part). Exact on any table
  of the form ``f(b) + g(k) + bilinear`` in (log b, k), and the natural fit when the probes
  are the grid's frame (both end batch sizes at every knob, both end knobs at every batch);
- ``interp``: linear interpolation along each batch size's own probes;
- ``cap``: a power-limit knob in watts: power is ``min(rho * limit, free power of b)`` and step
  time a power law of the share of the free power the limit leaves (``t ~ (P/P_free)^-alpha``),
  learned from every probe; only offered when the knob is recognisably a power limit.

Every model takes ``(obs, batch_sizes, knobs, points)`` and returns a value per point, or
raises ``PredictError`` when the probes cannot support it. A model that cannot predict one
point (outside the rows it interpolates) falls back to ``separable`` there, so every model
answers every point and cross-validation compares like with like.

Runs on the board: Python 3.6, numpy 1.19 (only old, stable numpy API).
"""

import math
from typing import Callable, Dict, Optional, Sequence, Tuple, TypeVar

import numpy as np

from fleet.agent.prediction.fit import PredictError, fit_surface, interpolate_row, surface_value

Key = Tuple[int, float]
Obs = Dict[Key, float]


def separable(
    obs: Obs, bs: Sequence[int], ks: Sequence[float], points: Sequence[Key], columns=None
):
    """``log y = a(b) + c(k)`` by least squares; unprobed knobs take ``c`` interpolated in k,
    batch sizes without probes ``a`` interpolated in log2(b). No extrapolation."""
    a, c = _separable_terms(obs)
    out = {}
    for b, k in points:
        out[(b, k)] = math.exp(_term(a, b, math.log2) + _term(c, k, float))
    return out


def _separable_terms(obs: Obs) -> Tuple[Dict[float, float], Dict[float, float]]:
    keys = sorted(obs)
    rows = sorted(set(b for b, _ in keys))
    cols = sorted(set(k for _, k in keys))
    if len(rows) < 1 or len(cols) < 2:
        raise PredictError("a separable fit needs probes at 2 or more knob values")
    bi = dict((b, i) for i, b in enumerate(rows))
    ki = dict((k, len(rows) + j) for j, k in enumerate(cols))
    design = np.zeros((len(keys) + 1, len(rows) + len(cols)))
    y = np.zeros(len(keys) + 1)
    for n, (b, k) in enumerate(keys):
        design[n, bi[b]] = 1.0
        design[n, ki[k]] = 1.0
        y[n] = math.log(obs[(b, k)])
    design[-1, ki[cols[0]]] = 1.0  # gauge: c = 0 at the lowest probed knob
    sol = np.linalg.lstsq(design, y, rcond=None)[0]
    return (
        dict((float(b), float(sol[bi[b]])) for b in rows),
        dict((float(k), float(sol[ki[k]])) for k in cols),
    )


def _term(table: Dict[float, float], at: float, axis: Callable[[float], float]) -> float:
    if float(at) in table:
        return table[float(at)]
    xs = sorted(table)
    if at < xs[0] or at > xs[-1]:
        raise PredictError("{:g} is outside the probed range {:g}..{:g}".format(at, xs[0], xs[-1]))
    return float(np.interp(axis(at), [axis(x) for x in xs], [table[x] for x in xs]))


def frame(obs: Obs, bs: Sequence[int], ks: Sequence[float], points: Sequence[Key], columns=None):
    """``separable`` corrected by a Coons patch of its log residuals (see the module text)."""
    a, c = _separable_terms(obs)
    resid = dict((key, math.log(y) - a[float(key[0])] - c[float(key[1])]) for key, y in obs.items())
    out = {}
    for b, k in points:
        base = _term(a, b, math.log2) + _term(c, k, float)
        out[(b, k)] = math.exp(base + _coons(resid, b, k))
    return out


_N = TypeVar("_N", int, float)  # a batch size or a knob value


def _bracket(values: Sequence[_N], at: _N) -> Optional[Tuple[_N, _N]]:
    lower = [v for v in values if v < at]
    upper = [v for v in values if v > at]
    if not lower or not upper:
        return None
    return max(lower), min(upper)


def _coons(resid: Dict[Key, float], b: int, k: float) -> float:
    """Residual at (b, k) from the probes in its row and column (0 when it has neither)."""
    if (b, k) in resid:
        return resid[(b, k)]
    row = _bracket([kk for (bb, kk) in resid if bb == b], k)
    col = _bracket([bb for (bb, kk) in resid if kk == k], b)
    r_row = r_col = None
    if row is not None:
        k0, k1 = row
        w = (k - k0) / (k1 - k0)
        r_row = (1 - w) * resid[(b, k0)] + w * resid[(b, k1)]
    if col is not None:
        b0, b1 = col
        u = (math.log2(b) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
        r_col = (1 - u) * resid[(b0, k)] + u * resid[(b1, k)]
    if r_row is not None and r_col is not None:
        corners = [(b0, k0), (b0, k1), (b1, k0), (b1, k1)]
        if all(p in resid for p in corners):
            bilinear = (1 - u) * ((1 - w) * resid[(b0, k0)] + w * resid[(b0, k1)]) + u * (
                (1 - w) * resid[(b1, k0)] + w * resid[(b1, k1)]
            )
            return r_row + r_col - bilinear
        return 0.5 * (r_row + r_col)
    if r_row is not None:
        return r_row
    if r_col is not None:
        return r_col
    return 0.0


def shape(obs: Obs, bs: Sequence[int], ks: Sequence[float], points: Sequence[Key], columns=None):
    """The shared knob curve of ``predict_fit.py``; non-positive values fall back."""
    wanted = sorted(set(int(b) for b, _ in points) | set(b for b, _ in obs))
    surf = fit_surface(obs, wanted, sorted(set(float(k) for _, k in points)))
    out = {}
    for b, k in points:
        value = surface_value(surf, b, k)
        if value > 0:
            out[(b, k)] = value
    return _fill(out, obs, bs, ks, points)


def interp(obs: Obs, bs: Sequence[int], ks: Sequence[float], points: Sequence[Key], columns=None):
    """Each batch size's own probes, linearly interpolated along the knob."""
    out = {}
    for b, k in points:
        value = interpolate_row(obs, b, k)
        if value is not None and value > 0:
            out[(b, k)] = value
    return _fill(out, obs, bs, ks, points)


def _fill(got: Dict[Key, float], obs: Obs, bs, ks, points: Sequence[Key]) -> Dict[Key, float]:
    """Points a model could not answer get the separable answer (so all models answer all)."""
    missing = [p for p in points if p not in got]
    if missing:
        got.update(separable(obs, bs, ks, missing))
    return got


class NotApplicable(PredictError):
    """The model does not apply to this grid (``cap`` on a clock knob): not an error to report
    when another model fails for a real reason."""


PINNED = 0.85
"""How close to the largest power/limit ratio a probe must be to count as pinned to its limit."""


def cap_ratio(peak: Obs) -> Optional[float]:
    """If the knob is a power limit in watts, the ratio power/limit where power sits at it.

    Recognised when 3+ probes, at 2+ different knobs, draw nearly the same fraction (within
    ``PINNED`` of the largest, which is between 0.5 and 1.2) of their knob: power pinned to the
    limit. Real cards sit at 0.9-1.0 of a limit, different per batch size, and a reading is
    noisy by a percent or two, so "the same" is loose. A clock in MHz never looks
    like that (watts per MHz are a hundredth of that, and power is affine in the clock). None
    otherwise.
    """
    ratios = [(k, p / k) for (_b, k), p in peak.items() if k > 0]
    if not ratios:
        return None
    best = max(r for _k, r in ratios)
    if not 0.5 <= best <= 1.2:
        return None
    pinned = [(k, r) for k, r in ratios if r >= PINNED * best]
    if len(pinned) < 3 or len(set(k for k, _r in pinned)) < 2:
        return None
    return float(np.median([r for _k, r in pinned]))


POWER_COLUMNS = ("peak_power_w", "mean_power_w")


def cap(obs: Obs, bs: Sequence[int], ks: Sequence[float], points: Sequence[Key], columns=None):
    """The power-limit model. A power column is ``min(rho * limit, the row's free power)``;
    any other column (time) follows the share of its row's top power the limit leaves, as a
    curve in log share learned from every probe below a row's top."""
    columns = columns or {}
    power = columns.get("peak_power_w") or columns.get("mean_power_w")
    if not power:
        raise NotApplicable("the power-limit model needs power probes")
    rho = cap_ratio(power)
    if rho is None:
        raise NotApplicable("the knob is not a power limit in watts")
    own = cap_ratio(obs) if any(obs is columns.get(q) for q in POWER_COLUMNS) else None
    if own is not None:  # a power column pinned to the limit itself
        return dict((p, _capped_power(obs, own, p[0], p[1])) for p in points)
    tops = {}  # type: Dict[int, float]
    for b, k in obs:
        if (b, k) in power and k > tops.get(b, -math.inf):
            tops[b] = k
    xs, ys = [], []
    for (b, k), y in obs.items():
        top = tops.get(b)
        if top is None or top == k or (b, k) not in power:
            continue
        xs.append(math.log(power[(b, k)] / power[(b, top)]))
        ys.append(math.log(y / obs[(b, top)]))
    if len(xs) < 2:
        raise PredictError("the power-limit model needs 2 or more probes below a row's top")
    x = np.array(xs)
    coef = np.linalg.lstsq(np.vstack([x, x * x]).T, np.array(ys), rcond=None)[0]
    out = {}
    for b, k in points:
        top = tops.get(b)
        if top is None:
            continue
        lx = math.log(_capped_power(power, rho, b, k) / power[(b, top)])
        out[(b, k)] = obs[(b, top)] * math.exp(coef[0] * lx + coef[1] * lx * lx)
    return _fill(out, obs, bs, ks, points)


def _capped_power(power: Obs, rho: float, b: int, k: float) -> float:
    """Power at limit k: ``min(rho_b * k, free_b)``. ``rho_b`` is the row's own ratio of power
    to limit at its lowest probed limit (cards and batch sizes sit at different fractions of
    a limit, 0.9-1.0); ``free_b`` the row's top probe when it draws less than its own limit
    there (else unbounded). ``rho`` (the grid's) only stands in for a row without probes
    below its top."""
    if (b, k) in power:
        return power[(b, k)]
    row = sorted((kk, p) for (bb, kk), p in power.items() if bb == b)
    if not row:
        raise PredictError("batch size {} has no power probe".format(b))
    low_k, low_p = row[0]
    top_k, top_p = row[-1]
    own = low_p / low_k if len(row) >= 2 and low_k > 0 else rho
    free = top_p if top_p < 0.97 * own * top_k else math.inf
    return min(own * k, free)


MODELS = {
    "cap": cap,
    "shape": shape,
    "separable": separable,
    "frame": frame,
    "interp": interp,
}  # type: Dict[str, Callable[..., Dict[Key, float]]]
"""The candidates every column is offered, in order of preference on a tie or when the probes
cannot validate them (the next model is one function here plus one line in this table). The
physical models come first: ``cap`` where the knob is a power limit, else the shared curve. A
model that raises ``PredictError`` on a probe set (``cap`` on a clock knob) is simply not a
candidate for it."""
