"""`powerfleet select`: the choice one device makes under its budget (docs/architecture.md)."""

from __future__ import annotations

import argparse

from fleet.cli.common import budget_label, console, emit_json, mhz, note, table
from fleet.common.errors import InputError
from fleet.core.choice import align
from fleet.core.efficiency import load_efficiency
from fleet.core.objectives import OBJECTIVES
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.method.budget import parse_budget
from fleet.method.deadline import check_deadline_s
from fleet.trust.coverage import check_coverage, read_coverage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "select",
        help="pick the batch size and GPU frequency that reach the target soonest under a budget",
    )
    p.add_argument("--profile", required=True, help="profile CSV of the device (the LUT)")
    p.add_argument("--efficiency", required=True, help="efficiency CSV (samples-to-accuracy)")
    p.add_argument(
        "--budget-w", required=True, type=str, help="power budget in watts (7, 4.5 W), or 'none'"
    )
    p.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default="time",
        help="what to minimise: round time, energy, or energy within --deadline-s",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="the round deadline in seconds (needed by --objective deadline)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    budget = parse_budget(args.budget_w, "--budget-w")
    profile, eff, msg = align(load_profile(args.profile), load_efficiency(args.efficiency))
    context = objective_context(args)
    choice = select(profile, eff, budget, args.objective, "ours", **context)
    late = "deadline_s" in context and choice.predicted_time_s > context["deadline_s"] * (1 + 1e-9)
    coverage = read_coverage(args.profile)
    check_coverage(profile, coverage, eff, budget, choice)  # unmeasured but maybe better: exit 2
    if msg:  # said only on success: a failure's stderr is its one line
        note("select", msg)
    longer = coverage.longer_run_over(choice.batch_size, choice.freq_mhz, budget)
    if longer is not None:
        note(
            "select",
            f"batch {choice.batch_size} at freq_mhz {mhz(choice.freq_mhz)}: its peak over a "
            f"10x longer run is expected at {longer:.1f} W (the profile's peak_forecast_w), "
            f"above the {budget_label(budget)} budget; a long run may spend time over it (its "
            "report says how long)",
        )
    if args.json:
        out = choice.to_dict()
        out["budget_w"] = budget
        out["profile"] = args.profile
        out["efficiency"] = args.efficiency
        out["predicted"] = coverage.is_predicted(choice.batch_size, choice.freq_mhz)
        # null where the profile does not record it (not measured with a power sampler)
        out["peak_forecast_w"] = coverage.forecast.get((choice.batch_size, choice.freq_mhz))
        if "deadline_s" in context:
            out["deadline_s"], out["late"] = context["deadline_s"], late
        emit_json(out)
        return 0
    title = f"Selection under {budget_label(budget)} (objective: {args.objective})"
    if "deadline_s" in context:
        title += f", deadline {context['deadline_s']:g} s" + (": late, the fastest" if late else "")
    console.print(
        table(
            title,
            ["batch", "freq MHz", "peak W", "mean W", "samples", "pred. time s", "pred. energy J"],
            [
                [
                    choice.batch_size,
                    mhz(choice.freq_mhz),
                    choice.peak_power_w,
                    choice.mean_power_w,
                    choice.samples_to_accuracy,
                    choice.predicted_time_s,
                    choice.predicted_energy_j,
                ]
            ],
        )
    )
    return 0


def objective_context(args: argparse.Namespace) -> dict[str, float]:
    """The keywords the objective needs (``Objective.context``) from their flags, checked."""
    wanted = OBJECTIVES[args.objective].context
    if "deadline_s" not in wanted:
        if args.deadline_s is not None:  # a flag that would change nothing is refused, not lost
            raise InputError(f"--deadline-s is for --objective deadline, not {args.objective}")
        return {}
    if args.deadline_s is None:
        raise InputError(f"--objective {args.objective} needs --deadline-s SECONDS")
    return {"deadline_s": check_deadline_s(args.deadline_s, "--deadline-s")}
