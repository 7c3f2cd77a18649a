"""Choose a profile column's model by validation across whole rows, and bound its power.

Why per grid: a model that is right on one device is wrong on another (see
``predict_models.py``), and the only data a device has about itself are its probes.

Why whole rows (issue 30): a point to predict sits in a row that was probed at its two end knobs
only. Leaving out one probe at a time, with the rest of its row still there, asked an easier
question than the targets pose, and on grids nobody had seen the kept model (``interp`` once,
with 16.7 % validation error) was worse than the plain separable fit. So a *fold* is one probed
row whose interior probes are all held out at once, its two ends kept: exactly the
knowledge a target row has. Every candidate predicts every held-out cell of every fold.

Why the simplest within the noise: with a handful of folds, the lowest validation error is
partly luck, and the more flexible models are the luckier. The model kept is the first one in
``SIMPLICITY`` whose validation error exceeds the best one's by no more than one standard error
of their paired per-cell difference (the one-standard-error rule), so a flexible model must earn
its place by more than the folds' noise; ``separable``, the simplest, is kept unless another is
clearly better.

Why a bound: an error of 2 % on power is harmless for time but decides whether a point is over
a budget. The kept model's held-out residuals say how far the truth has been from its
prediction on this very device; predicted power carries an upper bound, the largest of the
plausible models' predictions (those within the noise of the best) times ``1 + margin``, and
selection on predicted points uses the bound (``fleet.core.profile.feasible``). Where the knob is
a power limit the card enforces, the bound is also cut to the largest share of its limit any
probe drew (times ``1 + margin``): a limit is physics, not a model, so a model's wide miss
cannot exclude a point whose limit already keeps it under the budget.

Runs on the board: Python 3.6, numpy 1.19.
"""

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from fleet.agent.prediction.fit import PredictError
from fleet.agent.prediction.models import MODELS, POWER_COLUMNS, NotApplicable, cap_ratio

Key = Tuple[int, float]
Obs = Dict[Key, float]

SIMPLICITY = ("separable", "frame", "cap", "shape", "interp")
"""Candidates from the fewest assumptions to the most: the order the one-standard-error rule
walks, and the order of preference when nothing can be validated is ``MODELS``' (physical)."""
NOISE = 0.005
"""Differences in held-out error below half a percent are measurement noise on any grid we have
(repeat measurements of one point differ by that much), whatever the folds' spread says."""
UNVALIDATED_MARGIN = 0.10  # too few probes to validate: assume the model may be 10 % low
MIN_CELLS = 3  # held-out cells below which the bound's margin is at least UNVALIDATED_MARGIN

Choice = NamedTuple(
    "Choice",
    [
        ("model", str),
        ("values", Dict[Key, float]),  # the chosen model at the requested points
        ("cv_error", Optional[float]),  # its mean |relative| error on the held-out cells
        ("cv_errors", Dict[str, float]),  # every candidate's, for the report
        ("margin", float),  # upper-bound margin: largest relative miss seen in validation
        ("upper", Dict[Key, float]),  # upper bound at the requested points (see ``choose``)
    ],
)

Fold = NamedTuple("Fold", [("kept", Obs), ("held", List[Key])])


def folds(obs: Obs) -> List[Fold]:
    """One fold per probed batch size with 3 or more probed knobs: its interior probes held out
    together, its two end knobs (and every other probe) kept. A held-out cell is then predicted
    as a target is: from its own row's ends and the knob's effect on the other rows.

    Rows only, not columns: a column's held-out cells would leave their rows with one end,
    which no target has (a power-limit row without its top limit does not know its free
    power), and the model good at the targets would look bad at a question nobody asks."""
    rows = {}  # type: Dict[int, List[Key]]
    for key in obs:
        rows.setdefault(key[0], []).append(key)
    out = []  # type: List[Fold]
    for b in sorted(rows):
        line = sorted(rows[b])
        if len(line) < 3:
            continue
        gone = set(line[1:-1])
        out.append(Fold(dict((p, y) for p, y in obs.items() if p not in gone), line[1:-1]))
    return out


