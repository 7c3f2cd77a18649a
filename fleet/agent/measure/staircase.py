"""The staircase profiling plan (paper §4.1, "if P_max is known").

When the budget is known before profiling, most of the (batch, frequency) grid never needs to
run: power rises with both batch size and frequency, so the feasible region is a staircase. We
probe the largest batch first, from the lowest frequency upward until the budget is crossed, then
start the next smaller batch at the last feasible frequency and climb again. The plan is pure: it
takes a measuring function, so the profiler drives real hardware with it and tests drive it with
a replayed profile. Python 3.6 compatible (it runs on the board).

Real profiles are noisy, so the plan does not trust monotonicity blindly: if the carried-over
starting frequency turns out infeasible for a smaller batch, it walks down until it finds a
feasible one (or runs out), instead of recording a wrong frontier.
"""

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from fleet.method.budget import parse_budget
from fleet.method.profile_io import Measurement

Probe = NamedTuple(
    "Probe",
    [
        ("batch_size", int),
        ("freq_mhz", float),
        ("measurement", Optional[Measurement]),  # None: the point could not run (e.g. OOM)
        ("feasible", bool),
    ],
)

FrontierPoint = NamedTuple(
    "FrontierPoint", [("batch_size", int), ("freq_mhz", float), ("measurement", Measurement)]
)

StaircaseResult = NamedTuple(
    "StaircaseResult",
    [
        ("frontier", Dict[int, FrontierPoint]),  # batch -> highest feasible frequency found
        ("probes", List[Probe]),  # in the order they were made
        ("grid_size", int),  # |B| x |F|: what the full grid would have cost
    ],
)

MeasureFn = Callable[[int, float], Optional[Measurement]]


def probes_saved(result: StaircaseResult) -> int:
    """How many grid points the plan did not have to run."""
    return result.grid_size - len(result.probes)


def staircase_plan(
    batch_sizes: Sequence[int], freqs_mhz: Sequence[float], budget_w: float, measure: MeasureFn
) -> StaircaseResult:
    """Probe the grid along the budget's staircase; return the frontier and the probes made.

    ``measure(b, f)`` runs (or replays) a few training steps at batch ``b`` locked at frequency
    ``f`` and returns a Measurement, or None when the point cannot run at all (out of memory).
    A batch size that cannot run at any probed frequency is absent from the frontier.
    """
    bs = sorted(set(int(b) for b in batch_sizes))
    fs = sorted(set(float(f) for f in freqs_mhz))
    if not bs or not fs:
        raise ValueError("staircase plan needs at least one batch size and one frequency")
    parse_budget(budget_w, "budget_w")  # the one grammar's refusal (a BudgetError: ValueError)
    probes = []  # type: List[Probe]
    frontier = {}  # type: Dict[int, FrontierPoint]
    cache = {}  # type: Dict[tuple, Optional[Measurement]]

    def probe(b: int, j: int) -> Optional[Measurement]:
        key = (b, j)
        if key not in cache:
            m = measure(b, fs[j])
            ok = m is not None and m.peak_power_w <= budget_w
            probes.append(Probe(b, fs[j], m, ok))
            cache[key] = m
        return cache[key]

    def feasible(m: Optional[Measurement]) -> bool:
        return m is not None and m.peak_power_w <= budget_w

    start = 0
    for b in reversed(bs):
        j = start
        m = probe(b, j)
        if m is None:
            # Out of memory does not depend on frequency: skip this batch size entirely.
            continue
        if not feasible(m):
            # Noise or a non-monotone board: walk down from the carried frequency.
            while j > 0 and not feasible(m):
                j -= 1
                m = probe(b, j)
            if not feasible(m):
                continue
        best = j
        while best + 1 < len(fs):
            nxt = probe(b, best + 1)
            if not feasible(nxt):
                break
            best += 1
        top = cache[(b, best)]
        assert top is not None  # feasible: it ran within the budget
        frontier[b] = FrontierPoint(b, fs[best], top)
        start = best
    return StaircaseResult(frontier, probes, len(bs) * len(fs))
