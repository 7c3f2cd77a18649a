"""What `powerfleet train` says when it is done: the run's JSON (the DESIGN's `train --json`
contract) and the table a person reads. Apart from the command (``cmd_train.py``) because the
command owns the run and this owns its account: one meaning per name, as in the round's row.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleet.cli.common import console, mhz, table


def train_report(result: Any, summary: dict[str, Any], args: argparse.Namespace, ckpt: str | None):
    from fleet.agent.loop.segments import OBJECTIVE_KEYS

    started = (s for s in summary["segments"] if s.get("batch_size") is not None)
    start: dict[str, Any] = next(started, {})
    out = {
        "status": summary["status"],
        "samples": result.samples,
        "samples_to_accuracy": result.samples_to_accuracy,
        "accuracy": result.final_accuracy,
        "target_accuracy": result.target_accuracy,
        "time_s": summary["time_s"],
        "train_time_s": result.train_time_s,
        "eval_time_s": result.eval_time_s,
        "energy_j": summary["energy_j"],
        "counter_energy_j": summary.get("counter_energy_j"),  # NVML's hardware counter, beside
        "peak_power_w": summary["peak_power_w"],
        "power_samples": summary["power_samples"],
        # False on a board without a power sensor: the budget was met from the profile alone
        "power_measured": summary["power_measured"],
        "over_budget_samples": summary["over_budget_samples"],
        # the budget bounds the power averaged over this window (fleet/method/power_window.py);
        # the time and the energy above it (any: status over-budget)
        "power_window_s": summary["power_window_s"],
        "over_budget_s": summary["over_budget_s"],
        "over_budget_j": summary["over_budget_j"],
        "over_budget_excursions": summary["over_budget_excursions"],
        "longest_over_budget_s": summary["longest_over_budget_s"],
        "segments": summary["segments"],
        "guard_events": summary["guard_events"],
        "drift_events": summary["drift_events"],
        "refreshes": summary["refreshes"],
        "refreshed_profile": summary["refreshed_profile"],
        # one meaning per name, as in the round's row: the point chosen at the start, and the
        # point running at the end (``segments`` has every one in between)
        "batch_size": start.get("batch_size"),
        "freq_mhz": start.get("freq_mhz"),
        "end_batch_size": summary["batch_size"] or None,
        "end_freq_mhz": summary["freq_mhz"] or None,
        **{k: summary[k] for k in OBJECTIVE_KEYS},
        "budget": summary["budget_source"],
        "stop_reason": summary["stop_reason"],
        # what the run learnt of its samples-to-target: belief, fits, evidence (None: --learn
        # none)
        "learning": summary["learning"],
        "notes": summary["notes"],
        "backend": args.backend,
        "model": args.model,
        "checkpoint": ckpt,
        "out": args.out,
    }
    return out


def forecast_notes(segments: list[dict[str, Any]], coverage: Any) -> list[str]:
    """One line per point that ran under a budget its profile's ``peak_forecast_w`` lies above.

    Why: ``select`` says so before a run (``fleet.trust.coverage.Coverage.longer_run_over``);
    ``train`` chooses inside its closed loop, so it says so of the points that actually ran,
    beside the run's own count of the time it spent above the budget."""
    said: list[str] = []
    seen: set[tuple[int, float, float]] = set()
    for seg in segments:
        b, f, budget = seg.get("batch_size"), seg.get("freq_mhz"), seg.get("budget_w")
        if b is None or f is None or budget is None or (b, f, budget) in seen:
            continue
        seen.add((b, f, budget))
        longer = coverage.longer_run_over(b, f, budget)
        if longer is not None:
            said.append(
                f"batch {b} at freq_mhz {mhz(f)} ran under the {budget:g} W budget; its peak over "
                f"a 10x longer run was expected at {longer:.1f} W (the profile's "
                "peak_forecast_w): over_budget_s says how long this run spent above it"
            )
    return said


def _fmt_w(w: Any) -> str:
    return "none" if w is None else f"{w:g}"


def print_human(out: dict[str, Any]) -> None:
    console.print(
        table(
            f"Segments ({out['budget']}, objective {out['objective']})",
            ["from s", "to s", "batch", "freq MHz", "budget W", "energy J", "reason"],
            [
                [
                    f"{s['start_s']:.1f}",
                    f"{s['end_s']:.1f}",
                    s["batch_size"],
                    f"{s['freq_mhz']:g}",
                    _fmt_w(s["budget_w"]),
                    "-" if s["energy_j"] is None else f"{s['energy_j']:.1f}",
                    s["reason"],
                ]
                for s in out["segments"]
            ],
        )  # fmt: skip
    )
    if out["guard_events"]:
        console.print(
            table(
                "Guard events",
                ["t s", "from MHz", "to MHz", "measured W", "budget W"],
                [
                    [
                        f"{e['t_s']:.2f}",
                        f"{e['from_mhz']:g}",
                        "stop" if e["to_mhz"] is None else f"{e['to_mhz']:g}",
                        f"{e['measured_w']:.2f}",
                        _fmt_w(e["budget_w"]),
                    ]
                    for e in out["guard_events"]
                ],
            )  # fmt: skip
        )
    energy = "n/a" if out["energy_j"] is None else f"{out['energy_j']:.1f} J"
    peak = "n/a" if out["peak_power_w"] is None else f"{out['peak_power_w']:.2f} W"
    window = out.get("power_window_s")
    if window and out["peak_power_w"] is not None:
        peak += f" ({window:g} s mean)"
    console.print(
        f"status {out['status']}: {out['samples']} samples, accuracy {out['accuracy']:.4f}, "
        f"{out['time_s']:.1f} s, {energy}, peak {peak}"
    )
    if out.get("over_budget_s"):
        console.print(
            f"over the budget for {out['over_budget_s']:.3g} s, {out['over_budget_j'] or 0:.3g} J"
            f" above it, in {out['over_budget_excursions']} excursion(s)"
        )
    if not out["power_measured"]:
        console.print(
            "power was not measured on this board: the budget was met from the recorded "
            "profile alone, with no runtime guard"
        )
    if out["deadline_s"] is not None:
        verdict = "late (no point could meet it)" if out["late"] else "planned on time"
        if out["behind_at_s"] is not None:
            verdict += f"; fell behind at {out['behind_at_s']:.1f} s"
        finish = out["predicted_finish_s"]
        console.print(
            f"deadline {out['deadline_s']:g} s: predicted finish "
            f"{'n/a' if finish is None else f'{finish:.1f} s'}, {verdict}"
        )
    ev = (out.get("learning") or {}).get("evidence")
    if ev:
        fits = len((out.get("learning") or {}).get("fits") or [])
        how = "reached there" if ev["reached"] else "from its learning curve"
        console.print(
            f"learnt: b={ev['batch_size']} needs {ev['samples_to_target']:,.0f} samples to the "
            f"target ({how}, sd of log {ev['log_sd']:.2f}; {fits} fit(s))"
        )
    if out.get("source") == "virtual":
        console.print(
            f"source virtual: a virtual board ({out.get('virtual_board')}) on host "
            f"{out.get('host')}; times are the host's, not the board's"
        )
    if out["stop_reason"]:
        print(f"powerfleet train: {out['stop_reason']}", file=sys.stderr)
