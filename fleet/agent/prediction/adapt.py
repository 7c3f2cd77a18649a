"""Where to probe next, once a first design has been probed and the rest predicted (issue 21).

A fixed design spends probes evenly; what matters for a device is only whether the choice at
its budgets is right. After the first probes, the prediction says, at every budget the fleet
uses, which point would be chosen and which un-probed points could still beat it: a point whose
predicted step is faster in time to accuracy but whose power bound straddles the budget (its
prediction could be under it, its bound is over), or the chosen point itself when it is only
predicted. Those are the probes that can change the choice; everything else cannot, whatever
its error. :func:`next_probes` ranks them, budget by budget, best predicted time first.

Runs on the board: Python 3.6, stdlib only (rows as the profile CSV's dicts).
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fleet.method.profile_io import PREDICTED

Key = Tuple[int, float]
Row = Dict[str, Any]


def _num(row: Row, col: str) -> float:
    try:
        return float(row[col])
    except (KeyError, TypeError, ValueError):  # missing, empty or not a number
        return math.nan


def _cost(row: Row, efficiency: Dict[int, float]) -> float:
    b = int(float(row["batch_size"]))
    n = efficiency.get(b)
    t = _num(row, "time_per_batch_s")
    return t / b * n if n and t > 0 else math.inf


def next_probes(
    rows: Sequence[Row],
    budgets: Sequence[Optional[float]],
    efficiencies: Sequence[Dict[int, float]],
    count: int,
    margin: float,
) -> List[Key]:
    """Up to ``count`` un-probed points whose measurement could change a choice.

    ``rows``: the full predicted table (``predict.predict_profile``'s rows: ``source`` says
    measured or predicted, predicted rows carry ``peak_power_bound_w``); ``margin``: the
    relative error the prediction may have below its value (the bound's margin). For each
    budget and efficiency (samples to accuracy per batch size), the choice is the fastest point
    whose bound fits; the suggestions are the predicted points that are faster and whose
    optimistic power (``prediction * (1 - margin)``) fits, plus the choice itself when it is
    predicted. Round-robin over the (budget, efficiency) pairs, so every budget gets its probe.
    """
    queues = []  # type: List[List[Key]]
    for budget in budgets:
        limit = math.inf if budget is None else float(budget)
        for eff in efficiencies:
            queues.append(_candidates(rows, limit, eff, margin))
    out = []  # type: List[Key]
    while len(out) < count and any(queues):
        for queue in queues:
            while queue and queue[0] in out:
                queue.pop(0)
            if queue and len(out) < count:
                out.append(queue.pop(0))
    return out


def _candidates(rows: Sequence[Row], limit: float, eff: Dict[int, float], margin: float):
    def guard(r: Row) -> float:
        bound = _num(r, "peak_power_bound_w")
        peak = _num(r, "peak_power_w")
        return max(peak, bound) if not math.isnan(bound) else peak

    def key(r: Row) -> Key:
        return (int(float(r["batch_size"])), float(r["freq_mhz"]))

    usable = [r for r in rows if str(r.get("status") or "ok") == "ok" and _cost(r, eff) < math.inf]
    fits = [r for r in usable if guard(r) <= limit]
    chosen = min(fits, key=lambda r: _cost(r, eff)) if fits else None
    best = _cost(chosen, eff) if chosen is not None else math.inf
    out = []  # type: List[Tuple[float, Key]]
    if chosen is not None and chosen.get("source") == PREDICTED:
        out.append((best, key(chosen)))
    for r in usable:
        if r.get("source") != PREDICTED or r is chosen:
            continue
        low = _num(r, "peak_power_w") * (1.0 - margin)
        if _cost(r, eff) < best and low <= limit:
            out.append((_cost(r, eff), key(r)))
    out.sort()
    return [k for _, k in out]
