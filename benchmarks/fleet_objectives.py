"""Fleet objectives side by side: round time and fleet energy for time, energy and deadline.

    python benchmarks/fleet_objectives.py [--out docs/fleet-objectives]

Runs one round of the default fleet and of the 1,000-device fleet on the direct engine under
each objective (``fleet.planning.whatif.simulate_fleet``, in segments with re-planning), plus
a budget sweep of the default fleet per objective for the time-energy front, and writes
``README.md`` (tables), ``results.json`` and two figures under ``--out``. Rerun it after the
reference profiles change; nothing is hand-typed.
The goal it checks (issue 14): the deadline objective keeps the time objective's round time and
spends at least 10 % less fleet energy on the default fleet. Fleet energy counts training only;
round energy (``fleet.planning.roundenergy``) adds every device's idle power while it waits for the
round to end, and both are reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from pathlib import Path

from fleet.config.fleetfile import Fleet, load_fleet
from fleet.method.profile_io import atomic_write, atomic_write_text
from fleet.planning.whatif import deadline_vs_time, pareto_front, simulate_fleet, sweep, totals
from fleet.reports.whatif_plot import plot_front

ROOT = Path(__file__).resolve().parents[1]
FLEETS = {
    "default (8 devices)": ROOT / "simulations" / "fleets" / "default.toml",
    "large (1,000 devices)": ROOT / "simulations" / "fleets" / "large.toml",
}
OBJECTIVES = ("time", "energy", "deadline")
SWEEP = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.0, 10.0]


def run(out: Path) -> dict:
    results: dict = {"fleets": {}, "sweep": {}}
    for label, path in FLEETS.items():
        fleet = load_fleet(path)
        rounds = {o: simulate_fleet(fleet, o) for o in OBJECTIVES}
        # the same round as the devices predict it: every device's trace is the shipped
        # efficiency, so actual = predicted (what each objective optimises)
        shipped = predicted_fleet(fleet)
        predicted = {o: simulate_fleet(shipped, o).totals for o in OBJECTIVES}
        # what the devices could do if each knew its own trace (no method does): the deadline
        # objective at the time objective's actual round time, and a round planned on the traces
        round_s = rounds["time"].totals["round_time_s"]
        known_time = known_traces(fleet, "time")
        results_known = {
            "at_time_round": totals(known_traces(fleet, "deadline", round_s)),
            "time": totals(known_time),
            "deadline": totals(known_traces(fleet, "deadline", totals(known_time)["round_time_s"])),
        }
        results["fleets"][label] = {
            "known_traces": results_known,
            "fleet_file": str(path.relative_to(ROOT)),
            "objectives": {o: {**r.totals, "deadline_s": r.deadline_s} for o, r in rounds.items()},
            "predicted": predicted,
            "deadline_vs_time": deadline_vs_time(rounds["time"].rows, rounds["deadline"].rows),
        }
        if len(fleet.devices) > 50:  # keep results.json small: per-device rows for small fleets
            results["fleets"][label]["deadline_vs_time"]["devices"] = []
    default = load_fleet(FLEETS["default (8 devices)"])
    for o in OBJECTIVES:
        results["sweep"][o] = [dataclasses.asdict(s) for s in sweep(default, SWEEP, False, o)]
    steps = sweep(default, SWEEP, False, "deadline")
    plot_front(
        steps,
        pareto_front(steps),
        out / "front_default.png",
        "default fleet, uniform budget sweep (labels: W)",
        series={o: sweep(default, SWEEP, False, o) for o in ("time", "energy")},
    )
    bars(results, out / "objectives.png")
    return results


def known_traces(fleet: Fleet, objective: str, deadline_s: float | None = None) -> list[dict]:
    """One round in which every device predicts with its own convergence trace (as if the
    coordinator had shipped each device the truth): devices are grouped by trace and each group
    simulated with that trace as the shipped efficiency; a deadline, if any, is the given one."""
    groups: dict[str, list] = {}
    for d in fleet.devices:
        groups.setdefault(d.data or fleet.run.efficiency, []).append(d)
    rows: list[dict] = []
    for trace, devices in groups.items():
        sub = dataclasses.replace(
            fleet,
            devices=tuple(devices),
            run=dataclasses.replace(fleet.run, efficiency=trace),
        )
        rows += simulate_fleet(sub, objective, deadline_s).rows
    return rows


def predicted_fleet(fleet: Fleet) -> Fleet:
    """The fleet with every device's convergence trace replaced by the shipped efficiency."""
    devices = tuple(dataclasses.replace(d, data=fleet.run.efficiency) for d in fleet.devices)
    return dataclasses.replace(fleet, devices=devices)


