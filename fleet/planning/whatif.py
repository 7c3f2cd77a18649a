"""Fleet-level rounds on the direct engine: objectives side by side and budget what-ifs.

``simulate_fleet`` runs one round of every device of a fleet through the same device code the
engines use (``fleet.rounds.virtual_clock.simulate_device``, the one device round), after the
planning step the deadline objective needs (``fleet.planning.deadline_plan.plan_deadline`` over
every device's fastest predicted finish). A 1,000-device fleet is usually a handful of device
*kinds* (same type, budget or schedule, profile and trace, different names), so each kind is
simulated once per question and its row copied under every name: the rows are identical to
per-device simulation by construction, and a sweep of 20 budgets over 1,000 devices costs 20 x
(number of kinds) device rounds.

``sweep`` answers "what if every device had B watts" (or "B times its own budget") for a range
of budgets: fleet round time, energy, late and infeasible devices per step.
(docs/architecture.md, fleet objectives.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeGuard

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, Fleet, RunSettings
from fleet.core.choice import align
from fleet.core.deadline import RateTable, rates
from fleet.core.efficiency import Efficiency
from fleet.method.budget import BudgetStep, parse_budget
from fleet.method.deadline import check_deadline_s
from fleet.planning.deadline_plan import (
    fastest_finish_rates,
    plan_deadline,
    planning_efficiency,
)
from fleet.planning.round_logic import SEGMENT_S, new_plan
from fleet.planning.roundenergy import round_energy, round_totals
from fleet.planning.segmented_round import expand, run_segmented
from fleet.rounds.device_round import TRAINED
from fleet.rounds.virtual_clock import cached_efficiency, cached_profile, simulate_device

Progress = Callable[[int, int, str], None]  # (done, total, device name)


def _kind(spec: DeviceSpec, shipped: Efficiency | None = None) -> tuple:
    """Everything but the name: two devices of one kind make the same round (``shipped``: the
    efficiency this device was shipped, when devices get their own)."""
    own = None if shipped is None else tuple(sorted(shipped.reached.items()))
    return (
        spec.device_type, spec.budget_w, spec.profile, spec.data, spec.schedule, spec.learning,
        own,
    )  # fmt: skip


Shipped = dict[str, Efficiency]  # a device's own efficiency, by name (learnt by the fleet)


def run_deadline(fleet: Fleet) -> float | None:
    """``[run] deadline_s`` if the fleet file sets one (validated), else None (plan it)."""
    raw = fleet.run.deadline_s
    if raw is None:
        return None
    return check_deadline_s(raw, f"{fleet.path}: [run] deadline_s")


def fastest_finishes(
    specs: Sequence[DeviceSpec], shipped: Efficiency, own: Shipped | None = None
) -> list[float | None]:
    """What each device reports in the planning exchange: its fastest predicted finish (None
    when it cannot train or its files are unusable; such a device does not set the deadline).
    ``own``: devices shipped an efficiency of their own price their work with it."""
    memo: dict[tuple, float | None] = {}
    tables: dict[tuple, RateTable | None] = {}  # per profile file: aligned and costed once
    out = []
    for spec in specs:
        mine = (own or {}).get(spec.name)
        key = _kind(spec, mine)
        if key not in memo:
            tkey = (spec.profile, key[-1])
            if tkey not in tables:
                tables[tkey] = _table(spec.profile, mine or shipped)
            table = tables[tkey]
            steps = spec.schedule or (BudgetStep(0.0, spec.budget_w),)
            memo[key] = None if table is None else fastest_finish_rates(table, steps)
        out.append(memo[key])
    return out


def _table(profile_path: str, shipped: Efficiency) -> RateTable | None:
    try:
        profile, _ = cached_profile(profile_path)
        profile_a, shipped_a, _ = align(profile, shipped)
    except InputError:
        return None
    return rates(profile_a.points, planning_efficiency(shipped_a))


@dataclass
class FleetRound:
    """One round of the whole fleet under one objective (``plan``: the segmented round's
    deadline history, None for the one-shot round)."""

    objective: str
    deadline_s: float | None
    rows: list[dict[str, object]]
    totals: dict[str, object] = field(default_factory=dict)
    plan: dict[str, object] | None = None


def totals(rows: Sequence[dict[str, object]]) -> dict[str, object]:
    """Round time (slowest device that trained, late ones included), fleet energy (training
    only) and round energy (training plus every device's idle waiting,
    ``fleet.planning.roundenergy``), counts."""
    done = [r for r in rows if r.get("status") in TRAINED]
    times = [float(t) for t in (r.get("time_s") for r in done) if _finite(t)]
    energy = [float(e) for e in (r.get("energy_j") for r in done) if _finite(e)]
    rnd = round_totals(rows)
    return {
        "devices": len(rows),
        "trained": len(done),
        "late": sum(r.get("status") == "late" for r in rows),
        "infeasible": sum(r.get("status") == "infeasible" for r in rows),
        "not_trained": len(rows) - len(done),
        "round_time_s": max(times) if times else None,
        "energy_j": sum(energy),
        "idle_wait_j": rnd["idle_wait_j"],
        "round_energy_j": rnd["round_energy_j"],
        "idle_unknown": rnd["idle_unknown"],
    }


def _finite(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def run_for(run: RunSettings, objective: str, deadline_s: float | None) -> RunSettings:
    """The run settings a device gets: this objective, and the planned deadline (where the
    device round reads an objective's context, as from a train instruction)."""
    return replace(run, objective=objective, deadline_s=deadline_s)


def simulate_fleet(
    fleet: Fleet,
    objective: str | None = None,
    deadline_s: float | None = None,
    progress: Progress | None = None,
    segment_s: float | None = None,
    own: Shipped | None = None,
) -> FleetRound:
    """One round of every device on the virtual clock; rows as the round report holds them.

    Under the deadline objective the deadline is ``deadline_s``, else ``[run] deadline_s``,
    else planned from every device's fastest predicted finish. The round runs in segments of
    ``segment_s`` device seconds (None: ``round_logic.SEGMENT_S``, the coordinator's default)
    through the round logic every engine shares (``fleet.planning.segmented_round``): a planned
    deadline is re-planned from the devices' progress after every segment, and ``plan`` holds
    its history. ``segment_s`` 0 is the paper's one request per device: each device in one
    piece, the plan never revised. ``own``: the efficiency each device is shipped when it has
    its own (``fleet.trust.efficiency_store``: a later round of a fleet that learns), else the
    fleet's ``[run] efficiency``.
    """
    objective = objective or fleet.run.objective
    seconds = SEGMENT_S if segment_s is None else float(segment_s)
    shipped = cached_efficiency(fleet.run.efficiency)
    deadline = None
    planned = False
    if objective == "deadline":
        deadline = deadline_s if deadline_s is not None else run_deadline(fleet)
        planned = deadline is None
    key_of = lambda spec: _kind(spec, (own or {}).get(spec.name))  # noqa: E731
    ship = lambda spec: (own or {}).get(spec.name) or shipped  # noqa: E731
    kinds: dict[tuple, DeviceSpec] = {}
    for spec in fleet.devices:
        kinds.setdefault(key_of(spec), spec)
    plan = None
    if planned:
        got = fastest_finishes(list(kinds.values()), shipped, own)
        deadline = plan_deadline(got)
        fastest = {spec.name: f for spec, f in zip(kinds.values(), got, strict=True)}
        plan = new_plan(deadline, fastest) if seconds > 0 else None
    if seconds > 0:
        sent = lambda d: run_for(fleet.run, objective, deadline if d is None else d)  # noqa: E731
        by_kind, plan = run_segmented(kinds, ship, sent, plan, seconds)
        deadline = plan["deadline_s"] if plan is not None else deadline
    else:
        run = run_for(fleet.run, objective, deadline)
        by_kind = {
            key: simulate_device(spec, ship(spec), run).to_dict() for key, spec in kinds.items()
        }
    rows = expand(fleet.devices, key_of, by_kind)
    if progress:
        progress(len(rows), len(rows), "done")
    return FleetRound(objective, deadline, rows, totals(rows), plan)


# ------------------------------------------------------------------------------ deadline vs time


def deadline_vs_time(time_rows: Sequence[dict], deadline_rows: Sequence[dict]) -> dict:
    """The fleet report's comparison: the deadline objective beside the time objective.

    Per device (matched by name): time under each, the slow-down factor (deadline / time), the
    training energy saved (J and % of the time objective's) and the saving with each round's
    idle waiting included (``round_saved_j``: None where the idle power is unknown). Fleet:
    round time, training energy and round energy of both.
    """
    time_waits, deadline_waits = round_energy(time_rows)[0], round_energy(deadline_rows)[0]
    by_name = {r["device"]: (r, w) for r, w in zip(time_rows, time_waits, strict=True)}
    devices = []
    for d, d_wait in zip(deadline_rows, deadline_waits, strict=True):
        t, t_wait = by_name.get(d["device"], (None, None))
        if t is None or t_wait is None or t.get("status") not in TRAINED:
            continue
        if d.get("status") not in TRAINED:
            continue
        t_time, d_time = float(t["time_s"]), float(d["time_s"])
        t_e, d_e = float(t["energy_j"]), float(d["energy_j"])
        t_idle, d_idle = t_wait["idle_wait_j"], d_wait["idle_wait_j"]
        t_round = None if t_idle is None else t_e + t_idle
        d_round = None if d_idle is None else d_e + d_idle
        round_saved = None if t_round is None or d_round is None else t_round - d_round
        devices.append(
            {
                "device": d["device"],
                "status": d["status"],
                "time_objective_s": t_time,
                "deadline_objective_s": d_time,
                "slowdown": d_time / t_time if t_time > 0 else None,
                "time_objective_j": t_e,
                "deadline_objective_j": d_e,
                "saved_j": t_e - d_e,
                "saved_pct": 100.0 * (t_e - d_e) / t_e if t_e > 0 else None,
                "time_objective_round_j": t_round,
                "deadline_objective_round_j": d_round,
                "round_saved_j": round_saved,
                "round_saved_pct": (
                    100.0 * round_saved / t_round if round_saved is not None and t_round else None
                ),
            }
        )
    tt, dt = totals(list(time_rows)), totals(list(deadline_rows))
    return {
        "time": tt,
        "deadline": dt,
        "energy_saved_pct": _saved_pct(tt["energy_j"], dt["energy_j"]),
        "round_energy_saved_pct": _saved_pct(tt["round_energy_j"], dt["round_energy_j"]),
        "devices": devices,
    }


def _saved_pct(ref: object, got: object) -> float | None:
    """How much less ``got`` is than ``ref``, in % of ``ref`` (None without a reference)."""
    if not _finite(ref) or not ref or not _finite(got):
        return None
    return 100.0 * (ref - got) / ref


# ------------------------------------------------------------------------------------- what-if


MAX_STEPS = 10_000  # a sweep's steps: each is a whole fleet round


def parse_range(raw: str, scale: bool = False) -> list[float]:
    """'3:10:0.5' -> 3, 3.5, ..., 10 (inclusive); '4.5,7,10' -> those values. Watts are read
    by the one budget grammar (``4.5 W`` as every command takes it; no-limit words are not a
    step of a sweep); ``scale`` factors are plain numbers."""
    where = f"--budgets {raw!r:.80}"

    def number(text: str) -> float:
        if not text.strip():  # "5,,7": a value left out is a slip, not a shorter sweep
            raise InputError(f"{where}: an empty item; expected START:STOP:STEP or a comma list")
        if scale:
            return float(text)
        value = parse_budget(text, where)  # its own line: "'-1' is not a budget; expected ..."
        if value is None:
            raise InputError(f"{where}: {text.strip()!r} is no step of a sweep; expected watts")
        return value

    try:
        if ":" in raw:
            texts = raw.split(":")
            if len(texts) != 3:
                raise ValueError
            lo, hi = number(texts[0]), number(texts[1])
            step = float(texts[2]) if texts[2].strip() else math.nan  # a step, not a budget
            if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(step)):
                raise ValueError
            if step <= 0 or hi < lo:
                raise InputError(f"{where}: expected START:STOP:STEP with STEP > 0, STOP >= START")
            n = int(math.floor((hi - lo) / step + 1e-9)) + 1
            if n > MAX_STEPS:  # counted before the list is built: 1:1e9:1 filled 24 GB
                raise InputError(f"{where}: {n:,} steps; at most {MAX_STEPS:,}")
            values = [round(lo + i * step, 10) for i in range(n)]
        else:
            values = [number(x) for x in raw.split(",")]
    except InputError:  # said already, in words
        raise
    except ValueError:
        raise InputError(f"{where}: expected START:STOP:STEP or a comma list of numbers") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError(f"{where}: every budget (or scale) must be a positive number")
    if len(values) > MAX_STEPS:
        raise InputError(f"{where}: {len(values):,} steps; at most {MAX_STEPS:,}")
    return values


