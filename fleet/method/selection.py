"""Equation 4 / Algorithm 1, once: pick (batch size, frequency) from profiled points.

The rule (docs/architecture.md, the method in one paragraph): among the points whose guarded peak
fits the budget (``fits``) and whose batch size reached the target, keep per batch size the
cheapest point per sample (ties: lower peak, then lower frequency), predict
``cost_per_sample x samples_to_accuracy`` and take the argmin (ties: lower peak, lower frequency,
smaller batch). ``time`` costs seconds per sample, ``energy`` joules (mean power x time).

Why here, in the kernel: the closed loop re-selects on the board at every budget change (Python
3.6, maybe no numpy) and the coordinator selects for thousands of simulated devices; both call
``choose``. The host's ``fleet.core.selection.SelectionIndex`` is a fast path of this function
(points sorted by peak once, a running best per batch size, so a query is a binary search per
batch size); the per-batch stage is what makes that exact, and a test checks the two agree on
random profiles.

The learning-rate rule travels with it, since a batch-size change (on the board or the host) must
rescale the learning rate: square root for Adam/AdamW, linear for SGD.

Python 3.6 compatible, stdlib only.
"""

import bisect
import math
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from fleet.method.errors import InputError
from fleet.method.point import Point, tie_peak

_INF = float("inf")

OBJECTIVES = ("time", "energy")
SQRT_OPTIMIZERS = ("adam", "adamw")
LINEAR_OPTIMIZERS = ("sgd",)
#: The largest reference learning rate taken. Why a bound: ``lr_ref = 1e300`` ran (a dropped
#: minus sign in an exponent) and trained on NaN; no optimizer here trains at a rate near it.
MAX_LR = 10.0

Cost = Callable[[Point], float]


class ChooseError(InputError):
    """A LUT, efficiency vector or objective the chooser cannot use; one line (an ``InputError``:
    the host handles it as its own bad input, exit 2)."""