def bars(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fleets = list(results["fleets"])
    fig, axes = plt.subplots(2, len(fleets), figsize=(9, 5.5), dpi=110)
    for j, label in enumerate(fleets):
        obj = results["fleets"][label]["objectives"]
        t = [obj[o]["round_time_s"] or 0 for o in OBJECTIVES]
        e = [obj[o]["energy_j"] / 1000 for o in OBJECTIVES]
        r = [obj[o]["round_energy_j"] / 1000 for o in OBJECTIVES]
        x = list(range(len(OBJECTIVES)))
        axes[0][j].bar(x, t, color="#4878a8")
        axes[0][j].set_title(label, fontsize=10)
        axes[0][j].set_ylabel("round time (s)")
        axes[1][j].bar([k - 0.2 for k in x], e, width=0.4, color="#a86448", label="training")
        axes[1][j].bar([k + 0.2 for k in x], r, width=0.4, color="#d8a070", label="round")
        axes[1][j].set_ylabel("energy (kJ)")
        axes[1][j].legend(fontsize=7, loc="lower right")
        for ax in axes[:, j]:
            ax.set_xticks(x)
            ax.set_xticklabels(OBJECTIVES)
        for k, v in enumerate(t):
            axes[0][j].annotate(f"{v:,.0f}", (k, v), ha="center", va="bottom", fontsize=8)
        for dx, vals in ((-0.2, e), (0.2, r)):
            for k, v in enumerate(vals):
                axes[1][j].annotate(f"{v:,.0f}", (k + dx, v), ha="center", va="bottom", fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(str(path), lambda fh: fh.write(buf.getvalue()))


def markdown(results: dict, command: str) -> str:
    lines = [
        "# Fleet objectives: time, energy and deadline",
        "",
        f"Generated by `{command}` on the direct engine (one round, `local` mode, in "
        "segments of 600 device seconds, as every engine runs a round: "
        "`fleet/planning/round_logic.py`). Profiles "
        "and convergence traces are the MODELED references under `simulations/` (rerun after "
        "they are refitted). Round time = slowest device that trained; fleet energy = sum of "
        "training energy (profiled mean power x time; waiting is not charged); round energy = "
        "fleet energy + every device's idle power x its wait until the round ends (a device "
        "that could not train waits the whole round; `fleet/planning/roundenergy.py`). Idle "
        "power is the profile's `idle_power_w` column: here the device model's idle power "
        "(Nano 1.25 W, TX2 NX 1.45 W), on a board what `powerfleet profile` measures before "
        "its sweep.",
        "",
        "**Objectives.** `time`: each device its fastest feasible point (Algorithm 1). "
        "`energy`: each device its least-energy feasible point. `deadline`: each device the "
        "least-energy feasible point whose *predicted* finish meets the round deadline (else "
        "its fastest point, status `late`); the deadline is the slowest device's fastest "
        "predicted finish (`fleet.planning.deadline_plan.plan_deadline`) unless "
        "`[run] deadline_s` sets it, re-planned after every segment when the slowest device "
        "fell behind (`fleet/planning/replan.py`; the Deadline column is the last one). Under "
        "a budget schedule the device re-selects at every "
        'step against the remaining deadline, costing each candidate as "this point until the '
        'step ends, then the fastest point under every later budget" (see '
        "`fleet/core/deadline.py`). Predictions use the "
        "shipped proxy efficiency, actual times the device's own trace, so the deadline "
        "(predicted) can differ from the round time (actual).",
        "",
        "Rerun: `python benchmarks/fleet_objectives.py`; a sweep of any fleet: `powerfleet "
        "whatif --fleet simulations/fleets/large.toml --budgets 3:12.5:0.5 --objective deadline "
        "--plot front.png`; speed: `python benchmarks/whatif.py`.",
        "",
        "The *predicted* columns are the same round with every device's trace replaced by the "
        "shipped efficiency (what the devices optimise); the others use each device's own "
        "trace. A gap between them is the shipped proxy's error, not the objective's.",
        "",
        "| Fleet | Objective | Deadline s | Round time s | Fleet energy kJ | vs time | "
        "Round energy kJ | vs time | Predicted round s | Predicted kJ | Predicted vs time | "
        "Trained | Late | Infeasible |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, f in results["fleets"].items():
        ref = f["objectives"]["time"]["energy_j"]
        rref = f["objectives"]["time"]["round_energy_j"]
        pref = f["predicted"]["time"]["energy_j"]
        for o in OBJECTIVES:
            r, p = f["objectives"][o], f["predicted"][o]
            dl = "—" if r["deadline_s"] is None else f"{r['deadline_s']:,.0f}"
            re = r["round_energy_j"]
            lines.append(
                f"| {label} | {o} | {dl} | {r['round_time_s']:,.0f} | {r['energy_j'] / 1000:,.1f}"
                f" | {100 * (r['energy_j'] - ref) / ref:+.1f} % | {re / 1000:,.1f} | "
                f"{100 * (re - rref) / rref:+.1f} % | {p['round_time_s']:,.0f} | "
                f"{p['energy_j'] / 1000:,.1f} | {100 * (p['energy_j'] - pref) / pref:+.1f} % | "
                f"{r['trained']} | {r['late']} | {r['infeasible']} |"
            )
    f = results["fleets"]["default (8 devices)"]
    t, d = f["objectives"]["time"], f["objectives"]["deadline"]
    saved = f["deadline_vs_time"]["energy_saved_pct"]
    rsaved = f["deadline_vs_time"]["round_energy_saved_pct"]
    pt, pd = f["predicted"]["time"]["energy_j"], f["predicted"]["deadline"]["energy_j"]
    psaved = 100.0 * (pt - pd) / pt
    kept = d["round_time_s"] <= t["round_time_s"] + 1e-6
    lines += [
        "",
        "![round time and energy per objective](objectives.png)",
        "",
        "## Goal check (default fleet)",
        "",
        f"- round time kept: {'yes' if kept else 'NO'} ({d['round_time_s']:,.0f} s vs "
        f"{t['round_time_s']:,.0f} s)",
        f"- fleet energy saved by the deadline objective: {saved:.1f} % (goal: >= 10 %: "
        f"{'met' if saved >= 10 else 'NOT met'}); as predicted with the shipped efficiency: "
        f"{psaved:.1f} %",
        f"- round energy (training + idle waiting) saved by the deadline objective: "
        f"{rsaved:.1f} % ({t['round_energy_j'] / 1000:,.1f} kJ -> "
        f"{d['round_energy_j'] / 1000:,.1f} kJ; goal: >= 10 %: "
        f"{'met' if rsaved >= 10 else 'NOT met'}; devices without idle power: "
        f"{d['idle_unknown']})",
        f"- the energy objective (each device's least-energy feasible point, deadline ignored) "
        f"is predicted to spend {f['predicted']['energy']['energy_j'] / 1000:,.1f} kJ: no "
        "deadline choice is predicted to spend less, so this is the ceiling on what the "
        "deadline objective can save on these profiles (it keeps the predicted round time, the "
        "energy objective does not).",
    ]
    k = f["known_traces"]
    at, kt, kd = k["at_time_round"], k["time"], k["deadline"]

    def less(a: dict, b: dict, key: str) -> float:
        return 100 * (a[key] - b[key]) / a[key]

    lines += [
        "- if every device knew its own trace (no method does; each device's trace shipped as "
        "its efficiency): the deadline objective at the time objective's actual round time "
        f"would spend {at['energy_j'] / 1000:,.1f} kJ of training "
        f"({less(t, at, 'energy_j'):.1f} % less than the time "
        f"objective's {t['energy_j'] / 1000:,.1f} kJ) and {at['round_energy_j'] / 1000:,.1f} kJ "
        f"over the round ({less(t, at, 'round_energy_j'):.1f}"
        " % less); a round planned on the traces takes "
        f"{kt['round_time_s']:,.0f} s under the time objective, where the deadline objective "
        f"saves {less(kt, kd, 'energy_j'):.1f} % of training "
        f"energy and {less(kt, kd, 'round_energy_j'):.1f}"
        " % of round energy. The gap to the lines above is the shipped proxy's error "
        "(here it rates b=4 far better than the devices' traces do).",
        "",
        "## Per device, default fleet: deadline objective vs time objective",
        "",
        "Training energy only in the first *Saved %*; *with waiting* adds each device's idle "
        "power until the round ends under each objective.",
        "",
        "| Device | Status | Time s (time) | Time s (deadline) | Slow-down | Energy kJ (time) | "
        "Energy kJ (deadline) | Saved % | Round kJ (time) | Round kJ (deadline) | "
        "Saved % with waiting |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in f["deadline_vs_time"]["devices"]:
        lines.append(
            f"| {r['device']} | {r['status']} | {r['time_objective_s']:,.0f} | "
            f"{r['deadline_objective_s']:,.0f} | {r['slowdown']:.2f}× | "
            f"{r['time_objective_j'] / 1000:,.1f} | {r['deadline_objective_j'] / 1000:,.1f} | "
            f"{r['saved_pct']:.1f} | {_kj(r['time_objective_round_j'])} | "
            f"{_kj(r['deadline_objective_round_j'])} | {_pct(r['round_saved_pct'])} |"
        )
    lines += [
        "",
        "## Budget sweep, default fleet (every device on the same budget)",
        "",
        "![time-energy front](front_default.png)",
        "",
        "Each cell: round time s / fleet (training) energy kJ / round energy kJ.",
        "",
        "| Budget W | " + " | ".join(f"{o}: s / kJ / round kJ" for o in OBJECTIVES) + " |",
        "|---" * (1 + len(OBJECTIVES)) + "|",
    ]
    for k, v in enumerate(SWEEP):
        cells = []
        for o in OBJECTIVES:
            s = results["sweep"][o][k]
            rt = "—" if s["round_time_s"] is None else f"{s['round_time_s']:,.0f}"
            cells.append(f"{rt} / {s['energy_j'] / 1000:,.1f} / {s['round_energy_j'] / 1000:,.1f}")
        lines.append(f"| {v:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _kj(v: float | None) -> str:
    return "—" if v is None else f"{v / 1000:,.1f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "fleet-objectives"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run(out)
    atomic_write_text(str(out / "results.json"), json.dumps(results, indent=1) + "\n")
    md = markdown(results, "python benchmarks/fleet_objectives.py")
    atomic_write_text(str(out / "README.md"), md)
    print(md)


if __name__ == "__main__":
    main()
