"""The baselines' safe frequency cap: the old per-frequency rescan vs the one rule, per device.

    PYTHONPATH=. python benchmarks/safe_cap.py [--batches 64] [--freqs 256] [--devices 20]

The old rule rescanned every point at every frequency (O(F^2 x B)) once per simulated device;
now ``max_peak_by_freq`` makes one pass (O(F x B)) and ``SelectionIndex.safe_cap`` memoises the
cap per budget, so devices sharing a reference profile pay for it once. Prints milliseconds
per device for: the old rescan, the one rule uncached, and the memoised index; checks that all
three agree on every budget.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from benchmarks.selection import synthetic
from fleet.core.profile import Profile
from fleet.core.selection import SelectionIndex, safe_frequency_cap


def old_rescan(profile: Profile, budget: float | None) -> float:
    """The previous implementation, kept here only as the reference the benchmark compares."""
    freqs = sorted({p.freq_mhz for p in profile.points})
    if budget is None:
        return freqs[-1]
    cap = None
    for f in freqs:
        if all(p.peak_power_w <= budget for p in profile.points if p.freq_mhz == f):
            cap = f
        else:
            break
    return cap if cap is not None else math.nan


def per_device_ms(fn, devices: int) -> float:
    t0 = time.perf_counter()
    for _ in range(devices):
        fn()
    return (time.perf_counter() - t0) / devices * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--freqs", type=int, default=256)
    ap.add_argument("--devices", type=int, default=20)
    args = ap.parse_args()
    profile, _ = synthetic(args.batches, args.freqs)
    budget = sorted(p.peak_power_w for p in profile.points)[len(profile.points) // 2]
    index = SelectionIndex(profile)
    for b in (budget, None):
        assert old_rescan(profile, b) == safe_frequency_cap([profile], b) == index.safe_cap(b)
    old = per_device_ms(lambda: old_rescan(profile, budget), args.devices)
    new = per_device_ms(lambda: safe_frequency_cap([profile], budget), args.devices)
    memo = per_device_ms(lambda: index.safe_cap(budget), args.devices * 100)
    out = {
        "grid": f"{args.batches} x {args.freqs}",
        "old_rescan_ms_per_device": round(old, 3),
        "one_pass_ms_per_device": round(new, 3),
        "memoised_ms_per_device": round(memo, 5),
        "speedup_one_pass": round(old / new, 1),
        "speedup_memoised": round(old / memo, 1),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
