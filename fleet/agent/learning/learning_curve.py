"""The device's own learning curve: how many samples it still needs, from what it has seen.

Why: the shipped samples-to-target is a proxy's, and the device's data may need twice as many
(docs/analogue). Every evaluation the trainer makes is a point ``(samples, accuracy)`` of the
device's own curve; fitting the curve and extrapolating it to the target says how many samples
the running batch size needs, long before the target is reached, with an uncertainty that
shrinks as the curve approaches it. ``efficiency_belief.Belief`` weighs that against the
shipped estimate; the closed loop and the device round re-select with the result.

The curve: ``a(s) = a_inf - (a_inf - a_0) g(s)`` with ``g`` a saturating power law
``(1 + s / s0)^-alpha`` or an exponential approach ``exp(-s / tau)``; real curves need both (the
MNIST fine-tunes of docs/analogue have a power-law tail, the text ones rise nearly linearly, an
exponential fits neither and the power law alone overshoots an exponential by 2x at a third of
the way). Only the evaluations after ``RECENT`` of the samples seen are fitted (a new task's head
is learnt first: that start says nothing of the tail). For fixed ``(alpha, s0)`` or ``tau`` the
curve is linear in ``(a_inf, a_0)``, so each cell of the grid is a closed-form least squares;
the cells are averaged with weights ``exp(-SSE / 2 sigma^2)`` (a flat prior over the grid), so
an early curve that several shapes explain equally gives a wide prediction.

What is predicted is what the trainer will report: the *first evaluation* at or above the
target, not where the mean curve crosses it. Evaluations are noisy (the fit's residual spread,
``sigma``), so near a plateau the first pass comes well before the mean crossing; with the
evaluations every ``every`` samples, the chance of no pass up to ``s`` is
``prod_j Phi((target - a(s_j)) / sigma)``, integrated on a geometric grid. The expected first
pass is the integral of that survival; when even the far horizon leaves better than even odds
of no pass, the cell says "not reached".

The spread of ``log N`` is the cells' spread plus an extrapolation term that grows with how far
beyond the last evaluation the target lies (``EXTRAPOLATION_SD`` per e-fold, calibrated on the
real curves of ``docs/analogue``: ``benchmarks/efficiency_learning.py --calibrate``).

Python 3.6 compatible, stdlib only.
"""

import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

ALPHAS = (0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 4.0)
# scale of the decay over the samples seen: geometric grids, fine enough that a cell sits near
# any curve's own (a coarse grid misfits an exponential by more than the evaluation noise)
S0_FRACTIONS = tuple(0.01 * 1.5**k for k in range(21))  # 0.01 .. 33
TAU_FRACTIONS = tuple(
    0.05 * 1.25**k for k in range(24)
)  # exponential: tau / samples seen  # of the last evaluated sample count
MIN_POINTS = 5  # evaluations after the start before a fit says anything
MIN_SIGMA = 0.002  # accuracy; no curve is known better than this
RECENT = 0.3  # fit the evaluations after this fraction of the samples seen
HORIZON = 30.0  # the farthest extrapolation, in multiples of the samples seen
GRID = 160  # integration points between the last evaluation and the horizon
#: sd of log N added per e-fold of extrapolation (misspecification of the curve family)
EXTRAPOLATION_SD = 0.25
REACHED_SD = 0.02  # sd of log N once the target was met (the evaluation cadence's rounding)

CurveFit = NamedTuple(
    "CurveFit",
    [
        ("samples", float),  # expected samples to the first evaluation at the target (inf: never)
        ("log_sd", float),  # sd of log(samples)
        ("reach_prob", float),  # weight of the cells that reach the target within the horizon
        ("a_inf", float),  # the best cell's asymptote
        ("sigma", float),  # evaluation noise (residual sd)
        ("points", int),
        ("last_samples", float),
        ("reached", bool),  # the target was already met at ``samples``
    ],
)


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _log_phi(z: float) -> float:
    if z > -30.0:
        p = _phi(z)
        if p > 0:
            return math.log(p)
    # Mills-ratio tail for very negative z
    return -0.5 * z * z - math.log(-z) - 0.5 * math.log(2.0 * math.pi)


def _decay(x: float, alpha: float, s0: float) -> float:
    """The curve's decaying part: a power law ``(1 + x/s0)^-alpha``, or with ``alpha`` 0 an
    exponential ``exp(-x/s0)`` (the limit of the power law for large alpha and s0)."""
    if alpha == 0.0:
        return math.exp(-x / s0)
    return (1.0 + x / s0) ** (-alpha)


def _cell_fit(
    xs: Sequence[float], ys: Sequence[float], alpha: float, s0: float
) -> Optional[Tuple[float, float, float]]:
    """(a_inf, a_0, SSE) of the least squares for one (alpha, s0); a_inf is capped at 1."""
    g = [_decay(x, alpha, s0) for x in xs]
    n = float(len(xs))
    sg = sum(g)
    sgg = sum(v * v for v in g)
    sy = sum(ys)
    sgy = sum(a * b for a, b in zip(g, ys))
    den = n * sgg - sg * sg
    if den <= 1e-18:
        return None
    # y = A + B g  with  A = a_inf, B = a_0 - a_inf
    B = (n * sgy - sg * sy) / den
    A = (sy - B * sg) / n
    if A > 1.0:  # accuracy cannot exceed 1: refit with the asymptote there
        A = 1.0
        B = sum((y - 1.0) * v for y, v in zip(ys, g)) / sgg
    sse = sum((y - A - B * v) ** 2 for y, v in zip(ys, g))
    return A, A + B, sse


