"""Which points of the grid to probe when the rest will be predicted (issue 11).

The design spends probes where the shared-curve model (``predict_fit.py``) needs them: every
batch size at the lowest and highest knob (two points fix ``u`` and ``v``), then the interior
knobs of the largest batch (the curve ``h``, where power's dynamic part is largest), then a
middle knob for every batch size, then the rest. By default a quarter of the grid.

Separate because the profiler asks for the design before it measures anything (a budget too
small is refused before the first probe), while the fit and the table filling run only after
the sweep. Python 3.6, stdlib only.
"""

import math
from typing import List, Optional, Sequence, Tuple

from fleet.agent.prediction.fit import PredictError

DEFAULT_FRACTION = 0.25


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
    for f in interior:  # the knob's effect at both ends of the batch axis, spread out
        add(bs[-1], f)
        add(bs[0], f)
    mid = fs[len(fs) // 2]
    for b in reversed(bs):
        add(b, mid)
    for f in interior:  # then everything else, spread over knobs first
        for b in reversed(bs):
            add(b, f)
    return order[: min(budget, len(order))]


def frame_probes(batch_sizes: Sequence[int], knobs: Sequence[float]) -> List[Tuple[int, float]]:
    """The grid's frame: the smallest and largest batch size at every knob, the lowest and
    highest knob at every batch size. The knob's whole effect is seen twice (at both ends of
    the batch axis) and every batch size is anchored at both ends of the knob; what lies
    inside is what prediction must carry across (``predict_models.frame`` is exact on it for
    tables additive in log space plus a bilinear term)."""
    bs = sorted(set(int(b) for b in batch_sizes))
    fs = sorted(set(float(f) for f in knobs))
    if len(bs) < 2 or len(fs) < 2:
        raise PredictError("a frame needs at least 2 batch sizes and 2 knob values")
    out = []  # type: List[Tuple[int, float]]
    for b in (bs[0], bs[-1]):
        out.extend((b, f) for f in fs)
    for b in bs[1:-1]:
        out.extend([(b, fs[0]), (b, fs[-1])])
    return out
