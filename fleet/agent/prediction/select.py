"""Choose a profile column's model by cross-validation on the probes, and bound its power.

Why per grid: a model that is right on one device is wrong on another (see
``predict_models.py``), and the only data a device has about itself are its probes. So every
candidate predicts each probe from the others (leave-one-out: the probe is removed from every
column, as if it had never been measured), and the candidate with the lowest mean relative
error is kept. Because the simple models are candidates too, the choice is never worse on the
probes than the simplest one. Ties go to the earlier model in ``MODELS``.

Why a bound: an error of 2 % on power is harmless for time but decides whether a point is over
a budget. The chosen model's leave-one-out residuals say how far the truth has been above its
prediction on this very device; predicted power carries ``prediction * (1 + that margin)`` as an
upper bound, and selection on predicted points uses the bound (``fleet.core.profile.feasible``).

Runs on the board: Python 3.6, numpy 1.19.
"""

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from fleet.agent.prediction.fit import PredictError
from fleet.agent.prediction.models import MODELS, NotApplicable

Key = Tuple[int, float]
Obs = Dict[Key, float]

MIN_MARGIN = (
    0.0  # the bound is the largest under-prediction seen on the probes, never below the prediction
)
UNVALIDATED_MARGIN = 0.10  # too few probes to validate: assume the model may be 10 % low

Choice = NamedTuple(
    "Choice",
    [
        ("model", str),
        ("values", Dict[Key, float]),  # the chosen model at the requested points
        ("cv_error", Optional[float]),  # its mean |relative| leave-one-out error on the probes
        ("cv_errors", Dict[str, float]),  # every candidate's, for the report
        ("margin", float),  # upper-bound margin: largest relative miss seen in validation
        ("upper", Dict[Key, float]),  # upper bound at the requested points (see ``choose``)
    ],
)


def validation_keys(obs: Obs) -> List[Key]:
    """The probes to hold out, most telling first available:

    1. *transfer* probes: strictly inside their batch size's probed knob range, at a knob some
       other batch size was probed at too. The points prediction fills lie between a batch
       size's end probes, at knobs measured on other batch sizes; holding out such a probe asks
       exactly that question (does the knob's effect carry from one batch size to another?);
    2. else *interior* probes (inside their row's range, knob probed nowhere else);
    3. else every probe.
    Holding out a row's end would test extrapolation, which no target needs.
    """
    rows = {}  # type: Dict[int, List[float]]
    cols = {}  # type: Dict[float, int]
    for b, k in obs:
        rows.setdefault(b, []).append(k)
        cols[k] = cols.get(k, 0) + 1
    inner = [key for key in sorted(obs) if min(rows[key[0]]) < key[1] < max(rows[key[0]])]
    transfer = [key for key in inner if cols[key[1]] >= 2]
    return transfer or inner or sorted(obs)


def cross_validate(
    name: str, columns: Dict[str, Obs], bs: Sequence[int], ks: Sequence[float], model: str
) -> List[float]:
    """Signed leave-one-out residuals ``truth / prediction - 1`` of one model on one column,
    over :func:`validation_keys` (NaN where the model cannot fit without that probe)."""
    fn = MODELS[model]
    out = []
    for key in validation_keys(columns[name]):
        rest = dict((q, _as_target_row(obs, key)) for q, obs in columns.items())
        try:
            guess = fn(rest[name], bs, ks, [key], rest)[key]
        except PredictError:
            out.append(math.nan)
            continue
        y = columns[name][key]
        out.append(y / guess - 1.0 if guess > 0 else math.nan)
    return out


def _as_target_row(obs: Obs, key: Key) -> Obs:
    """The probes without ``key`` and with ``key``'s batch size cut to its two end knobs.

    A point to predict sits in a row that was probed at its ends only; a held-out probe of a
    richly probed row would otherwise be judged with neighbours no target has, which favours
    plain interpolation exactly where it fails.
    """
    b = key[0]
    row = [k for (bb, k) in obs if bb == b and (bb, k) != key]
    ends = (min(row), max(row)) if row else ()
    return dict((p, y) for p, y in obs.items() if p[0] != b or p[1] in ends)


def choose(
    name: str,
    columns: Dict[str, Obs],
    bs: Sequence[int],
    ks: Sequence[float],
    points: Sequence[Key],
    models: Optional[Sequence[str]] = None,
) -> Choice:
    """Fit every candidate on all probes, score it by leave-one-out, keep the best.

    Candidates that cannot fit the full probe set are dropped; if none can, the first error
    is raised (naming the column). With too few probes to validate (every residual missing)
    the first candidate that fits is kept and its error reported as unknown.
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
    # Compare like with like: on the probes every validated model could predict. A model that
    # could predict none of them is not ranked by validation (it keeps its place in MODELS).
    validated = [m for m in fitted if any(not math.isnan(r) for r in residuals[m])]
    common = [
        i
        for i in range(len(validation_keys(columns[name])))
        if validated and all(not math.isnan(residuals[m][i]) for m in validated)
    ]
    scores = dict(
        (m, sum(abs(residuals[m][i]) for i in common) / len(common)) for m in validated if common
    )
    if scores:
        best = min(scores, key=lambda m: (scores[m], list(MODELS).index(m)))
    else:  # nothing validated: the physical prior's order (a power limit's own model first)
        best = min(fitted, key=lambda m: list(MODELS).index(m))
    seen = [r for r in residuals[best] if not math.isnan(r)]
    # Symmetric on purpose: a model that over-predicted the held-out probes may under-predict
    # elsewhere by as much; the bound covers the largest miss either way.
    margin = max([MIN_MARGIN] + [abs(r) for r in seen]) if seen else UNVALIDATED_MARGIN
    # The bound also covers what the plausible models (validated within twice the best error)
    # disagree on: where they part, the probes have not settled the value.
    limit = 2.0 * scores.get(best, math.inf) if scores else math.inf
    plausible = [m for m in fitted if scores.get(m, math.inf) <= limit] or [best]
    upper = dict(
        (p, max(fitted[m][p] for m in plausible + [best]) * (1.0 + margin)) for p in points
    )
    return Choice(best, fitted[best], scores.get(best), scores, margin, upper)
