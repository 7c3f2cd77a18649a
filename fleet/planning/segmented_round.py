"""The direct engine's round: every device kind a segment at a time, in this process.

Why: what-if studies and 1,000-device fleets need the round the coordinator runs
(``strategies/segmented.py`` over Flower) without Flower. This is only its driver: each step it
asks the round's logic (``fleet.planning.round_logic``) which devices train next and with which
deadline, runs their segment on the virtual clock (``simulate_segment``), folds the reply into
the book and re-plans, exactly as the Flower message loop does with messages. A fleet of many
identical devices is run once per *kind* (``whatif._kind``: same type, budget, profile, trace)
under its first device's name, and the rows are copied to the others (``expand``).

The result is every kind's final row (the round's joined stretches, its first point) plus the
plan: the deadline and every revision with its reason and the device-clock time it was made at.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.planning import round_logic as logic
from fleet.rounds.virtual_clock import simulate_segment

MAX_SEGMENTS = 100_000  # a guard: a round that never ends is a bug, not a long round


def run_segmented(
    kinds: dict[tuple, DeviceSpec],
    ship: Callable[[DeviceSpec], Efficiency],
    run_for: Callable[[float | None], RunSettings],
    plan: dict | None,
    segment_s: float,
) -> tuple[dict[tuple, dict[str, object]], dict | None]:
    """Every kind's final row (its first device's name) and the plan, segment by segment.

    ``plan``: ``round_logic.new_plan`` keyed by the kinds' first names when the round re-plans
    its deadline (None: no deadline, or the run's own, which ``run_for`` already carries)."""
    specs = {spec.name: spec for spec in kinds.values()}
    shipped_n = {name: dict(ship(spec).reached) for name, spec in specs.items()}
    devices = {name: logic.device_entry(name) for name in specs}
    for _ in range(MAX_SEGMENTS):
        names = logic.due(devices)
        if not names:
            break
        if plan is not None:
            logic.replan(plan, devices, shipped_n.__getitem__)
        for name in names:
            prog = logic.progress(devices[name])
            deadline = logic.deadline_for(plan, name, prog, shipped_n.__getitem__)
            spec = specs[name]
            res, prog = simulate_segment(spec, ship(spec), run_for(deadline), prog, segment_s)
            logic.apply_segment(devices[name], res.to_dict(), prog)
    else:  # pragma: no cover - a guard
        raise RuntimeError(f"segmented round: more than {MAX_SEGMENTS} segments")
    if plan is not None:
        logic.settle(devices.values(), plan)
    return {key: devices[spec.name]["row"] for key, spec in kinds.items()}, plan


def expand(
    specs: Sequence[DeviceSpec], key_of: Callable[[DeviceSpec], tuple], rows: dict[tuple, dict]
) -> list[dict[str, object]]:
    """Every device's row from its kind's (a copy under its own name)."""
    return [renamed(rows[key_of(spec)], spec.name) for spec in specs]


def renamed(row: dict[str, object], name: str) -> dict[str, object]:
    """A kind's row under the name of another device of that kind: the name is all that
    differs, in ``device`` and wherever ``message`` says "device NAME" (a copy; the row itself
    when the name is its own). Only that phrase: a bare replace of the name turned device "a"'s
    "the run trains 'small_cnn'" into device "b"'s "the run trbins 'smbll_cnn'". The Flower
    engine's replay ClientApp copies its kinds' rows the same way
    (``clients.segments.kind_segment``)."""
    first = str(row["device"])
    if first == name:
        return row
    out = {**row, "device": name}
    said = re.compile(r"\bdevice " + re.escape(first) + r"(?![\w.-])")
    out["message"] = said.sub(lambda _m: f"device {name}", str(row.get("message") or ""))
    return out
