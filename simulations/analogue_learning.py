"""Efficiency that learns, measured on real training: extra time over the oracle, per method.

Why: the analogues (``simulations/analogue.py``, ``simulations/analogue_text.py``) fine-tune real
models on real data many times over and record every evaluation of every run
(``simulations/efficiency/trained/*.curves.csv``, with the gradient noise scale the training
steps showed). That is what a device would have seen. For every (proxy, target) pair, device and
budget, a device whose data is the target's trains with:

1. ``proxy``: the proxy's vector alone (Algorithm 1, ``learn_efficiency = "none"``);
2. ``device``: the proxy as prior and the noise scale of its own training steps (``device``);
3. ``online``: the proxy as prior and its own learning curve (``online``);
4. ``all``: both (``all``);

and the oracle chooses once with the target's own mean (the paper's "fastest configuration").
Each method runs the product's device round on the virtual clock (``run_device`` with
``VirtualClock``: the same code as a simulated fleet) once per recorded seed of the target: the
device reads *that* seed's curves at the fraction of the target it has reached, and its samples
to the target at each batch size are that seed's own. Extra time is the seeds' mean time over
the oracle's mean time on the same seeds, minus one, as the paper's Fig. 5/6.

``python -m simulations.analogue_learning [--task image|text] [--out DIR]`` writes the tables
(Markdown and JSON) from the committed curves in about a minute; nothing trains.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from fleet.common.errors import InfeasibleError, InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.curves import Curves, agreed_target, curves_path, load_curves, trace_curves
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import SelectionIndex
from fleet.rounds.device_round import run_device
from fleet.rounds.virtual_clock import VirtualClock

HERE = Path(__file__).resolve().parent
TRAINED = HERE / "efficiency" / "trained"
METHODS = {"proxy": "none", "device": "device", "online": "online", "all": "all"}
BUDGETS = (4.5, 7.0, None)
DEVICES = ("nano", "tx2nx")


@dataclass(frozen=True)
class Study:
    """One analogue: the profiles' model, the efficiency files' model, the datasets."""

    task: str
    profile_model: str
    efficiency_model: str
    datasets: tuple[str, ...]
    optimizer: str
    lr_ref_batch: int
    lr_ref: float
    device_type: dict[str, str] = None  # type: ignore[assignment]

    def efficiency_path(self, dataset: str) -> Path:
        return TRAINED / f"{self.efficiency_model}_{dataset}.csv"


STUDIES = {
    "image": Study("image", "small_cnn", "small_cnn", ("mnist-5k", "fashion-a", "fashion-b"),
                   "adam", 128, 1e-3),
    "text": Study("text", "transformer", "char_transformer_small",
                  ("shakespeare-proxy", "austen", "mobydick"), "adamw", 32, 1e-3),
}  # fmt: skip
TYPES = {"nano": "jetson-nano", "tx2nx": "jetson-tx2nx"}


@dataclass(frozen=True)
class Seeded:
    """One target's recorded runs: per seed, its samples to the target at each batch size."""

    curves: Curves
    target: float
    per_seed: dict[int, dict[int, float]]  # seed -> {batch size: samples (nan: not reached)}

    @property
    def seeds(self) -> list[int]:
        return sorted(self.per_seed)

    def mean(self) -> Efficiency:
        """The mean over seeds (a batch size some seed never reached is left unreached)."""
        bs = sorted({b for v in self.per_seed.values() for b in v})
        out = {}
        for b in bs:
            vals = [v.get(b, math.nan) for v in self.per_seed.values()]
            out[b] = math.nan if any(math.isnan(x) for x in vals) else statistics.fmean(vals)
        return Efficiency(out, source=str(self.curves.source))


def seeded(path: Path) -> Seeded:
    """A target's runs from its efficiency file's curves (``X.curves.csv``)."""
    eff = load_efficiency(path)
    curves = load_curves(curves_path(path))
    target = agreed_target(curves, eff)
    if target is None:
        raise InputError(f"{path}: no target_accuracy in the trace or its curves")
    # Seeds recorded before the noise tracker existed lack its readings; a target is evaluated
    # on the seeds that have them (where any do), so every method sees the same runs.
    noisy = {s for _, s in curves.noise}
    per: dict[int, dict[int, float]] = {}
    for b, s in curves.runs:
        if not noisy or s in noisy:
            per.setdefault(s, {})[b] = curves.reached_at(b, s, target)
    return Seeded(curves, target, per)