def with_budget(fleet: Fleet, value: float, scale: bool = False) -> Fleet:
    """The fleet with every device on ``value`` watts (its schedule dropped), or with
    ``scale=True`` every budget and schedule step multiplied by ``value`` (unlimited stays)."""

    def one(spec: DeviceSpec) -> DeviceSpec:
        if not scale:
            return replace(spec, budget_w=value, schedule=())
        mul = lambda w: None if w is None else w * value  # noqa: E731
        steps = tuple(BudgetStep(s.at_s, mul(s.budget_w)) for s in spec.schedule)
        return replace(spec, budget_w=mul(spec.budget_w), schedule=steps)

    return replace(fleet, devices=tuple(one(s) for s in fleet.devices))


@dataclass(frozen=True)
class WhatIfStep:
    value: float  # watts, or the scale factor
    objective: str
    deadline_s: float | None
    round_time_s: float | None
    energy_j: float  # training energy
    trained: int
    late: int
    infeasible: int
    not_trained: int
    round_energy_j: float  # training + every device's idle waiting (fleet.planning.roundenergy)
    idle_unknown: int  # devices whose waiting is not charged (no idle power known)


def sweep(
    fleet: Fleet,
    values: Sequence[float],
    scale: bool = False,
    objective: str | None = None,
    progress: Progress | None = None,
    segment_s: float | None = None,
) -> list[WhatIfStep]:
    """One fleet round per budget (or scale), in segments of ``segment_s`` as
    ``simulate_fleet`` runs it; the deadline objective plans (and re-plans) at every step."""
    out = []
    for k, v in enumerate(values, start=1):
        got = simulate_fleet(with_budget(fleet, v, scale), objective, segment_s=segment_s)
        t = got.totals
        out.append(
            WhatIfStep(
                v,
                got.objective,
                got.deadline_s,
                # totals() is a dict[str, object]: its keys hold these numbers
                t["round_time_s"],  # type: ignore[arg-type]
                t["energy_j"],  # type: ignore[arg-type]
                t["trained"],  # type: ignore[arg-type]
                t["late"],  # type: ignore[arg-type]
                t["infeasible"],  # type: ignore[arg-type]
                t["not_trained"],  # type: ignore[arg-type]
                t["round_energy_j"],  # type: ignore[arg-type]
                t["idle_unknown"],  # type: ignore[arg-type]
            )
        )
        if progress:
            progress(k, len(values), f"{v:g}")
    return out


def pareto_front(steps: Sequence[WhatIfStep]) -> list[WhatIfStep]:
    """Steps not dominated in (round time, energy), fastest first (the plotted front)."""
    pts = [s for s in steps if s.round_time_s is not None]
    pts.sort(key=lambda s: (s.round_time_s, s.energy_j))
    front: list[WhatIfStep] = []
    for s in pts:
        if not front or s.energy_j < front[-1].energy_j:
            front.append(s)
    return front
