"""`powerfleet whatif` speed: 1,000 devices x 20 budgets, shared device kinds vs one by one.

    python benchmarks/whatif.py [--fleet simulations/fleets/large.toml] [--budgets 3:12.5:0.5]

For each objective, times three ways of answering the same sweep and checks they agree:
- ``shared``: ``fleet.planning.whatif.sweep`` (each device kind simulated once per budget, rows
copied);
- ``per-device``: every device simulated on its own
(``fleet.rounds.virtual_clock.simulate_device``), the
  reference the shared sweep must equal;
- ``distinct``: a fleet whose 1,000 devices all have different budgets (no two share a kind),
  swept by ``fleet.planning.whatif.sweep`` with ``--scale``: the worst case for sharing.
Prints seconds per sweep and the ratio per-device / shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

from fleet.config.fleetfile import load_fleet
from fleet.planning.deadline_plan import plan_deadline
from fleet.planning.whatif import fastest_finishes, parse_range, run_for, sweep, totals, with_budget
from fleet.rounds.virtual_clock import cached_efficiency, simulate_device

ROOT = Path(__file__).resolve().parents[1]


def per_device_sweep(fleet, values, objective):
    shipped = cached_efficiency(fleet.run.efficiency)
    out = []
    for v in values:
        f = with_budget(fleet, v)
        deadline = None
        if objective == "deadline":
            deadline = plan_deadline(fastest_finishes(f.devices, shipped))
        run = run_for(f.run, objective, deadline)
        rows = [simulate_device(d, shipped, run).to_dict() for d in f.devices]
        out.append(totals(rows))
    return out


def timed(fn):
    t0 = time.perf_counter()
    got = fn()
    return time.perf_counter() - t0, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", default=str(ROOT / "simulations" / "fleets" / "large.toml"))
    ap.add_argument("--budgets", default="3:12.5:0.5")  # 20 steps
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fleet = load_fleet(args.fleet)
    values = parse_range(args.budgets)
    # every device its own budget: 4.0, 4.005, ... W (1,000 distinct kinds)
    distinct = dataclasses.replace(
        fleet,
        devices=tuple(
            dataclasses.replace(d, budget_w=4.0 + 0.005 * k, schedule=())
            for k, d in enumerate(fleet.devices)
        ),
    )
    scales = [0.75 + 0.05 * k for k in range(len(values))]
    results = []
    for objective in ("time", "energy", "deadline"):
        t_shared, shared = timed(lambda o=objective: sweep(fleet, values, False, o))
        t_ref, ref = timed(lambda o=objective: per_device_sweep(fleet, values, o))
        for s, r in zip(shared, ref, strict=True):
            assert s.energy_j == r["energy_j"] and s.round_time_s == r["round_time_s"]
            assert s.round_energy_j == r["round_energy_j"]
            assert s.infeasible == r["infeasible"] and s.late == r["late"]
        t_dist, _ = timed(lambda o=objective: sweep(distinct, scales, True, o))
        results.append(
            {
                "objective": objective,
                "devices": len(fleet.devices),
                "budgets": len(values),
                "shared_s": t_shared,
                "per_device_s": t_ref,
                "distinct_budgets_s": t_dist,
                "per_device_over_shared": t_ref / t_shared if t_shared > 0 else math.inf,
            }
        )
    if args.json:
        print(json.dumps(results))
        return
    print(f"{len(fleet.devices)} devices x {len(values)} budgets ({Path(args.fleet).name})")
    print(f"{'objective':<10} {'shared s':>9} {'per-device s':>13} {'ratio':>7} {'distinct s':>11}")
    for r in results:
        print(
            f"{r['objective']:<10} {r['shared_s']:>9.3f} {r['per_device_s']:>13.2f} "
            f"{r['per_device_over_shared']:>6.0f}x {r['distinct_budgets_s']:>11.2f}"
        )


if __name__ == "__main__":
    main()
