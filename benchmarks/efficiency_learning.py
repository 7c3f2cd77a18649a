"""Efficiency that learns: calibration, the deadline objective's plan, and the cost of the estimate.

    python benchmarks/efficiency_learning.py [--part calibrate|deadline|overhead|all]
                                             [--out docs/efficiency]

Three measurements, each printed as Markdown and kept in ``--out`` (``calibrate.md``,
``deadline.md``, ``overhead.md`` and ``results.json``); the analogue tables (extra time over the
oracle per method) come from ``python -m simulations.analogue_learning``.

- **calibrate**: how far one dataset's samples-to-target shape is from another's (every pair of
  one model, on the paper's reference efficiencies and the analogues' real training: the prior's
  widths, ``fleet/agent/efficiency_belief.PROXY_TRUST``); how well the learning-curve fit
  predicts the recorded runs (bias, error and whether its own spread covers the truth); how well
  the gradient-noise-scale law predicts the measured shapes, from the noise scale the training
  steps showed (``NoiseTracker``, recorded with the curves) and from one taken at the shipped
  weights before any training (``noise_scale``).
- **deadline**: the default and large fleets under the deadline objective on the direct engine:
  the round's planned deadline against the round time that followed, and the training energy
  saved against the time objective, for devices that do not learn, that learn online within
  the round (with the coordinator re-planning every 600 device seconds), and over three rounds
  of a fleet that learns across rounds; beside the perfect-information ceiling (every device
  shipped its own trace).
- **overhead**: what the on-device estimate costs: training steps with and without the noise
  tracker, timed side by side on this CPU (a ratio), and the explicit estimate's backward passes
  in device time (the profile's) against the training time it plans.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.agent.learning.efficiency_learner import shape_from_noise  # noqa: E402
from fleet.agent.learning.learning_curve import fit_curve  # noqa: E402
from fleet.core.curves import (  # noqa: E402
    curves_path,
    load_curves,
    noise_law_error,
    warm_noise_scale,
)
from fleet.core.efficiency import load_efficiency  # noqa: E402

EFF = ROOT / "simulations" / "efficiency"
TRAINED = EFF / "trained"
FAMILIES = {
    "resnet18 (paper reference)": ["resnet18_cifar10-proxy", "resnet18_svhn", "resnet18_cinic"],
    "mobilenetv2 (paper reference)": [
        "mobilenetv2_cifar10-proxy", "mobilenetv2_svhn", "mobilenetv2_cinic",
    ],
    "transformer (paper reference)": [
        "transformer_shakespeare-proxy", "transformer_austen", "transformer_dickens",
    ],
    "small_cnn (trained)": [
        "trained/small_cnn_mnist-5k", "trained/small_cnn_fashion-a", "trained/small_cnn_fashion-b",
    ],
    "char transformer (trained)": [
        "trained/char_transformer_small_shakespeare-proxy",
        "trained/char_transformer_small_austen", "trained/char_transformer_small_mobydick",
    ],
}  # fmt: skip
REAL = [f for fam in FAMILIES.values() for f in fam if f.startswith("trained/")]


# ----------------------------------------------------------------------------------- calibrate


def pair_shapes() -> dict:
    """Offset, slope per octave and residual of log N_T - log N_P over every ordered pair."""
    import numpy as np

    offs, slopes, resid, rows = [], [], [], []
    for fam, names in FAMILIES.items():
        logs = {}
        for n in names:
            e = load_efficiency(EFF / f"{n}.csv")
            logs[n] = {b: math.log(v) for b, v in e.reached.items()}
        for a, b in itertools.permutations(names, 2):
            bs = sorted(set(logs[a]) & set(logs[b]))
            d = np.array([logs[b][x] - logs[a][x] for x in bs])
            x = np.log2(bs) - np.log2(bs).mean()
            off = float(d.mean())
            sl = float(x @ d / (x @ x))
            r = d - off - sl * x
            offs.append(off)
            slopes.append(sl)
            resid += list(r)
            rows.append((fam, Path(a).name, Path(b).name, off, sl, float(r.std())))

    def rms(v: list[float]) -> float:
        return math.sqrt(sum(x * x for x in v) / len(v))

    return {
        "pairs": rows, "offset_rms": rms(offs), "slope_rms": rms(slopes),
        "resid_rms": rms(resid),
    }  # fmt: skip


def curve_calibration(fracs=(0.2, 0.35, 0.5, 0.7, 0.85)) -> dict:
    """The fit at a fraction of each recorded run's own samples-to-target against that count."""
    out = {}
    for name in REAL:
        c = load_curves(curves_path(EFF / f"{name}.csv"))
        per = {}
        for f in fracs:
            errs, zs, missing = [], [], 0
            for (b, s), pts in c.runs.items():
                n = c.reached_at(b, s, c.target)
                if not n > 0:
                    continue
                fit = fit_curve([p for p in pts if p[0] <= f * n], c.target)
                if fit is None or fit.reached or math.isinf(fit.samples):
                    missing += 1
                    continue
                e = math.log(fit.samples / n)
                errs.append(e)
                zs.append(abs(e) / fit.log_sd if fit.log_sd > 0 else math.inf)
            per[f] = {
                "runs": len(errs),
                "no_estimate": missing,
                "bias": statistics.fmean(errs) if errs else None,
                "rms": math.sqrt(statistics.fmean([e * e for e in errs])) if errs else None,
                "within_2sd": sum(z <= 2 for z in zs) / len(zs) if zs else None,
            }
        out[Path(name).name] = per
    return out


