"""`powerfleet inspect P.csv`: validate a profile and summarise it (grid, power, frontiers)."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import Any

from fleet.cli.common import budget_label, console, emit_json, mhz, parse_budgets, table
from fleet.core.profile import Profile, frontier, load_profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="validate a profile CSV and summarise it")
    p.add_argument("profile", metavar="PROFILE", help="profile CSV")
    p.add_argument("--budgets", default="4.5,5,7,none", help="budgets for the frontier table")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def summarise(profile: Profile, budgets: list[float | None]) -> dict[str, Any]:
    """Everything inspect reports, as plain data (the JSON output and the tables use it)."""
    powered = [p.peak_power_w for p in profile.points if not math.isnan(p.peak_power_w)]
    fronts = {}
    for b in budgets:
        fr = frontier(profile, b) if (powered or b is None) else {}
        fronts[budget_label(b)] = [
            {
                "batch_size": p.batch_size,
                "freq_mhz": p.freq_mhz,
                "time_per_batch_s": p.time_per_batch_s,
                "time_per_sample_s": p.time_per_sample_s,
                "peak_power_w": p.peak_power_w,
            }
            for p in fr.values()
        ]
    low = profile.lowest_peak() if powered else None
    return {
        "profile": profile.source,
        "metadata": profile.metadata,  # the file's cells, as text
        "idle_power_w": profile.idle_power_w,  # the one of them that is a number, as one
        "points": len(profile.points),
        "batch_sizes": profile.batch_sizes,
        "freqs_mhz": profile.freqs_mhz,
        "missing_points": len(profile.batch_sizes) * len(profile.freqs_mhz) - len(profile.points),
        "failed_points": [
            {"batch_size": b, "freq_mhz": f, "status": s} for b, f, s in profile.failed
        ],
        "time_only": not powered,
        "peak_power_w": {"min": min(powered), "max": max(powered)} if powered else None,
        "lowest_peak": None
        if low is None
        else {
            "batch_size": low.batch_size,
            "freq_mhz": low.freq_mhz,
            "peak_power_w": low.peak_power_w,
        },
        "frontier": fronts,
    }


def run(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    budgets = parse_budgets(args.budgets)
    if not profile.has_power:
        budgets = [None]
    s = summarise(profile, budgets)
    if args.json:
        emit_json(s)
        return 0
    meta = ", ".join(f"{k}={v}" for k, v in profile.metadata.items()) or "no metadata"
    console.print(f"[bold]{profile.source}[/bold]: {meta}", highlight=False)
    console.print(
        f"{s['points']} points; batch sizes {s['batch_sizes']}; "
        f"{len(s['freqs_mhz'])} frequencies {s['freqs_mhz'][0]:g}..{s['freqs_mhz'][-1]:g} MHz; "
        f"{s['missing_points']} grid points not measured; "
        f"{len(s['failed_points'])} failed{_statuses(s['failed_points'])}",
        highlight=False,
    )
    if s["time_only"]:
        console.print("time-only profile: no power measured; usable only without a budget")
    else:
        lo = s["lowest_peak"]
        console.print(
            f"peak power {s['peak_power_w']['min']:.3g}..{s['peak_power_w']['max']:.3g} W "
            f"(lowest at batch {lo['batch_size']}, {lo['freq_mhz']:g} MHz)",
            highlight=False,
        )
    for label, pts in s["frontier"].items():
        console.print(
            table(
                f"Frontier under {label}: fastest feasible point per batch size",
                ["batch", "freq MHz", "time/batch s", "time/sample ms", "peak W"],
                [
                    [
                        p["batch_size"],
                        mhz(p["freq_mhz"]),
                        p["time_per_batch_s"],
                        p["time_per_sample_s"] * 1e3,
                        p["peak_power_w"],
                    ]
                    for p in pts
                ]
                or [["-", "-", "-", "-", "none fits"]],
            )
        )
    return 0


def _statuses(failed: list[dict[str, Any]]) -> str:
    """How many points each ``status`` marks as not run (a typo'd status is seen here)."""
    if not failed:
        return ""
    counts = Counter(str(p["status"]) for p in failed)
    return " (" + ", ".join(f"status={k}: {n}" for k, n in sorted(counts.items())) + ")"
