"""`powerfleet whatif`: sweep the fleet's power budget on the direct engine
(fleet.planning.whatif)."""

from __future__ import annotations

import argparse
import dataclasses

from fleet.cli import checks
from fleet.cli.common import console, emit_json, note, table
from fleet.config.fleetfile import load_fleet
from fleet.core.objectives import OBJECTIVES
from fleet.planning.whatif import pareto_front, parse_range, sweep
from fleet.rounds.preflight import check_devices


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "whatif",
        help="sweep the power budget of a fleet: round time, energy and infeasible devices",
    )
    p.add_argument("--fleet", required=True, help="fleet TOML")
    p.add_argument(
        "--budgets",
        required=True,
        help="START:STOP:STEP (inclusive) or a comma list: watts, or scale factors with --scale",
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="multiply each device's own budget (and schedule) instead of one budget for all",
    )
    p.add_argument("--objective", choices=OBJECTIVES, default=None, help="default: the fleet's")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--plot", type=checks.output_file("PNG"), help="write the time-energy front to this PNG"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.fleet)
    values = parse_range(args.budgets, args.scale)
    warnings = check_devices(fleet)  # a device that cannot run stops the sweep here
    for line in warnings:
        note("whatif", "warning: " + line)
    steps = sweep(fleet, values, args.scale, args.objective)
    front = pareto_front(steps)
    if args.plot:
        from fleet.reports.whatif_plot import plot_front

        title = f"{fleet.run.name}: budget sweep, objective {steps[0].objective}"
        plot_front(steps, front, args.plot, title, args.scale)
    if args.json:
        emit_json(
            {
                "fleet": fleet.path,
                "devices": len(fleet.devices),
                "objective": steps[0].objective,
                "scale": args.scale,
                "steps": [dataclasses.asdict(s) for s in steps],
                "front": [s.value for s in front],
                "plot": args.plot,
                "warnings": warnings,
            }
        )
        return 0
    unit = "× budget" if args.scale else "budget W"
    unknown = max(s.idle_unknown for s in steps)
    on_front = {s.value for s in front}
    console.print(
        table(
            f"What-if: {fleet.run.name} ({len(fleet.devices)} devices, objective "
            f"{steps[0].objective})",
            [
                unit,
                "round s",
                "fleet energy kJ",
                "round energy kJ",
                "trained",
                "late",
                "infeasible",
                "deadline s",
                "front",
            ],  # fmt: skip
            [
                [
                    s.value,
                    s.round_time_s,
                    s.energy_j / 1000,
                    s.round_energy_j / 1000,
                    s.trained,
                    s.late,
                    s.infeasible,
                    s.deadline_s,
                    "*" if s.value in on_front else "",
                ]
                for s in steps
            ],
        )
    )
    console.print(
        "fleet energy: training only; round energy: training plus every device's idle power "
        "while it waits for the round to end"
        + (f" ({unknown} devices without idle power not charged)" if unknown else ""),
        highlight=False,
    )
    if args.plot:
        console.print(f"front plot: {args.plot}")
    return 0
