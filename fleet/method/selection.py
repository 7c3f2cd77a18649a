"""Eq. 4 on the board: pick (batch size, frequency) from a profile LUT and an efficiency vector.

Why a second chooser next to ``fleet.core.selection``: the closed loop re-selects on the device at
every budget change, and the device may run Python 3.6 without numpy or the coordinator's
package. The rule is the same (see ``docs/architecture.md``, selection): among the profiled points
whose measured peak fits the budget, take the argmin of ``time_per_sample x samples_to_accuracy``
(``energy``: mean power x that), ties to the lower peak, then the lower frequency, then the
smaller batch. A brute-force scan is plenty for a LUT of a few hundred points; a test checks it
against ``fleet.core.selection.select`` on random profiles.

The learning-rate rule travels with it, since a batch-size change on the device must rescale the
learning rate there: square root for Adam/AdamW, linear for SGD (the same rule as
``fleet.core.efficiency.scaled_lr``, which a test compares against).

Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

OBJECTIVES = ("time", "energy")
SQRT_OPTIMIZERS = ("adam", "adamw")
LINEAR_OPTIMIZERS = ("sgd",)

LutPoint = NamedTuple(
    "LutPoint",
    [
        ("batch_size", int),
        ("freq_mhz", float),
        ("time_per_batch_s", float),
        ("peak_power_w", float),  # NaN when unmeasured
        ("mean_power_w", float),  # falls back to the peak
    ],
)


class ChooseError(ValueError):
    """A LUT, efficiency vector or objective the chooser cannot use; one line."""


def scaled_lr(batch_size: int, ref_batch: int, ref_lr: float, optimizer: str = "adam") -> float:
    """Learning rate at ``batch_size`` from a reference (batch, lr) pair."""
    if batch_size <= 0 or ref_batch <= 0 or not ref_lr > 0:
        raise ChooseError(
            "learning-rate rule: batch ({}), reference batch ({}) and reference lr ({}) must "
            "all be > 0".format(batch_size, ref_batch, ref_lr)
        )
    ratio = float(batch_size) / float(ref_batch)
    opt = str(optimizer).lower()
    if opt in SQRT_OPTIMIZERS:
        return ref_lr * math.sqrt(ratio)
    if opt in LINEAR_OPTIMIZERS:
        return ref_lr * ratio
    raise ChooseError(
        "learning-rate rule: unknown optimizer {!r}; expected one of {}".format(
            optimizer, ", ".join(SQRT_OPTIMIZERS + LINEAR_OPTIMIZERS)
        )
    )


def _float(row: Dict[str, Any], key: str, where: str, required: bool) -> float:
    value = row.get(key)
    if value is None or value == "":
        if required:
            raise ChooseError("{}: '{}' is missing, expected a number".format(where, key))
        return float("nan")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ChooseError("{}: '{}' = {!r}, expected a number".format(where, key, value)) from None
    if math.isinf(out) or (required and (math.isnan(out) or out <= 0)):
        raise ChooseError("{}: '{}' = {!r}, expected a number > 0".format(where, key, value))
    return out


def lut_from_rows(rows: Iterable[Dict[str, Any]], source: str = "profile") -> List[LutPoint]:
    """Profile rows (CSV dicts or the profiler's rows) -> points; rows with status != ok skipped."""
    points = []  # type: List[LutPoint]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ChooseError("{}: row {} is not an object".format(source, i + 1))
        if str(row.get("status") or "ok").strip().lower() != "ok":
            continue
        where = "{}: row {}".format(source, i + 1)
        b = _float(row, "batch_size", where, True)
        if b != int(b):
            raise ChooseError("{}: batch_size = {!r}, expected an integer".format(where, b))
        peak = _float(row, "peak_power_w", where, False)
        mean = _float(row, "mean_power_w", where, False)
        bound = _float(row, "peak_power_bound_w", where, False)
        if not math.isnan(bound) and not math.isnan(peak):
            peak = max(peak, bound)  # a predicted point is held to its upper bound (predict.py)
        points.append(
            LutPoint(
                int(b),
                _float(row, "freq_mhz", where, True),
                _float(row, "time_per_batch_s", where, True),
                peak,
                peak if math.isnan(mean) else mean,
            )
        )
    if not points:
        raise ChooseError("{}: no runnable profile rows".format(source))
    return points


def efficiency_from(obj: Any, source: str = "efficiency") -> Dict[int, float]:
    """{batch: samples_to_accuracy} from a dict, or {"batch_sizes": [...], "samples...": [...]}.

    A batch size whose value is missing, null or NaN never reached the target and is left out.
    """
    if isinstance(obj, dict) and "batch_sizes" in obj:
        bs = obj.get("batch_sizes")
        ns = obj.get("samples_to_accuracy")
        if not isinstance(bs, list) or not isinstance(ns, list) or len(bs) != len(ns):
            raise ChooseError(
                "{}: 'batch_sizes' and 'samples_to_accuracy' must be lists of one length".format(
                    source
                )
            )
        pairs = list(zip(bs, ns))  # type: List[Tuple[Any, Any]]
    elif isinstance(obj, dict):
        pairs = list(obj.items())
    else:
        raise ChooseError("{}: expected a mapping batch size -> samples".format(source))
    out = {}  # type: Dict[int, float]
    for b, n in pairs:
        try:
            bi, nf = int(b), (float("nan") if n is None or n == "" else float(n))
        except (TypeError, ValueError):
            raise ChooseError(
                "{}: batch {!r} -> {!r} is not numeric".format(source, b, n)
            ) from None
        if bi <= 0 or (not math.isnan(nf) and nf <= 0):
            raise ChooseError("{}: batch {} -> {}: both must be > 0".format(source, b, n))
        if not math.isnan(nf):
            out[bi] = nf
    if not out:
        raise ChooseError("{}: no batch size reached the target accuracy".format(source))
    return out


def fits(p: LutPoint, budget_w: Optional[float]) -> bool:
    """Within budget by measurement; an unmeasured peak fits only an unlimited budget."""
    if budget_w is None or math.isinf(budget_w):
        return True
    return not math.isnan(p.peak_power_w) and p.peak_power_w <= budget_w


def _cost(p: LutPoint, samples: float, objective: str) -> float:
    per_sample = p.time_per_batch_s / p.batch_size
    if objective == "energy":
        per_sample *= p.mean_power_w
    return per_sample * samples


def _key(p: LutPoint, samples: float, objective: str) -> Tuple[float, float, float, int]:
    peak = p.peak_power_w if not math.isnan(p.peak_power_w) else float("inf")
    return (_cost(p, samples, objective), peak, p.freq_mhz, p.batch_size)


def choose(
    points: Sequence[LutPoint],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    objective: str = "time",
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Optional[LutPoint]:
    """The eq. 4 argmin, or None when no allowed point fits the budget.

    ``exclude``: (batch, freq) pairs the runtime guard found over budget; ``max_batch``: the
    largest batch the data allows.
    """
    if objective not in OBJECTIVES:
        raise ChooseError(
            "objective must be one of {}, got {!r}".format(", ".join(OBJECTIVES), objective)
        )
    best = None  # type: Optional[Tuple[Tuple[float, float, float, int], LutPoint]]
    for p, n in allowed(points, efficiency, budget_w, exclude, max_batch):
        if objective == "energy" and math.isnan(p.mean_power_w):
            continue
        key = _key(p, n, objective)
        if best is None or key < best[0]:
            best = (key, p)
    return None if best is None else best[1]


def allowed(
    points: Sequence[LutPoint],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> List[Tuple[LutPoint, float]]:
    """(point, samples to the target) of every point an objective may pick: its batch size
    reached the target, the guard has not excluded it, it fits the budget and the data."""
    skip = exclude or set()
    out = []  # type: List[Tuple[LutPoint, float]]
    for p in points:
        n = efficiency.get(p.batch_size)
        if n is None or (p.batch_size, p.freq_mhz) in skip or not fits(p, budget_w):
            continue
        if max_batch is not None and p.batch_size > max_batch:
            continue
        out.append((p, n))
    return out


def lowest_peak(points: Sequence[LutPoint]) -> Optional[LutPoint]:
    """The point with the lowest measured peak (named when nothing fits)."""
    powered = [p for p in points if not math.isnan(p.peak_power_w)]
    if not powered:
        return None
    return min(powered, key=lambda p: (p.peak_power_w, p.freq_mhz, p.batch_size))
