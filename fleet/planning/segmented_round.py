"""The direct engine's segmented round: every device a segment at a time, the deadline re-planned.

Why: a round that lasts hours is run in segments by the coordinator (``strategies/segmented.py``
over Flower); between segments it re-prices every device's fastest finish from its progress
(``fleet.planning.replan``) and moves the deadline when the slowest fell behind. What-if studies
and benchmarks need the same behaviour without starting Flower, for thousands of devices: this
loop runs each device *kind* (``whatif._kind``: same type, budget, profile, trace) through
``simulate_segment`` in lockstep on the device clock, re-plans with the same functions after
every segment, and sends each device the deadline as the coordinator would (scaled by its
inflation when it prices its work with the shipped efficiency, as is when it learns its own).

The result is the rows of the one-shot round (chaining segments gives the one-shot row when the
deadline never moves: ``tests/test_virtual_clock_segments.py``) plus the plan: the deadline and
every revision with its reason and the device-clock time it was made at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.planning import replan
from fleet.rounds.progress import Progress
from fleet.rounds.virtual_clock import simulate_segment

MAX_SEGMENTS = 100_000  # a guard: a round that never ends is a bug, not a long round


@dataclass
class Plan:
    """The round's deadline and its history (as ``state.json``'s ``plan``)."""

    deadline_s: float | None
    revisions: list[dict[str, object]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"deadline_s": self.deadline_s, "revisions": [dict(r) for r in self.revisions]}


def run_segmented(
    kinds: dict[tuple, DeviceSpec],
    ship: Callable[[DeviceSpec], Efficiency],
    run_for: Callable[[float | None], RunSettings],
    deadline_s: float | None,
    fastest: dict[tuple, float | None],
    segment_s: float,
    replanning: bool,
) -> tuple[dict[tuple, dict[str, object]], Plan]:
    """Every kind's final row (its first device's name) and the plan, segment by segment."""
    plan = Plan(deadline_s)
    if deadline_s is not None:
        plan.revisions.append(
            {"round_time_s": 0.0, "deadline_s": deadline_s, "previous_s": None,
             "reason": "planned: the slowest device's fastest predicted finish"}
        )  # fmt: skip
    state: dict[tuple, Progress | None] = {k: None for k in kinds}
    rows: dict[tuple, dict[str, object]] = {}
    shipped_n = {k: dict(ship(spec).reached) for k, spec in kinds.items()}
    for _ in range(MAX_SEGMENTS):
        active = [k for k in kinds if k not in rows]
        if not active:
            break
        for key in active:
            prog = state[key]
            deadline = replan.deadline_for(plan.deadline_s, prog, shipped_n[key])
            res, state[key] = simulate_segment(
                kinds[key], ship(kinds[key]), run_for(deadline), prog, segment_s
            )
            if res.status != "running":
                rows[key] = res.to_dict()
        if replanning and plan.deadline_s is not None:
            _replan(plan, kinds, state, rows, fastest, shipped_n)
    else:  # pragma: no cover - a guard
        raise RuntimeError(f"segmented round: more than {MAX_SEGMENTS} segments")
    return rows, plan


def _replan(
    plan: Plan,
    kinds: dict[tuple, DeviceSpec],
    state: dict[tuple, Progress | None],
    rows: dict[tuple, dict[str, object]],
    fastest: dict[tuple, float | None],
    shipped: dict[tuple, dict[int, float]],
) -> None:
    standings = [
        replan.standing(kinds[key].name, prog, fastest.get(key), shipped[key])
        for key, prog in state.items()
        if key not in rows and prog is not None
    ]
    new, why = replan.revise(plan.deadline_s, standings)
    if not why:
        return
    clock = max((s.time_s for s in standings), default=0.0)
    plan.revisions.append(
        {"round_time_s": clock, "deadline_s": new, "previous_s": plan.deadline_s, "reason": why}
    )
    plan.deadline_s = new


def expand(
    specs: Sequence[DeviceSpec], key_of: Callable[[DeviceSpec], tuple], rows: dict[tuple, dict]
) -> list[dict[str, object]]:
    """Every device's row from its kind's (a copy under its own name)."""
    out = []
    for spec in specs:
        row = rows[key_of(spec)]
        if row["device"] != spec.name:
            first = str(row["device"])
            row = {**row, "device": spec.name}
            row["message"] = str(row.get("message") or "").replace(first, spec.name)
        out.append(row)
    return out


def finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