def run_cell(
    study: Study, device: str, budget: float | None, proxy: str, target: str
) -> dict[str, object]:
    """Every method's extra time over the oracle for one cell (a worker process runs it)."""
    profile = load_profile(HERE / "profiles" / f"{device}_{study.profile_model}.csv")
    index = SelectionIndex(profile)
    tgt = seeded(study.efficiency_path(target))
    shipped = load_efficiency(study.efficiency_path(proxy))  # what `powerfleet estimate` ships
    truth = tgt.mean()
    spec = DeviceSpec(f"{device}-{target}", TYPES[device], budget, str(profile.source), "x")
    base = RunSettings(
        "analogue-learning", study.profile_model, proxy, tgt.target, optimizer=study.optimizer,
        lr_ref_batch=study.lr_ref_batch, lr_ref=study.lr_ref,
    )  # fmt: skip
    out: dict[str, object] = {
        "board": device, "budget_w": budget, "proxy_data": proxy, "target_data": target,
        "seeds": len(tgt.seeds),
    }  # fmt: skip
    try:
        oracle = index.select(truth, budget)
    except InfeasibleError:
        return {**out, "status": "infeasible"}
    oracle_times = [
        oracle.time_per_batch_s / oracle.batch_size * tgt.per_seed[s][oracle.batch_size]
        for s in tgt.seeds
    ]
    out["oracle"] = [oracle.batch_size, oracle.freq_mhz]
    base_time = statistics.fmean(oracle_times)
    for name, mode in METHODS.items():
        run = replace(base, learn_efficiency=mode)
        times, switches, firsts = [], 0, []
        for s in tgt.seeds:
            ns = tgt.per_seed[s]
            trace = Efficiency(dict(ns), source=f"{target}#seed{s}",
                               metadata={"target_accuracy": f"{tgt.target:g}"})  # fmt: skip
            curves = trace_curves(tgt.curves, trace.reached, tgt.target, s)
            clock = VirtualClock(trace, curves=curves if mode != "none" else None)
            row = run_device(spec, profile, shipped, run, clock, index=index)
            ok = row.status == "ok" and row.time_s is not None
            times.append(float(row.time_s) if ok and row.time_s is not None else math.inf)
            switches += sum(1 for seg in row.segments if seg.reason == "learned")
            firsts.append((row.batch_size, row.freq_mhz))
        mean = statistics.fmean(times) if all(math.isfinite(t) for t in times) else math.inf
        out[name] = 100.0 * (mean / base_time - 1.0)
        out[f"{name}_switches"] = switches
        out[f"{name}_first"] = max(set(firsts), key=firsts.count)
    return out


def run_study(study: Study, workers: int = 2) -> list[dict[str, object]]:
    jobs = [
        (study, d, b, p, t)
        for d in DEVICES
        for b in BUDGETS
        for p in study.datasets
        for t in study.datasets
    ]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_cell, jobs))


def _cell(job: tuple) -> dict[str, object]:
    return run_cell(*job)


def summary(cells: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    """Worst and median extra time per method over every cell (diagonal included)."""
    out = {}
    for name in METHODS:
        vals = [float(c[name]) for c in cells if c.get("status") != "infeasible"]  # type: ignore[arg-type]
        finite = [v for v in vals if math.isfinite(v)]
        out[name] = {
            "worst": max(vals) if vals else math.nan,
            "median": statistics.median(finite) if finite else math.nan,
            "cells": len(vals),
            "over_10": sum(v > 10 for v in vals),
        }
    return out


def markdown(study: Study, cells: list[dict[str, object]]) -> str:
    s = summary(cells)
    lines = [
        f"### {study.task} analogue ({study.efficiency_model}; profiles: modeled "
        f"{study.profile_model}; {cells[0]['seeds']} recorded seeds per target)",
        "",
        "| method | worst extra time | median | cells over 10 % |",
        "|---|---|---|---|",
    ]
    for name in METHODS:
        v = s[name]
        lines.append(
            f"| ({list(METHODS).index(name) + 1}) {name} | {v['worst']:+.1f} % | "
            f"{v['median']:+.1f} % | {v['over_10']} of {v['cells']} |"
        )
    for device in DEVICES:
        for budget in BUDGETS:
            label = "no limit" if budget is None else f"{budget:g} W"
            lines += [
                "",
                f"**{device}, {label}** — extra time over the oracle (%), proxy / device / "
                "online / all; `*` marks a cell where a learnt switch happened",
                "",
                "| proxy \\ target | " + " | ".join(study.datasets) + " |",
                "|---" * (1 + len(study.datasets)) + "|",
            ]
            for p in study.datasets:
                row = []
                for t in study.datasets:
                    c = next(
                        x for x in cells
                        if x["board"] == device and x["budget_w"] == budget
                        and x["proxy_data"] == p and x["target_data"] == t
                    )  # fmt: skip
                    if c.get("status") == "infeasible":
                        row.append("infeasible")
                        continue
                    moved = any(c[f"{m}_switches"] for m in METHODS)
                    row.append(" / ".join(f"{c[m]:.1f}" for m in METHODS) + (" *" if moved else ""))
                lines.append(f"| {p} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.analogue_learning")
    ap.add_argument("--task", choices=sorted(STUDIES), action="append")
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "efficiency"))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for task in args.task or sorted(STUDIES):
        study = STUDIES[task]
        cells = run_study(study, args.workers)
        (out / f"analogue_{task}.json").write_text(
            json.dumps({"cells": cells, "summary": summary(cells)}, indent=1, default=str) + "\n"
        )
        md = markdown(study, cells)
        (out / f"analogue_{task}.md").write_text(md)
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