def _first_pass(
    a_inf: float,
    a0: float,
    alpha: float,
    s0: float,
    target: float,
    sigma: float,
    start: float,
    every: float,
    horizon: float,
) -> float:
    """Expected samples at the first evaluation >= target after ``start`` (inf if unlikely
    within the horizon)."""
    if horizon <= start:
        return math.inf
    ratio = (horizon / start) ** (1.0 / GRID)
    log_surv = 0.0
    integral = 0.0
    prev_s = start
    prev_surv = 1.0
    for k in range(1, GRID + 1):
        s = start * ratio**k
        mid = 0.5 * (prev_s + s)
        a = a_inf - (a_inf - a0) * _decay(mid, alpha, s0)
        evals = (s - prev_s) / every
        log_surv += evals * _log_phi((target - a) / sigma)
        surv = math.exp(log_surv) if log_surv > -700 else 0.0
        integral += 0.5 * (prev_surv + surv) * (s - prev_s)
        prev_s, prev_surv = s, surv
        if surv < 1e-6:
            return start + integral
    if prev_surv > 0.5:
        return math.inf
    return start + integral + prev_surv * (horizon - start)


def fit_curve(
    curve: Sequence[Sequence[float]],
    target: float,
    every: Optional[float] = None,
    horizon: Optional[float] = None,
) -> Optional[CurveFit]:
    """Fit ``(samples, accuracy)`` evaluations and predict samples to the target.

    ``every``: the evaluation cadence in samples (default: the median spacing of the points);
    ``horizon``: the farthest sample count to extrapolate to (default ``HORIZON`` x the last).
    None when there are too few evaluations to say anything.
    """
    pts = sorted((float(s), float(a)) for s, a in curve if s >= 0 and math.isfinite(a))
    if not pts:
        return None
    hit = next((s for s, a in pts if a >= target), None)
    if hit is not None:  # the target was met: the count is known
        return CurveFit(hit, REACHED_SD, 1.0, math.nan, math.nan, len(pts), hit, True)
    later = [p for p in pts if p[0] > 0]
    if len(later) < MIN_POINTS:
        return None
    last = pts[-1][0]
    recent = [p for p in pts if p[0] >= RECENT * last]
    if len(recent) < MIN_POINTS:
        recent = pts[-MIN_POINTS:]
    xs = [s for s, _ in recent]
    ys = [a for _, a in recent]
    if every is None:
        gaps = sorted(b - a for a, b in zip(xs[-MIN_POINTS:], xs[-MIN_POINTS + 1 :]))
        every = gaps[len(gaps) // 2] if gaps else last / len(xs)
    every = max(float(every), 1.0)
    far = float(horizon) if horizon else HORIZON * last
    cells = []  # (sse, a_inf, a0, alpha, s0)
    grid = [(a, f) for a in ALPHAS for f in S0_FRACTIONS] + [(0.0, f) for f in TAU_FRACTIONS]
    for alpha, frac in grid:
        s0 = frac * last
        got = _cell_fit(xs, ys, alpha, s0)
        if got is not None:
            cells.append((got[2], got[0], got[1], alpha, s0))
    if not cells:
        return None
    dof = max(len(xs) - 4, 1)
    best = min(cells)
    sigma = max(math.sqrt(best[0] / dof), MIN_SIGMA)
    weights = [math.exp(-(c[0] - best[0]) / (2.0 * sigma * sigma)) for c in cells]
    logs = []  # (weight, log N)
    missed = 0.0
    for w, (_, a_inf, a0, alpha, s0) in zip(weights, cells):
        if w < 1e-4:
            continue
        n = _first_pass(a_inf, a0, alpha, s0, target, sigma, last, every, far)
        if math.isinf(n):
            missed += w
        else:
            logs.append((w, math.log(n)))
    total = sum(w for w, _ in logs) + missed
    reach = (total - missed) / total if total > 0 else 0.0
    if not logs or reach < 0.5:
        return CurveFit(math.inf, math.inf, reach, best[1], sigma, len(xs), last, False)
    wsum = sum(w for w, _ in logs)
    mean = sum(w * v for w, v in logs) / wsum
    var = sum(w * (v - mean) ** 2 for w, v in logs) / wsum
    var += (EXTRAPOLATION_SD * max(0.0, mean - math.log(last))) ** 2
    return CurveFit(math.exp(mean), math.sqrt(var), reach, best[1], sigma, len(xs), last, False)


def remaining(fit: CurveFit, done_samples: float) -> float:
    """Samples still needed at the running batch size (0 once reached, inf if never)."""
    if fit.reached:
        return 0.0
    return max(fit.samples - done_samples, 0.0)


def curve_points(raw: object) -> List[Tuple[float, float]]:
    """``[[samples, accuracy], ...]`` from a reply or a checkpoint, malformed entries dropped."""
    out = []  # type: List[Tuple[float, float]]
    if not isinstance(raw, (list, tuple)):
        return out
    for item in raw:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            try:
                s, a = float(item[0]), float(item[1])
            except (TypeError, ValueError):
                continue
            if math.isfinite(s) and math.isfinite(a) and s >= 0:
                out.append((s, a))
    return out
