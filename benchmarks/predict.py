"""Predicting un-probed profile points: our shared-knob-curve model vs a naive separable fit.

    python benchmarks/predict.py [--budgets 4.5,5,7,none] [--json]

For every reference profile under ``simulations/profiles/`` (and measured ones with a real
grid: at least 2 batch sizes and 3 knob values), probe the design of
``fleet.agent.predict_design.design_probes`` (a quarter of the grid), predict the rest, and compare
with the full table: mean and worst relative error for step time and peak power on the
predicted points, and the selection regret at several budgets. Regret is the time-to-accuracy
of the choice made on the predicted table, costed on the true table, over that of the choice
made on the true table, minus 1. A predicted choice is verified first, as the device does
(issue 11, verify-before-trust, ``fleet.trust.verify.select_verified``): the true table answers the
probe, the table is corrected and the selection repeated; those probes are counted. The
baseline is the separable fit ``Y(b, k) = Y_b * Y_k`` (least squares in log space) on the
same probes.
It also prints the probe counts of the full grid, the staircase and predict mode per board.
The reference profiles are modeled (simulations/devicemodel/) and get refitted; rerun this
script after they change.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from fleet.agent.predict import QUANTITIES, predict_profile
from fleet.agent.predict_design import design_probes
from fleet.agent.profile_io import read_rows
from fleet.agent.staircase import Measurement, staircase_plan
from fleet.common.errors import InfeasibleError
from fleet.core.choice import align
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import Point, Profile
from fleet.core.selection import select
from fleet.reports.report import json_safe
from fleet.trust.verify import select_verified

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Key = tuple[int, float]


def load_grid(path: str) -> tuple[list[int], list[float], dict[Key, dict[str, str]], str]:
    _header, numbered, _comments = read_rows(path)
    table: dict[Key, dict[str, str]] = {}
    model = ""
    for _lineno, row in numbered:
        if (row.get("status") or "ok") != "ok" or not row.get("time_per_batch_s"):
            continue
        table[(int(row["batch_size"]), float(row["freq_mhz"]))] = row
        model = model or row.get("model", "")
    bs = sorted({k[0] for k in table})
    fs = sorted({k[1] for k in table})
    return bs, fs, table, model


def separable(
    probes: dict[Key, dict[str, str]], bs: list[int], fs: list[float]
) -> dict[str, dict[Key, float]]:
    """Naive baseline: log Y = a_b + c_k on the probes; unprobed knobs interpolated in c."""
    out: dict[str, dict[Key, float]] = {}
    for q in QUANTITIES:
        keys = [k for k, r in probes.items() if r.get(q)]
        if not keys:
            continue
        pk = sorted({k[1] for k in keys})
        bi = {b: i for i, b in enumerate(bs)}
        ki = {k: len(bs) + j for j, k in enumerate(pk)}
        a = np.zeros((len(keys) + 1, len(bs) + len(pk)))
        y = np.zeros(len(keys) + 1)
        for n, (b, k) in enumerate(keys):
            a[n, bi[b]] = 1.0
            a[n, ki[k]] = 1.0
            y[n] = math.log(float(probes[(b, k)][q]))
        a[-1, ki[pk[0]]] = 1.0  # gauge: c at the lowest knob = 0
        sol = np.linalg.lstsq(a, y, rcond=None)[0]
        c = np.interp(fs, pk, [sol[ki[k]] for k in pk])
        out[q] = {(b, f): math.exp(sol[bi[b]] + c[j]) for b in bs for j, f in enumerate(fs)}
    return out


def to_profile(values: dict[str, dict[Key, float]], keys: list[Key], name: str) -> Profile:
    pts = []
    for k in keys:
        peak = values["peak_power_w"][k]
        mean = values.get("mean_power_w", values["peak_power_w"])[k]
        pts.append(Point(k[0], k[1], values["time_per_batch_s"][k], peak, mean))
    return Profile(pts, name)


def verified_choice(
    vals: dict[str, dict[Key, float]],
    table: dict[Key, dict[str, str]],
    probed: set[Key],
    eff: Efficiency,
    budget: float | None,
) -> tuple[Key | None, int, int]:
    """The product's verify-before-trust (fleet.trust.verify.select_verified) on the predicted
    table, with the true table as the device. Returns (final point, probes, over-budget catches)."""
    rows = [
        {
            "batch_size": k[0],
            "freq_mhz": k[1],
            **{q: vals[q][k] for q in QUANTITIES if q in vals},
            "source": "measured" if k in probed else "predicted",
        }
        for k in sorted(table)
    ]
    try:
        got = select_verified(rows, eff, budget, lambda b, f: dict(table[(b, f)]), max_probes=20)
    except InfeasibleError:
        return None, 0, 0
    over = sum("over budget" in c.reason for c in got.corrections)
    return (got.choice.batch_size, got.choice.freq_mhz), len(got.corrections), over


def tta(p: Point, eff: Efficiency) -> float:
    return p.time_per_batch_s / p.batch_size * eff.reached[p.batch_size]


def efficiencies_for(model: str) -> list[str]:
    paths = glob.glob(os.path.join(ROOT, "simulations", "efficiency", f"{model}_*.csv"))
    paths += glob.glob(os.path.join(ROOT, "simulations", "efficiency", "trained", f"{model}_*.csv"))
    return sorted(p for p in paths if "proxy" not in p and not p.endswith(".runs.csv"))


def evaluate(path: str, budgets: list[float | None]) -> dict[str, object] | None:
    bs, fs, table, model = load_grid(path)
    if len(bs) < 2 or len(fs) < 3:
        return None
    design = [k for k in design_probes(bs, fs) if k in table]
    probed = set(design)
    sparse = [dict(table[k]) for k in design]
    t0 = time.perf_counter()
    ours = predict_profile(sparse, bs, fs)
    fit_s = time.perf_counter() - t0
    ours_vals = {
        q: {(int(r["batch_size"]), float(r["freq_mhz"])): float(r[q]) for r in ours.rows}
        for q in QUANTITIES
    }
    base_vals = separable({k: table[k] for k in design}, bs, fs)
    keys = sorted(table)
    truth_vals = {q: {k: float(table[k][q]) for k in keys} for q in QUANTITIES}
    truth = to_profile(truth_vals, keys, path)
    out: dict[str, object] = {
        "profile": os.path.relpath(path, ROOT),
        "probes": len(design),
        "grid": len(bs) * len(fs),
        "fit_s": fit_s,
    }
    todo = [k for k in keys if k not in probed]
    for label, vals in (("ours", ours_vals), ("separable", base_vals)):
        for q, short in (("time_per_batch_s", "time"), ("peak_power_w", "peak")):
            errs = [abs(vals[q][k] - truth_vals[q][k]) / truth_vals[q][k] for k in todo]
            out[f"{label}_{short}_mean"] = statistics.mean(errs)
            out[f"{label}_{short}_max"] = max(errs)
        regrets, catches, checks = [], 0, 0
        for eff_path in efficiencies_for(model):
            prof_t, eff, _ = align(truth, load_efficiency(eff_path))
            for budget in budgets:
                try:
                    best = select(prof_t, eff, budget)
                except InfeasibleError:
                    continue
                got, n_probes, caught = verified_choice(vals, table, probed, eff, budget)
                catches += caught
                checks += n_probes
                if got is None:
                    regrets.append(math.inf)
                    continue
                regrets.append(tta(truth.point(*got), eff) / best.predicted_time_s - 1.0)
        out[f"{label}_regrets"] = regrets
        out[f"{label}_verify"] = catches
        out[f"{label}_verify_probes"] = checks
    return out


def probe_counts(budgets: list[float | None]) -> list[dict[str, object]]:
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "simulations", "profiles", "*.csv"))):
        bs, fs, table, _model = load_grid(path)
        entry: dict[str, object] = {
            "profile": os.path.basename(path),
            "full": len(bs) * len(fs),
            "predict": len(design_probes(bs, fs)),
        }
        for budget in budgets:
            if budget is None:
                continue

            def measure(b: int, f: float, table=table) -> Measurement | None:
                r = table.get((b, f))
                if r is None:
                    return None
                return Measurement(
                    float(r["time_per_batch_s"]),
                    float(r["peak_power_w"]),
                    float(r["mean_power_w"]),
                )

            entry[f"staircase_{budget:g}W"] = len(staircase_plan(bs, fs, budget, measure).probes)
        rows.append(entry)
    return rows


def _pct(x: float) -> str:
    return "inf" if math.isinf(x) else f"{100 * x:.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="4.5,5,7,none", help="comma-separated W or 'none'")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    budgets = [None if x.strip() == "none" else float(x) for x in args.budgets.split(",")]
    paths = sorted(glob.glob(os.path.join(ROOT, "simulations", "profiles", "*.csv")))
    paths += sorted(glob.glob(os.path.join(ROOT, "simulations", "profiles", "measured", "*.csv")))
    results, skipped = [], []
    for path in paths:
        r = evaluate(path, budgets)
        if r is None:
            skipped.append(os.path.relpath(path, ROOT))
        else:
            results.append(r)
    counts = probe_counts(budgets)
    summary: dict[str, object] = {}
    for label in ("ours", "separable"):
        regrets = [x for r in results for x in r[f"{label}_regrets"]]
        summary[label] = {
            "time_mean": statistics.mean(r[f"{label}_time_mean"] for r in results),
            "time_max": max(r[f"{label}_time_max"] for r in results),
            "peak_mean": statistics.mean(r[f"{label}_peak_mean"] for r in results),
            "peak_max": max(r[f"{label}_peak_max"] for r in results),
            "regret_median": statistics.median(regrets),
            "regret_max": max(regrets),
            "selections": len(regrets),
            "verify_catches": sum(r[f"{label}_verify"] for r in results),
            "verify_probes": sum(r[f"{label}_verify_probes"] for r in results),
        }
    summary["probe_fraction_max"] = max(r["probes"] / r["grid"] for r in results)
    if args.json:
        doc = {"profiles": results, "summary": summary, "probe_counts": counts, "skipped": skipped}
        json.dump(json_safe(doc), sys.stdout)
        print()
        return 0
    head = (
        f"{'profile':34} {'probes':>8} | {'ours t mean/max':>17} {'P mean/max':>15} "
        f"{'regret med/max':>17} | {'separable t':>15} {'P':>15} {'regret med/max':>17}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        cells = [f"{r['profile'][20:]:34} {r['probes']:>3}/{r['grid']:<4}"]
        for label in ("ours", "separable"):
            reg = r[f"{label}_regrets"]
            cells.append(
                f"{_pct(r[f'{label}_time_mean']):>8}/{_pct(r[f'{label}_time_max']):<8} "
                f"{_pct(r[f'{label}_peak_mean']):>7}/{_pct(r[f'{label}_peak_max']):<7} "
                f"{_pct(statistics.median(reg)):>8}/{_pct(max(reg)):<8}"
            )
        print(" | ".join(cells))
    print()
    for label in ("ours", "separable"):
        s = summary[label]
        print(
            f"{label:10} time mean {_pct(s['time_mean'])} (worst {_pct(s['time_max'])}), "
            f"peak mean {_pct(s['peak_mean'])} (worst {_pct(s['peak_max'])}), regret median "
            f"{_pct(s['regret_median'])} (worst {_pct(s['regret_max'])}) over "
            f"{s['selections']} selections; verification probed {s['verify_probes']} "
            f"predicted choices, {s['verify_catches']} of them over budget"
        )
    ours = summary["ours"]
    goals = [
        ("probes <= 25% of grid", summary["probe_fraction_max"] <= 0.25),
        ("mean time error <= 3%", ours["time_mean"] <= 0.03),
        ("mean peak-power error <= 3%", ours["peak_mean"] <= 0.03),
        ("median regret <= 1%", ours["regret_median"] <= 0.01),
    ]
    print("goals: " + ", ".join(f"{g} {'ok' if ok else 'MISSED'}" for g, ok in goals))
    if skipped:
        print("skipped (no grid: fewer than 2 batch sizes or 3 knobs): " + ", ".join(skipped))
    print()
    print("probe counts (budgets for the staircase; predict = default design, 25% of the grid)")
    for c in counts:
        print("  " + ", ".join(f"{k}={v}" for k, v in c.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
