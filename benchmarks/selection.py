"""Selection time on a large grid: SelectionIndex vs the kernel's scan (``choose``), side by side.

    python benchmarks/selection.py [--batches 64] [--freqs 256] [--budgets 200] [--repeat 3]

Builds a noisy synthetic profile (power not monotone), asks both for the choice at many budgets,
checks they agree on every one, and prints per-query times and the ratio. The index pays a
one-off sort per batch size; the benchmark reports that build time separately and amortised.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time

from fleet.common.errors import InfeasibleError
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import SelectionIndex
from fleet.method.point import Point
from fleet.method.selection import choose


def synthetic(n_batches: int, n_freqs: int, seed: int = 0) -> tuple[Profile, Efficiency]:
    rng = random.Random(seed)
    batches = [4 * (i + 1) for i in range(n_batches)]
    freqs = [76.8 + 3.6 * j for j in range(n_freqs)]
    points = []
    for b in batches:
        for f in freqs:
            t = (0.002 + b * 0.0009) * (921.6 / f) ** 0.85 * rng.uniform(0.97, 1.03)
            peak = (1.5 + 0.012 * b**0.7 * (f / 100) ** 1.3) * rng.uniform(0.95, 1.05)
            points.append(Point(b, f, t, peak, peak * 0.85))
    samples = {b: 20000.0 * (1 + (b / 64) ** 1.5) * rng.uniform(0.9, 1.1) for b in batches}
    return Profile(points, "synthetic"), Efficiency(samples, source="synthetic")


def timeit(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--freqs", type=int, default=256)
    ap.add_argument("--budgets", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    profile, eff = synthetic(args.batches, args.freqs)
    lo = min(p.peak_power_w for p in profile.points)
    hi = max(p.peak_power_w for p in profile.points)
    budgets = [lo + (hi - lo) * k / (args.budgets - 1) for k in range(args.budgets)]

    def run_index():
        index = SelectionIndex(profile)
        return [_safe(lambda w=w: index.select(eff, w)) for w in budgets]

    def run_brute():
        return [_safe_point(choose(profile.points, eff.reached, w)) for w in budgets]

    a, b = run_index(), run_brute()
    agree = sum(x == y for x, y in zip(a, b, strict=True))
    t_build = timeit(lambda: SelectionIndex(profile), args.repeat)
    index = SelectionIndex(profile)
    t_query = timeit(
        lambda: [_safe(lambda w=w: index.select(eff, w)) for w in budgets], args.repeat
    )
    t_brute = timeit(run_brute, args.repeat)
    n = len(budgets)
    res = {
        "grid": f"{args.batches}x{args.freqs}",
        "points": len(profile.points),
        "budgets": n,
        "agree": f"{agree}/{n}",
        "index_build_ms": t_build * 1e3,
        "index_query_us": t_query / n * 1e6,
        "brute_query_us": t_brute / n * 1e6,
        "speedup_per_query": t_brute / t_query,
        "speedup_incl_build": t_brute / (t_query + t_build),
    }
    if args.json:
        print(json.dumps(res))
        return
    for k, v in res.items():
        print(f"{k:>20}: {v:.4g}" if isinstance(v, float) else f"{k:>20}: {v}")


def _safe_point(p):
    return None if p is None else (p.batch_size, p.freq_mhz)


def _safe(fn):
    try:
        c = fn()
        return (c.batch_size, c.freq_mhz)
    except InfeasibleError:
        return None


if __name__ == "__main__":
    main()
