"""`powerfleet compare`: the baselines, ours and the oracle side by side across budgets.

The methods and the speed-up columns come from the registries (``fleet.core.baselines``,
``fleet.core.objectives``), so a new baseline shows up here without touching this module.
"""

from __future__ import annotations

import argparse
from typing import Any

from fleet.cli.common import (
    budget_label,
    console,
    emit_json,
    mhz,
    note,
    parse_budgets,
    parse_caps,
    table,
)
from fleet.common.errors import InputError
from fleet.core.baselines import BASELINES, speedup_column
from fleet.core.choice import align
from fleet.core.compare import compare
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare B1, B2, ours and the oracle across budgets")
    p.add_argument("--profile", required=True, help="profile CSV of the device")
    p.add_argument("--efficiency", required=True, help="proxy efficiency CSV (what ours uses)")
    p.add_argument("--truth", help="the target's true efficiency CSV (the oracle; costs all)")
    p.add_argument("--budgets", default="4.5,7,none", help="comma list of watts or 'none'")
    p.add_argument(
        "--caps",
        help="baseline frequency caps per budget, e.g. 4.5=307.2,7=614.4,none=921.6 "
        "(default: the highest clock safe for every profiled point)",
    )
    p.add_argument(
        "--cap-profile",
        action="append",
        default=[],
        help="more profiles (other models) the safe cap must cover; repeatable",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    profile, proxy, msg = align(load_profile(args.profile), load_efficiency(args.efficiency))
    if msg:
        note("compare", msg)
    truth = load_efficiency(args.truth) if args.truth else None
    cap_profiles = [profile] + [load_profile(p) for p in args.cap_profile]
    for extra in cap_profiles[1:]:  # a cap safe for a model is one its powers were read for
        if not extra.has_power:
            raise InputError(f"--cap-profile: {extra.source} has no power column (time-only)")
    budgets = parse_budgets(args.budgets)
    caps = parse_caps(args.caps)
    stray = [b for b in caps if b not in budgets]
    if stray:
        raise InputError(
            f"--caps: {', '.join(budget_label(b) for b in stray)} is not among --budgets "
            f"({', '.join(budget_label(b) for b in budgets)}); a cap belongs to a budget compared"
        )
    # plain data for JSON and the table (compare's rows: each key holds its column's type)
    rows: list[dict[str, Any]] = compare(profile, proxy, budgets, truth, caps, cap_profiles)
    if args.json:
        emit_json(
            {
                "profile": args.profile,
                "efficiency": args.efficiency,
                "truth": args.truth,
                "rows": rows,
            }
        )
        return 0
    cols = [
        "budget",
        "method",
        "batch",
        "freq MHz",
        "peak W",
        "time s",
        "energy J",
        *(f"x vs {n.upper()}" for n in BASELINES),
        "+% vs oracle",
        "status",
    ]
    body = [
        [
            budget_label(r["budget_w"]),
            r["method"],
            r["batch_size"],
            mhz(r["freq_mhz"]),
            r["peak_power_w"],
            r["predicted_time_s"],
            r["predicted_energy_j"],
            *(r[speedup_column(n)] for n in BASELINES),
            r["gap_to_oracle_pct"],
            r["status"].split(":")[0],
        ]
        for r in rows
    ]
    src = f"truth: {args.truth}" if args.truth else "truth = proxy (no --truth)"
    console.print(table(f"Comparison on {args.profile} ({src})", cols, body))
    for r in rows:
        if r["status"] not in ("ok",):
            note("compare", f"{budget_label(r['budget_w'])} {r['method']}: {r['status']}")
    return 0
