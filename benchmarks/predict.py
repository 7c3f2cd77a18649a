"""Predicting un-probed profile points, on modeled and on real measured grids, side by side.

    python benchmarks/predict.py [--real DIR] [--designs frame,frame+adapt,default] [--json]

For every full grid (>= 3 batch sizes x >= 3 knobs, time and power at every point) the script
probes a design, predicts the rest with ``powerfleet predict``'s predictor (per-column model
chosen by cross-validation, conservative power bound) and with the naive separable fit of the
same probes, and scores both against the held-out truth (``benchmarks/predict_eval.py``): mean
relative error of step time and power on the predicted points; choosing with the predicted
table at six budgets inside the grid's power range and three efficiency shapes, the worst
regret and how many choices are over the budget in truth; ``verified``: the worst regret once the
device's verify-before-trust has probed the predicted choice and the points its bound held back
(``fleet.trust.verify.select_verified``, the true table answering).

Sets:
- ``modeled``: the reference Nano / TX2 NX profiles (``simulations/profiles``, clock knob);
- ``modeled-cap``: the same devices driven by a power limit in watts (``power_limit_view``);
- ``modeled-cap-noisy``: those power-limit grids as a real card would read them: each batch
  size at its own fraction of the limit, 1 % noise on every reading (``noisy_limit_view``);
- with ``--noise-seeds N``: ``modeled-noisy-seeds`` (the clock grids, 1 % noise on every
  reading, ``noisy_view``) and ``modeled-cap-noisy-seeds`` (``noisy_limit_view``), N noise
  draws of each profile: whether the bound's safety survives more draws than one;
  ``--reading-noise PCT`` sets the noise of every noisy set (default 1 %);
- ``real``: every full grid under ``--real DIR`` (default: the committed published grids,
  ``benchmarks/published/dlbench_dvfs``, derived by ``benchmarks/published/derive_dlbench.py``
  from a pinned snapshot; docs/published-data.md).

Designs: ``frame`` (both end batch sizes at every knob, both end knobs at every batch size: the
frame a device can probe in one sweep of each axis), ``default`` (the profiler's design, a
quarter of the grid), ``+adapt`` (then up to a tenth of the grid more, where a measurement could
change a choice: ``fleet.agent.prediction.adapt``).
Goals (issue 30, frame design, no extra probes): time and power error <= 3 % mean, 0 picks over
budget, worst regret <= 10 %. ``--markdown`` prints the tables of docs/published-data.md: per
grid, and per set why a regret is what it is (the same choices with selection held to the
prediction alone, and with every point's true power known: the power bound's share of the
regret against the time model's).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.predict_eval import (  # noqa: E402
    evaluate_grid,
    fixed_batch,
    is_full,
    load_grid,
    noisy_limit_view,
    noisy_view,
    power_limit_view,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(ROOT, "benchmarks", "published", "dlbench_dvfs")
PER_STEP: set[str] = set()  # grids whose first axis is not a batch size (predict_eval.fixed_batch)
GOALS = {"time_mean": 0.03, "power_mean": 0.03, "regret_max": 0.10, "over_budget": 0}


def grid_sets(real: str | None, seeds: int = 0, noise: float = 0.01) -> dict[str, dict[str, dict]]:
    modeled = {
        os.path.basename(p): load_grid(p)
        for p in sorted(glob.glob(os.path.join(ROOT, "simulations", "profiles", "*.csv")))
    }
    sets = {
        "modeled": {k: t for k, t in modeled.items() if is_full(t)},
        "modeled-cap": {k: power_limit_view(t) for k, t in modeled.items() if is_full(t)},
        "modeled-cap-noisy": {
            k: noisy_limit_view(power_limit_view(t), zlib.crc32(k.encode()), noise)
            for k, t in modeled.items()
            if is_full(t)
        },
    }
    if seeds:  # the noisy views again, each profile under more noise draws (safety's margin)
        full = {k: t for k, t in modeled.items() if is_full(t)}
        draws = [
            (f"{k}#{i}", t, zlib.crc32(k.encode()) + 7919 * i)
            for k, t in full.items()
            for i in range(1, seeds + 1)
        ]
        sets["modeled-noisy-seeds"] = {g: noisy_view(t, s, noise) for g, t, s in draws}
        sets["modeled-cap-noisy-seeds"] = {
            g: noisy_limit_view(power_limit_view(t), s, noise) for g, t, s in draws
        }
    if real:
        found = {os.path.basename(p): p for p in sorted(glob.glob(f"{real}/*.csv"))}
        sets["real"] = {k: load_grid(p) for k, p in found.items() if is_full(load_grid(p))}
        PER_STEP.update(k for k, p in found.items() if fixed_batch(p))
    return sets


def summarise(results: list[dict]) -> dict[str, float]:
    regrets = [x for r in results for x in r["regrets"]]
    return {
        "grids": len(results),
        "time_mean": statistics.mean(r["time_mean"] for r in results),
        "time_max": max(r["time_max"] for r in results),
        "power_mean": statistics.mean(r["power_mean"] for r in results),
        "power_max": max(r["power_max"] for r in results),
        "regret_median": statistics.median(regrets),
        "regret_max": max(regrets),
        "over_budget": sum(r["over_budget"] for r in results),
        "verified_regret_max": max(x for r in results for x in r["verified_regrets"]),
        "no_margin_regret_max": max(x for r in results for x in r["no_margin_regrets"]),
        "no_margin_over_budget": sum(r["no_margin_over_budget"] for r in results),
        "exact_power_regret_max": max(x for r in results for x in r["exact_power_regrets"]),
        "choices": len(regrets),
        "probe_fraction": statistics.mean(r["probes"] / r["grid"] for r in results),
    }


def run(real: str | None, designs: list[str], seeds: int = 0, noise: float = 0.01) -> dict:
    out: dict = {"sets": {}}
    for name, grids in grid_sets(real, seeds, noise).items():
        if not grids:
            continue
        per: dict = {}
        for design in designs:
            for predictor in ("ours", "separable"):
                results = {
                    g: evaluate_grid(t, design, predictor, g in PER_STEP) for g, t in grids.items()
                }
                per[f"{design}/{predictor}"] = {
                    "summary": summarise(list(results.values())),
                    "grids": results,
                }
        out["sets"][name] = per
    return out


def markdown(doc: dict) -> list[str]:
    """Per set and grid, frame design: ours and the separable fit of the same probes."""
    out = [
        "| set | grid | models (time/power) | time err | power err | over budget "
        "| regret worst/median | separable: time / power / over / worst regret |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, per in doc["sets"].items():
        ours, sep = per["frame/ours"], per["frame/separable"]
        rows = [(g, r, sep["grids"][g]) for g, r in ours["grids"].items()]
        rows.append(("**all**", ours["summary"], sep["summary"]))
        for grid, r, s in rows:
            methods = r.get("methods") or {}
            chosen = "/".join(methods.get(q, "") for q in ("time_per_batch_s", "peak_power_w"))
            regrets = r.get("regrets")
            worst = max(regrets) if regrets else r["regret_max"]
            median = statistics.median(regrets) if regrets else r["regret_median"]
            s_worst = max(s["regrets"]) if "regrets" in s else s["regret_max"]
            out.append(
                f"| {name} | {grid.removesuffix('.csv')} | {chosen} | {_pct(r['time_mean'])} "
                f"| {_pct(r['power_mean'])} | {r['over_budget']} | {_pct(worst)} / "
                f"{_pct(median)} | {_pct(s['time_mean'])} / {_pct(s['power_mean'])} / "
                f"{s['over_budget']} / {_pct(s_worst)} |"
            )
    return out


def why_markdown(doc: dict) -> list[str]:
    """Per set, frame design, ours: the worst regret as chosen (the bound), with selection held
    to the prediction alone (no bound), and with every point's true power known (only the
    predicted time left). Says whether a regret is the time model's or the power bound's."""
    out = [
        "| set | worst regret (bound) / over | bound = prediction: worst regret / over "
        "| true power known: worst regret / over |",
        "|---|---|---|---|",
    ]
    for name, per in doc["sets"].items():
        s = per["frame/ours"]["summary"]
        out.append(
            f"| {name} | {_pct(s['regret_max'])} / {s['over_budget']} "
            f"| {_pct(s['no_margin_regret_max'])} / {s['no_margin_over_budget']} "
            f"| {_pct(s['exact_power_regret_max'])} / 0 |"
        )
    return out


def _pct(x: float) -> str:
    return "inf" if math.isinf(x) else f"{100 * x:.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--real",
        default=REAL,
        help="folder of real measured full-grid profile CSVs (default: the committed "
        "benchmarks/published/dlbench_dvfs)",
    )
    ap.add_argument("--designs", default="frame,frame+adapt,default,default+adapt")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument(
        "--noise-seeds",
        type=int,
        default=0,
        metavar="N",
        help="add the sets modeled-noisy-seeds (clock grids, 1 %% noise per reading) and "
        "modeled-cap-noisy-seeds (power-limit grids as a card reads them), N noise draws each",
    )
    ap.add_argument(
        "--reading-noise",
        type=float,
        default=1.0,
        metavar="PCT",
        help="relative sd of every reading in the noisy sets, in percent (default 1): whether a "
        "regret or a pick over budget comes from the noise or from where a budget falls",
    )
    ap.add_argument(
        "--markdown",
        action="store_true",
        help="the per-grid table of docs/published-data.md (frame design, ours vs separable)",
    )
    args = ap.parse_args()
    if args.markdown:
        args.designs = "frame"
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    if not 0.0 <= args.reading_noise <= 20.0:
        ap.error(f"--reading-noise: expected a percentage in 0-20, got {args.reading_noise:g}")
    doc = run(args.real, designs, args.noise_seeds, args.reading_noise / 100.0)
    if args.markdown:
        print("\n".join(markdown(doc)))
        print()
        print("\n".join(why_markdown(doc)))
        return 0
    if args.json:
        json.dump(doc, sys.stdout, default=str)
        print()
        return 0
    print(
        f"{'set':12} {'design/predictor':24} {'grids':>5} {'probed':>7} {'time mean/max':>17} "
        f"{'power mean/max':>17} {'regret med/max':>17} {'over':>5} {'verified':>9}  goals"
    )
    for name, per in doc["sets"].items():
        for label, entry in per.items():
            s = entry["summary"]
            met = [s[k] <= v for k, v in GOALS.items()]
            print(
                f"{name:12} {label:24} {s['grids']:>5} {_pct(s['probe_fraction']):>7} "
                f"{_pct(s['time_mean']):>8}/{_pct(s['time_max']):<8} "
                f"{_pct(s['power_mean']):>8}/{_pct(s['power_max']):<8} "
                f"{_pct(s['regret_median']):>8}/{_pct(s['regret_max']):<8} "
                f"{s['over_budget']:>5} {_pct(s['verified_regret_max']):>9}  "
                f"{'all met' if all(met) else 'MISSED'}"
            )
    print()
    print("models chosen by cross-validation (ours, frame design):")
    for name, per in doc["sets"].items():
        entry = per.get("frame/ours") or next(iter(per.values()))
        for grid, r in entry["grids"].items():
            methods = ",".join(f"{q.split('_')[0]}={m}" for q, m in r.get("methods", {}).items())
            print(
                f"  {name:12} {grid:40} {methods:45} time {_pct(r['time_mean'])} power "
                f"{_pct(r['power_mean'])} regret max {_pct(max(r['regrets']))} over "
                f"{r['over_budget']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