def cross_validate(
    name: str, columns: Dict[str, Obs], bs: Sequence[int], ks: Sequence[float], model: str
) -> List[float]:
    """Signed residuals ``truth / prediction - 1`` of one model on one column, one per held-out
    cell of :func:`folds` in order (NaN where the model cannot fit that fold). Every column
    loses the fold's cells, as if they had never been measured."""
    fn = MODELS[model]
    out = []  # type: List[float]
    for fold in folds(columns[name]):
        gone = set(fold.held)
        rest = dict(
            (q, dict((p, y) for p, y in obs.items() if p not in gone)) for q, obs in columns.items()
        )
        try:
            guess = fn(rest[name], bs, ks, fold.held, rest)
        except PredictError:
            out.extend([math.nan] * len(fold.held))
            continue
        for key in fold.held:
            g = guess.get(key, math.nan)
            out.append(columns[name][key] / g - 1.0 if g > 0 else math.nan)
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _standard_error(xs: Sequence[float]) -> float:
    """Of the mean; 0 for a single cell (its spread is unknown: only ``NOISE`` then protects
    the simpler model, and a model far better on the one cell there is still taken)."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def within_noise(residuals: Dict[str, List[float]], common: Sequence[int]) -> List[str]:
    """The models whose held-out error is within one standard error of the best one's (paired,
    per cell, on the ``common`` cells every model predicted), in ``SIMPLICITY`` order."""
    err = dict((m, [abs(residuals[m][i]) for i in common]) for m in residuals)
    best = min(err, key=lambda m: (_mean(err[m]), _rank(m)))
    out = []
    for m in sorted(err, key=_rank):
        diff = [a - b for a, b in zip(err[m], err[best])]
        if _mean(diff) <= max(_standard_error(diff), NOISE) or m == best:
            out.append(m)
    return out


def _rank(model: str) -> int:
    return SIMPLICITY.index(model) if model in SIMPLICITY else len(SIMPLICITY)


def choose(
    name: str,
    columns: Dict[str, Obs],
    bs: Sequence[int],
    ks: Sequence[float],
    points: Sequence[Key],
    models: Optional[Sequence[str]] = None,
) -> Choice:
    """Fit every candidate on all probes, validate it across whole rows, keep the simplest
    within the noise of the best.

    Candidates that cannot fit the full probe set are dropped; if none can, the first error
    is raised (naming the column). With too few probes to validate (no fold, or no cell every
    candidate predicts) the first candidate of ``MODELS`` that fits is kept and its error
    reported as unknown.
    """
    fitted = {}  # type: Dict[str, Dict[Key, float]]
    first_error = None
    for model in models or list(MODELS):
        try:
            values = MODELS[model](columns[name], bs, ks, points, columns)
        except NotApplicable:
            continue
        except PredictError as exc:
            first_error = first_error or exc
            continue
        if all(v > 0 and math.isfinite(v) for v in values.values()):
            fitted[model] = values
    if not fitted:
        raise PredictError("{}: {}".format(name, first_error or "no model fits the probes"))
    residuals = dict((m, cross_validate(name, columns, bs, ks, m)) for m in fitted)
    # Compare like with like: on the cells every validated model could predict. A model that
    # could predict none of them is not ranked by validation.
    validated = [m for m in fitted if any(not math.isnan(r) for r in residuals[m])]
    n = len(residuals[validated[0]]) if validated else 0
    common = [i for i in range(n) if all(not math.isnan(residuals[m][i]) for m in validated)]
    scores = dict(
        (m, sum(abs(residuals[m][i]) for i in common) / len(common)) for m in validated if common
    )
    if scores:
        plausible = within_noise(dict((m, residuals[m]) for m in scores), common)
        best = plausible[0]
    else:  # nothing validated: the physical prior's order (a power limit's own model first)
        best = min(fitted, key=lambda m: list(MODELS).index(m))
        plausible = [best]
    margin = bound_margin([r for r in residuals[best] if not math.isnan(r)])
    upper = dict((p, max(fitted[m][p] for m in plausible) * (1.0 + margin)) for p in points)
    share = limit_share(columns[name]) if name in POWER_COLUMNS else None
    if share is not None:  # the card holds power under its limit: no bound need exceed that
        ceiling = share * (1.0 + margin)
        upper = dict((p, max(min(u, ceiling * p[1]), fitted[best][p])) for p, u in upper.items())
    return Choice(best, fitted[best], scores.get(best), scores, margin, upper)


def bound_margin(seen: Sequence[float]) -> float:
    """The bound's margin from the kept model's held-out residuals (``truth / prediction - 1``):
    the largest miss. Symmetric on purpose: a model that over-predicted the held-out cells may
    under-predict elsewhere by as much; the bound covers the largest miss either way. With
    fewer than ``MIN_CELLS`` residuals, at least ``UNVALIDATED_MARGIN``: the largest of one or
    two misses says little about the next."""
    margin = max([0.0] + [abs(r) for r in seen])
    if len(seen) < MIN_CELLS:
        margin = max(margin, UNVALIDATED_MARGIN)
    return margin


def limit_share(power: Obs) -> Optional[float]:
    """Where the knob is a power limit, the largest share of its limit any probe drew (None
    otherwise). Why the largest and not the row's own: a row's share is known from its probes
    only, and the bound must hold for every row; the margin on top covers reading noise."""
    if cap_ratio(power) is None:
        return None
    return max(p / k for (_b, k), p in power.items() if k > 0)