def noise_law() -> dict:
    """The law's shape at the noise scale the training steps showed (``warm_noise_scale``:
    between a tenth and half of each run) against each dataset's measured shape (mean over
    seeds): ``noise_law_error``, the figure ``powerfleet estimate`` writes as ``noise_law_err``."""
    out = {}
    for name in REAL:
        eff = load_efficiency(EFF / f"{name}.csv")
        c = load_curves(curves_path(EFF / f"{name}.csv"))
        bn = warm_noise_scale(c)
        if bn is None:
            continue
        law = shape_from_noise(bn, eff.batch_sizes)
        top = max(eff.reached)
        out[Path(name).name] = {
            "b_noise_warm": bn,
            "law": law,
            "measured": {b: n / eff.reached[top] for b, n in eff.reached.items()},
            "log_err_rms": noise_law_error(eff.reached, c),
        }
    return out


def calibrate_md(res: dict) -> str:
    p = res["pairs"]
    lines = [
        "# Calibration",
        "",
        "Generated by `python benchmarks/efficiency_learning.py --part calibrate`.",
        "",
        "## How far one dataset's shape is from another's (the prior's widths)",
        "",
        "`log N_T(b) - log N_P(b)` over every ordered pair of one model's datasets, split into an "
        "offset (the target is harder or easier overall), a slope per octave of batch size, and "
        "what is left per batch size.",
        "",
        "| model | proxy | target | offset | slope / octave | residual sd |",
        "|---|---|---|---|---|---|",
    ]
    for fam, a, b, off, sl, r in p["pairs"]:
        lines.append(f"| {fam} | {a} | {b} | {off:+.2f} | {sl:+.3f} | {r:.3f} |")
    lines += [
        "",
        f"RMS over the pairs: offset {p['offset_rms']:.2f}, slope {p['slope_rms']:.3f} per "
        f"octave, residual {p['resid_rms']:.3f}: `PROXY_TRUST` in "
        "`fleet/agent/learning/efficiency_belief.py` (offset taken 1.5x wider).",
        "",
        "## The learning-curve fit on recorded runs",
        "",
        "At a fraction of each run's own samples-to-target: mean and RMS error of the log of the "
        "predicted count, the share of runs whose truth lies within two of the fit's own "
        "standard deviations, and runs where the fit gave no estimate yet.",
        "",
        "| dataset | seen | runs | bias (log) | RMS (log) | within 2 sd | no estimate |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, per in res["curves"].items():
        for f, v in per.items():
            if v["runs"]:
                lines.append(
                    f"| {name} | {float(f):.0%} | {v['runs']} | {v['bias']:+.2f} | "
                    f"{v['rms']:.2f} | {v['within_2sd']:.0%} | {v['no_estimate']} |"
                )
    lines += [
        "",
        "## The gradient noise scale's law against the measured shapes",
        "",
        "The noise scale the training steps showed between 10 % and 50 % of each run (median "
        "over runs), its law's `N(b) / N(128)`, and the measured one (mean over seeds).",
        "",
        "| dataset | B_noise | law: b=4 / 32 / 64 | measured: b=4 / 32 / 64 | RMS log error |",
        "|---|---|---|---|---|",
    ]
    for name, v in res["noise"].items():
        law, m = v["law"], v["measured"]
        pick = [b for b in (4, 32, 64) if b in m]
        lines.append(
            f"| {name} | {v['b_noise_warm']:.0f} | "
            + " / ".join(f"{law[b]:.2f}" for b in pick)
            + " | "
            + " / ".join(f"{m[b]:.2f}" for b in pick)
            + f" | {v['log_err_rms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ deadline


def learning(fleet, mode: str):
    """The fleet with ``[run] learn_efficiency = mode``."""
    return dataclasses.replace(fleet, run=dataclasses.replace(fleet.run, learn_efficiency=mode))


def deadline_table(rounds: int = 3, segment_s: float = 600.0) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fleet_objectives import known_traces

    from fleet.config.fleetfile import load_fleet
    from fleet.planning.learning_rounds import simulate_rounds
    from fleet.planning.whatif import deadline_vs_time, simulate_fleet, totals
    from fleet.rounds.virtual_clock import cached_efficiency

    out = {}
    for label, name in (("default", "default.toml"), ("large", "large.toml")):
        fleet = load_fleet(ROOT / "simulations" / "fleets" / name)
        rows = []
        for mode in ("none", "online"):
            f = learning(fleet, mode)
            with tempfile.TemporaryDirectory() as t1, tempfile.TemporaryDirectory() as t2:
                ref = simulate_rounds(f, "time", rounds, t1, segment_s)
                got = simulate_rounds(f, "deadline", rounds, t2, segment_s)
            for k, (r, d) in enumerate(zip(ref, got, strict=True), start=1):
                cmp = deadline_vs_time(r.rows, d.rows)
                planned = (d.plan or {}).get("revisions", [{}])[0].get("deadline_s", d.deadline_s)
                rows.append({
                    "learn": mode, "round": k, "planned_s": planned, "final_s": d.deadline_s,
                    "actual_s": d.totals["round_time_s"], "time_objective_s":
                    r.totals["round_time_s"], "saved_pct": cmp["energy_saved_pct"],
                    "round_saved_pct": cmp["round_energy_saved_pct"], "late": d.totals["late"],
                })  # fmt: skip
                if mode == "none":
                    break  # a fleet that learns nothing plans every round the same
        t = simulate_fleet(fleet, "time")
        ceiling = totals(known_traces(fleet, "deadline", t.totals["round_time_s"]))
        ceil_pct = 100 * (t.totals["energy_j"] - ceiling["energy_j"]) / t.totals["energy_j"]
        # the same with segments: every device shipped its own trace (nothing to learn), the
        # coordinator re-planning as in the rows above; a device may then finish on two points
        # (slow, then fast), which one point for the whole round cannot match
        f0 = learning(fleet, "none")
        truth = {d.name: cached_efficiency(d.data or fleet.run.efficiency) for d in f0.devices}
        ts = simulate_fleet(f0, "time", segment_s=segment_s, own=truth)
        cs = simulate_fleet(f0, "deadline", segment_s=segment_s, own=truth)
        seg = deadline_vs_time(ts.rows, cs.rows)["energy_saved_pct"]
        out[label] = {
            "rows": rows, "ceiling_pct": ceil_pct, "segment_s": segment_s,
            "ceiling_segmented_pct": seg, "ceiling_segmented_round_s": cs.totals["round_time_s"],
        }  # fmt: skip
    return out


def deadline_md(res: dict) -> str:
    lines = [
        "# The deadline objective when devices learn",
        "",
        "Generated by `python benchmarks/efficiency_learning.py --part deadline` on the direct "
        "engine, segments of 600 device seconds with the coordinator re-planning after each "
        "(``fleet.planning.segmented_round``), over rounds that ship each device what the "
        "efficiency store learnt (``fleet.planning.learning_rounds``). *Planned*: the deadline "
        "set before anyone trained (the slowest device's fastest predicted finish, on the "
        "efficiency each device was shipped); *final*: after the re-plans; *actual*: the round "
        "time that followed. *Saved*: training energy against the time objective run the same "
        "way (same learning, same rounds). The ceiling: every device shipped its own trace, "
        "the deadline at the time objective's round time (`benchmarks/fleet_objectives.py`).",
        "",
    ]
    for label, v in res.items():
        lines += [
            f"## {label} fleet (ceiling: {v['ceiling_pct']:.1f} % of training energy saved)",
            "",
            f"With segments and perfect information (every device shipped its own trace, "
            f"the same re-plans) the deadline objective saves "
            f"{v['ceiling_segmented_pct']:.1f} % at a round of "
            f"{v['ceiling_segmented_round_s']:,.0f} s; the share column is of that ceiling "
            "(the one-point ceiling above is not one for a segmented round: a device that "
            "finishes on a slow point, then a fast one, mixes two points no single point "
            "matches).",
            "",
            "| devices learn | round | planned s | final s | actual s | planned vs actual | "
            "time objective s | saved | share of ceiling | round energy saved | late |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in v["rows"]:
            err = 100 * (r["planned_s"] - r["actual_s"]) / r["actual_s"]
            top = v["ceiling_segmented_pct"]
            share = 100 * r["saved_pct"] / top if top else math.nan
            lines.append(
                f"| {r['learn']} | {r['round']} | {r['planned_s']:,.0f} | {r['final_s']:,.0f} | "
                f"{r['actual_s']:,.0f} | {err:+.1f} % | {r['time_objective_s']:,.0f} | "
                f"{r['saved_pct']:.1f} % | {share:.0f} % | {r['round_saved_pct']:.1f} % | "
                f"{r['late']} |"
            )
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ overhead


def overhead(repeats: int = 7) -> dict:
    """Steps with and without the noise tracker, alternated, on this CPU; and the explicit
    estimate's device time against the training it plans, on the Nano profiles."""
    import torch

    from fleet.agent.learning.noise_scale import NoiseTracker
    from fleet.agent.models.registry import build_model, loss_fn
    from fleet.core.profile import load_profile

    torch.manual_seed(0)
    res = {"tracker": {}, "explicit": {}}

    def steps(model, opt, x, y, tracker, n: int) -> float:
        params = [p for p in model.parameters() if p.requires_grad]
        t0 = time.perf_counter()
        for _ in range(n):
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if tracker is not None:
                tracker.step(params, x.shape[0], opt)
            opt.step()
        return time.perf_counter() - t0

    for name, shape, b in (("small_cnn", (1, 28, 28), 64), ("resnet18", (3, 32, 32), 16)):
        model = build_model(name, num_classes=10, input_shape="x".join(map(str, shape)))
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        x, y = torch.randn(b, *shape), torch.randint(0, 10, (b,))
        n = 200 if name == "small_cnn" else 20
        steps(model, opt, x, y, None, 2)
        plain, tracked = [], []
        for _ in range(repeats):  # alternated: a slower moment hits both alike
            plain.append(steps(model, opt, x, y, None, n))
            tracked.append(steps(model, opt, x, y, NoiseTracker(), n))
        ratio = statistics.median(tracked) / statistics.median(plain)
        res["tracker"][name] = {"batch": b, "steps": n, "ratio": ratio}
    for model, passes in (("small_cnn", 64), ("resnet18", 64)):
        prof = load_profile(ROOT / "simulations" / "profiles" / f"nano_{model}.csv")
        fastest8 = min(p.time_per_batch_s for p in prof.points if p.batch_size == 8)
        eff = load_efficiency(EFF / ("trained/small_cnn_mnist-5k.csv" if model == "small_cnn"
                                     else "resnet18_svhn.csv"))  # fmt: skip
        best = min(p.time_per_batch_s / p.batch_size * eff.reached[p.batch_size]
                   for p in prof.points if p.batch_size in eff.reached)  # fmt: skip
        res["explicit"][model] = {
            "passes": passes, "device_s": passes * fastest8, "planned_s": best,
            "pct": 100 * passes * fastest8 / best,
        }  # fmt: skip
    return res


def overhead_md(res: dict) -> str:
    lines = [
        "# What the on-device estimate costs",
        "",
        "Generated by `python benchmarks/efficiency_learning.py --part overhead`.",
        "",
        "**The noise tracker** (`NoiseTracker`, the default on-device estimate: it reads the "
        "gradients of the steps the trainer takes anyway): training steps with and without it, "
        "alternated seven times on this CPU, median time ratio.",
        "",
        "| model | batch | steps per timing | time with / without |",
        "|---|---|---|---|",
    ]
    for name, v in res["tracker"].items():
        lines.append(f"| {name} | {v['batch']} | {v['steps']} | {v['ratio']:.3f} |")
    lines += [
        "",
        "**The explicit estimate** (`noise_scale`, before training: backward passes the "
        "training does not use), 64 passes of b=8 at the Nano's fastest clock, against the "
        "fastest training to the target it plans (device time from the profile):",
        "",
        "| model | passes | device s | planned training s | share |",
        "|---|---|---|---|---|",
    ]
    for name, v in res["explicit"].items():
        lines.append(
            f"| {name} | {v['passes']} | {v['device_s']:.2f} | {v['planned_s']:,.0f} | "
            f"{v['pct']:.2f} % |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("calibrate", "deadline", "overhead", "all"), default="all")
    ap.add_argument("--out", default=str(ROOT / "docs" / "efficiency"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    parts = ("calibrate", "deadline", "overhead") if args.part == "all" else (args.part,)
    for part in parts:
        if part == "calibrate":
            res = {"pairs": pair_shapes(), "curves": curve_calibration(), "noise": noise_law()}
            md = calibrate_md(res)
        elif part == "deadline":
            res = deadline_table()
            md = deadline_md(res)
        else:
            res = overhead()
            md = overhead_md(res)
        results[part] = res
        (out / f"{part}.md").write_text(md)
        print(md)
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