def scaled_lr(batch_size: int, ref_batch: int, ref_lr: float, optimizer: str = "adam") -> float:
    """Learning rate at ``batch_size`` from a reference (batch, lr) pair.

    Square-root scaling for Adam/AdamW (Krizhevsky 2014, as the paper uses: 5e-4 at b=128 for
    the CNNs, 1e-3 at b=128 for the transformer), linear scaling for SGD (Goyal et al. 2017).
    """
    if batch_size <= 0 or ref_batch <= 0 or not 0 < ref_lr <= MAX_LR:
        raise ChooseError(
            "learning-rate rule: batch ({}), reference batch ({}) and reference lr ({}) must "
            "all be > 0 (the lr at most {:g})".format(batch_size, ref_batch, ref_lr, MAX_LR)
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


def lut_from_rows(rows: Iterable[Dict[str, Any]], source: str = "profile") -> List[Point]:
    """Profile rows (CSV dicts or the profiler's rows) -> points; rows with status != ok skipped."""
    points = []  # type: List[Point]
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
        point = Point(
            int(b),
            _float(row, "freq_mhz", where, True),
            _float(row, "time_per_batch_s", where, True),
            peak,
            mean,
            bound,
        )
        if math.isnan(mean):  # no mean measured: held to the (guarded) peak
            point = point._replace(mean_power_w=point.guard_peak_w)
        points.append(point)
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


def fits(p: Point, budget_w: Optional[float]) -> bool:
    """Within budget by measurement (a predicted point by its upper bound); an unmeasured peak
    fits only an unlimited budget."""
    if budget_w is None or math.isinf(budget_w):
        return True
    return not math.isnan(p.peak_power_w) and p.guard_peak_w <= budget_w


def time_per_sample(p: Point) -> float:
    """The ``time`` objective's cost of one sample at ``p``: seconds (eq. 2)."""
    return p.time_per_batch_s / p.batch_size


def energy_per_sample(p: Point) -> float:
    """The ``energy`` objective's cost of one sample at ``p``: joules (mean power x time)."""
    return p.mean_power_w * p.time_per_batch_s / p.batch_size


COSTS = {"time": time_per_sample, "energy": energy_per_sample}  # type: Dict[str, Cost]


def cost_of(objective: Union[str, Cost]) -> Cost:
    """The per-sample cost of a named objective, or the cost function itself (the host's
    objective registry passes its own, so a plug-in objective ranks with this same rule)."""
    if callable(objective):
        return objective
    cost = COSTS.get(objective)
    if cost is None:
        raise ChooseError(
            "objective must be one of {}, got {!r}".format(", ".join(OBJECTIVES), objective)
        )
    return cost


def batch_key(p: Point, cost: float) -> Tuple[float, float, float]:
    """Order within one batch size: per-sample cost, then peak, then frequency."""
    return (cost, tie_peak(p), p.freq_mhz)


def choice_key(p: Point, cost: float, samples: float) -> Tuple[float, float, float, int]:
    """Order across batch sizes: predicted cost to the target, peak, frequency, batch."""
    return (cost * samples, tie_peak(p), p.freq_mhz, p.batch_size)


def best_per_batch(
    points: Sequence[Point],
    budget_w: Optional[float],
    objective: Union[str, Cost] = "time",
    batches: Optional[Iterable[int]] = None,
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Dict[int, Point]:
    """Algorithm 1's first stage: per batch size, the cheapest point per sample that fits.

    ``batches``: only these batch sizes (None: all). A point whose cost is NaN (the energy
    objective on a point without power) is never picked. Among equal keys the first point wins.
    """
    cost = cost_of(objective)
    keep = None if batches is None else set(batches)
    skip = exclude or set()
    best = {}  # type: Dict[int, Tuple[Tuple[float, float, float], Point]]
    for p in points:
        b = p.batch_size
        if keep is not None and b not in keep:
            continue
        if (b, p.freq_mhz) in skip or (max_batch is not None and b > max_batch):
            continue
        if not fits(p, budget_w):
            continue
        c = cost(p)
        if math.isnan(c):
            continue
        key = batch_key(p, c)
        cur = best.get(b)
        if cur is None or key < cur[0]:
            best[b] = (key, p)
    return {b: best[b][1] for b in sorted(best)}


def choose(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    objective: Union[str, Cost] = "time",
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> Optional[Point]:
    """The eq. 4 argmin, or None when no allowed point fits the budget.

    ``efficiency``: samples to the target per batch size (only batch sizes that reached it);
    ``exclude``: (batch, freq) pairs the runtime guard found over budget; ``max_batch``: the
    largest batch the data allows.
    """
    cost = cost_of(objective)
    front = best_per_batch(points, budget_w, cost, efficiency, exclude, max_batch)
    best = None  # type: Optional[Tuple[Tuple[float, float, float, int], Point]]
    for b, p in front.items():
        key = choice_key(p, cost(p), efficiency[b])
        if best is None or key < best[0]:
            best = (key, p)
    return None if best is None else best[1]


def allowed(
    points: Sequence[Point],
    efficiency: Dict[int, float],
    budget_w: Optional[float],
    exclude: Optional[Set[Tuple[int, float]]] = None,
    max_batch: Optional[int] = None,
) -> List[Tuple[Point, float]]:
    """(point, samples to the target) of every point an objective may pick: its batch size
    reached the target, the guard has not excluded it, it fits the budget and the data."""
    skip = exclude or set()
    out = []  # type: List[Tuple[Point, float]]
    for p in points:
        n = efficiency.get(p.batch_size)
        if n is None or (p.batch_size, p.freq_mhz) in skip or not fits(p, budget_w):
            continue
        if max_batch is not None and p.batch_size > max_batch:
            continue
        out.append((p, n))
    return out


def lowest_peak(points: Sequence[Point]) -> Optional[Point]:
    """The point with the lowest guarded peak (named when nothing fits)."""
    powered = [p for p in points if not math.isnan(p.peak_power_w)]
    if not powered:
        return None
    return min(powered, key=lambda p: (p.guard_peak_w, p.freq_mhz, p.batch_size))


class ChooseIndex(object):
    """A fast path of ``choose`` for one set of points asked under many budgets.

    Per batch size the points are sorted by (peak, frequency) once (a stable sort: equal ones
    keep their order), and per objective a running best is kept: entry i is the first strictly
    cheapest of the first i + 1 points, i.e. ``best_per_batch`` over exactly the points whose
    peak fits a budget between the i-th and the next peak. A query is then one binary search per
    batch size, O(|B| log |F|) instead of O(|B| x |F|), and gives ``choose``'s answer exactly
    (``tests/test_selection.py`` checks it on random profiles, NaN peaks and ties included).
    No ``exclude``/``max_batch``: the board's guard uses ``choose`` itself.
    """

    def __init__(self, points: Sequence[Point]) -> None:
        self.sorted = {}  # type: Dict[int, List[Point]]
        for p in points:
            self.sorted.setdefault(p.batch_size, []).append(p)
        self.peaks = {}  # type: Dict[int, List[float]]
        for b, pts in self.sorted.items():
            pts.sort(key=lambda p: (tie_peak(p), p.freq_mhz))
            self.peaks[b] = [tie_peak(p) for p in pts]
        self.batch_sizes = sorted(self.sorted)
        self._runs = {}  # type: Dict[Cost, Dict[int, List[Optional[Point]]]]

    def fitting(self, batch_size: int, budget_w: Optional[float]) -> int:
        """How many of this batch size's points (sorted by peak) fit the budget."""
        peaks = self.peaks.get(batch_size, [])
        if budget_w is None or math.isinf(budget_w):
            return len(peaks)
        return bisect.bisect_right(peaks, budget_w)

    def _running(self, cost: Cost) -> Dict[int, List[Optional[Point]]]:
        runs = self._runs.get(cost)
        if runs is None:
            runs = {}
            for b, pts in self.sorted.items():
                run = []  # type: List[Optional[Point]]
                cur, cur_cost = None, _INF  # type: Optional[Point], float
                for p in pts:
                    c = cost(p)
                    if not math.isnan(c) and (cur is None or c < cur_cost):
                        cur, cur_cost = p, c
                    run.append(cur)
                runs[b] = run
            self._runs[cost] = runs
        return runs

    def best_point(
        self, batch_size: int, budget_w: Optional[float], objective: Union[str, Cost] = "time"
    ) -> Optional[Point]:
        """``best_per_batch`` for one batch size: its cheapest point that fits, or None."""
        k = self.fitting(batch_size, budget_w)
        return self._running(cost_of(objective))[batch_size][k - 1] if k else None

    def choose(
        self,
        efficiency: Dict[int, float],
        budget_w: Optional[float],
        objective: Union[str, Cost] = "time",
    ) -> Optional[Point]:
        """``choose(points, efficiency, budget_w, objective)``, by binary search."""
        cost = cost_of(objective)
        runs = self._running(cost)
        best = None  # type: Optional[Tuple[Tuple[float, float, float, int], Point]]
        for b in self.batch_sizes:
            n = efficiency.get(b)
            k = self.fitting(b, budget_w) if n is not None else 0
            p = runs[b][k - 1] if k else None
            if p is None or n is None:
                continue
            key = choice_key(p, cost(p), n)
            if best is None or key < best[0]:
                best = (key, p)
        return None if best is None else best[1]
