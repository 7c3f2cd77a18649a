"""Markdown for the deadline objective: the round beside what the time objective would give.

Takes the numbers ``fleet.planning.whatif.deadline_vs_time`` produced (stored in report.json as
``deadline_vs_time``) and prints them, as Markdown (the run report) or as plain lines
(``powerfleet simulate``); it computes nothing, so a cell can be traced to its row.
"""

from __future__ import annotations

import math


def _n(v: object, spec: str) -> str:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return format(v, spec) if ok else "—"


def _kj(v: object) -> object:
    return v / 1000 if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _unknown(totals: dict) -> str:
    n = totals.get("idle_unknown")
    if n is None:
        return "idle power not recorded"
    return "idle power known for every device" if not n else f"{n} devices without idle power"


def deadline_section(cmp: dict, deadline_s: object = None) -> list[str]:
    """The report section: fleet round time and energy for both objectives, then per device
    the slow-down (deadline time / time-objective time) and the energy saved."""
    t, d = cmp["time"], cmp["deadline"]
    lines = [
        "## Deadline objective against the time objective",
        "",
        f"Deadline {_n(deadline_s, ',.0f')} s (the slowest device's fastest predicted finish "
        "unless the fleet sets `deadline_s`). Devices that finish early under the time objective "
        "run cooler points instead and still finish by the deadline.",
        "",
        "Fleet energy counts training only; round energy adds every device's idle power while "
        "it waits for the round to end (a device that could not train waits the whole round).",
        "",
        "| Objective | Round time s | Fleet energy kJ | Round energy kJ | Trained | Late |",
        "|---|---|---|---|---|---|",
        f"| time | {_n(t['round_time_s'], ',.0f')} | {_n(t['energy_j'] / 1000, ',.1f')} | "
        f"{_n(_kj(t.get('round_energy_j')), ',.1f')} | {t['trained']} | {t['late']} |",
        f"| deadline | {_n(d['round_time_s'], ',.0f')} | {_n(d['energy_j'] / 1000, ',.1f')} | "
        f"{_n(_kj(d.get('round_energy_j')), ',.1f')} | {d['trained']} | {d['late']} |",
        "",
        f"Fleet energy saved: {_n(cmp.get('energy_saved_pct'), '.1f')} %; round energy saved: "
        f"{_n(cmp.get('round_energy_saved_pct'), '.1f')} % ({_unknown(d)}).",
        "",
        "| Device | Status | Time s (time obj.) | Time s (deadline) | Slow-down | "
        "Energy kJ (time obj.) | Energy kJ (deadline) | Saved % | Saved % with waiting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    shown = cmp["devices"][:50]  # a 1,000-device fleet: the first fifty tell the story
    for r in shown:
        lines.append(
            f"| {r['device']} | {r['status']} | {_n(r['time_objective_s'], ',.0f')} | "
            f"{_n(r['deadline_objective_s'], ',.0f')} | {_n(r['slowdown'], '.2f')}× | "
            f"{_n(r['time_objective_j'] / 1000, ',.1f')} | "
            f"{_n(r['deadline_objective_j'] / 1000, ',.1f')} | {_n(r['saved_pct'], '.1f')} | "
            f"{_n(r.get('round_saved_pct'), '.1f')} |"
        )
    if len(cmp["devices"]) > len(shown):
        lines.append(f"... {len(cmp['devices']) - len(shown)} more devices in report.json")
    return lines + [""]


def deadline_lines(cmp: dict, deadline_s: object = None, limit: int = 20) -> list[str]:
    """The same comparison as plain text lines for the terminal (``powerfleet simulate``)."""
    t, d = cmp["time"], cmp["deadline"]
    lines = [
        f"deadline objective: deadline {_n(deadline_s, ',.0f')} s; round time "
        f"{_n(d['round_time_s'], ',.0f')} s, fleet energy {_n(d['energy_j'], ',.0f')} J, round "
        f"energy {_n(d.get('round_energy_j'), ',.0f')} J (time objective: "
        f"{_n(t['round_time_s'], ',.0f')} s, {_n(t['energy_j'], ',.0f')} J, round "
        f"{_n(t.get('round_energy_j'), ',.0f')} J); saved {_n(cmp.get('energy_saved_pct'), '.1f')}"
        f" % (with waiting {_n(cmp.get('round_energy_saved_pct'), '.1f')} %); late {d['late']}",
    ]
    for r in cmp["devices"][:limit]:
        lines.append(
            f"  {r['device']}: {r['status']}, slow-down {_n(r['slowdown'], '.2f')}x "
            f"({_n(r['time_objective_s'], ',.0f')} -> {_n(r['deadline_objective_s'], ',.0f')} s), "
            f"saved {_n(r['saved_j'], ',.0f')} J ({_n(r['saved_pct'], '.1f')} %; with waiting "
            f"{_n(r.get('round_saved_j'), ',.0f')} J)"
        )
    if len(cmp["devices"]) > limit:
        lines.append(f"  ... {len(cmp['devices']) - limit} more devices in report.json")
    return lines
