"""The audit in Markdown: cells counted, the faulty cell's evidence, copied stds, goals met.

What ``powerfleet experiment paper`` puts under "Audit against the paper" and what
``benchmarks/paper_audit.py`` prints: every number is computed here from ``paper_cells.csv``
(:mod:`.audit`) and an experiment's ``results.json`` (:mod:`.goals`), optionally beside an
earlier experiment's (``before``) so the table shows what a change did.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulations.calibrate.audit import (
    NOT_TRANSCRIBED,
    PAPER_CELLS,
    copied_stds,
    faulty_cells,
    fitted_cells,
    ours_runs_baseline,
)
from simulations.calibrate.evaluate import ratio_errors
from simulations.calibrate.goals import (
    GAP_SLACK_PCT,
    RATIO_GOAL,
    SENSITIVITY_SLACK_PCT,
    measure,
)
from simulations.calibrate.paper import Cell


def _b(budget: float | None) -> str:
    return "none" if budget is None else f"{budget:g} W"


def _name(c: Cell) -> str:
    return f"Table {c.table} {c.model} {c.board} {c.dataset} {c.method.upper()} {_b(c.budget_w)}"


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def audit_markdown(
    cells: Sequence[Cell],
    results: dict,
    before: dict | None = None,
    loo: dict[tuple, float] | None = None,
) -> str:
    """The audit section: counts, faulty and copied cells, goals (with ``before`` beside)."""
    fixed = fitted_cells(cells)
    now = measure(results, fixed)
    old = measure(before, fixed) if before else None
    missing = ", ".join(f"{n} {m}" for m, n in NOT_TRANSCRIBED.items())
    lines = [
        "## Audit against the paper",
        "",
        f"**Cells counted.** The paper's Tables 2-4 print {PAPER_CELLS} time cells; {len(cells)} "
        f"are transcribed and fitted (`simulations/paper_cells.csv`); {missing} cells are not "
        "(no such model here). Every goal below is counted over those "
        f"{len(cells)} cells, not {PAPER_CELLS}.",
        "",
    ]
    lines += _faulty_lines(cells)
    lines += _copied_lines(cells)
    runs = ours_runs_baseline(cells)
    if runs:
        lines += [
            "**Choices the paper reports.** Where ours's cell repeats a baseline's (mean and "
            "std), ours ran that baseline's batch at its clock; the fit pulls ours onto it:",
            "",
        ]
        lines += [
            f"- {m} {bd} {ds} {_b(bu)}: ours = {meth.upper()} at {_b(at)}"
            for (m, bd, ds, bu), (meth, at) in sorted(runs.items(), key=str)
        ]
        lines.append("")
    lines += _goal_lines(now, old, fixed, loo)
    return "\n".join(lines) + "\n"


def _faulty_lines(cells: Sequence[Cell]) -> list[str]:
    out = []
    for f in faulty_cells(cells):
        c, o = f.cell, f.other
        row = ", ".join(f"{r:.4f}" for r in f.row_ratios)
        rels = sorted({round(r, 4) for r in f.row_rel_stds})
        out += [
            f"**Faulty cell: {_name(c)} = {c.time_s:,.0f} ± {c.std_s:,.0f} s.** A baseline runs "
            f"one batch size at every budget, so {c.dataset}/{o.dataset} in its row is one "
            f"number: {row} at the row's other budgets, {f.ratio:.4f} here. The other "
            f"{len(f.all_ratios)} {c.dataset}/{o.dataset} pairs of the table lie in "
            f"{min(f.all_ratios):.4f}-{max(f.all_ratios):.4f}. Its std/mean is {f.rel_std:.4f}; "
            f"the other {c.dataset} cells show {', '.join(f'{r:.4f}' for r in rels)} (one value "
            "per batch size run), none within 2 % of it. The fit and every goal use "
            f"{o.time_s:,.0f} x {sum(f.row_ratios) / len(f.row_ratios):.4f} = "
            f"**{f.corrected_s:,.0f} s** (the row's ratio on {o.dataset}'s cell); the printed "
            "value stays in the transcription.",
            "",
        ]
    return out


def _copied_lines(cells: Sequence[Cell]) -> list[str]:
    found = copied_stds(cells)
    if not found:
        return []
    out = [
        "**Copied stds.** A cell whose std repeats (within 0.5 %) that of a cell with another "
        "mean in its column, or in its row of the other board's table, while its std/mean is "
        "unlike its target's (a baseline: off its own row; ours/fastest: matching no other cell "
        "of that target within 2 %). Left out of the seed spreads the efficiency files carry:",
        "",
        "| cell | std (s) | std/mean | its row / target | repeats | std (s) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for x in found:
        out.append(
            f"| {_name(x.cell)} ({x.cell.time_s:,.0f}) | {x.cell.std_s:,.0f} | {x.rel_std:.3f} | "
            f"{x.row_rel_std:.3f} | {_name(x.source)} ({x.source.time_s:,.0f}) | "
            f"{x.source.std_s:,.0f} |"
        )
    out.append("")
    return out


def _goal_lines(now: dict, old: dict | None, cells: Sequence[Cell], loo) -> list[str]:
    cols = ["before", "now"] if old else ["now"]
    mark = {True: "met", False: "**missed**"}
    out = [
        "### Goals (issue 21), on this report's results",
        "",
        f"B1/ours and B2/ours mean |ratio error| per model and board (goal <= {RATIO_GOAL:.2f}; "
        f"against the audited cells); `LOO`: the calibration's leave-one-out predictions "
        "(`simulations/calibration.json`), beside the fit:",
        "",
        "| model | board | ratio | " + " | ".join(cols) + (" | LOO |" if loo else " |"),
        "|---|---|---|" + "---:|" * (len(cols) + (1 if loo else 0)),
    ]
    loo_err = ratio_errors(loo, cells) if loo else {}
    for key in sorted(now["ratio_errors"]):
        vals = ([old["ratio_errors"].get(key)] if old else []) + [now["ratio_errors"][key]]
        row = f"| {key[0]} | {key[1]} | {key[2].upper()}/ours | "
        row += " | ".join(_fmt(v, ".3f") for v in vals)
        row += f" | {_fmt(loo_err.get(key), '.3f')} |" if loo else " |"
        out.append(row)
    missed = [(k, v) for k, v in sorted(now["ratio_errors"].items()) if v > RATIO_GOAL]
    out += ["", f"Ratio goal: {mark[now['ratio_ok']]}."]
    if missed:
        out[-1] += " Missed: " + ", ".join(
            f"{k[0]} {k[1]} {k[2].upper()}/ours {v:.3f}" for k, v in missed
        )
        gains = [g for k, g in now["ours_gains"].items() if k[:2] in {m[0][:2] for m in missed}]
        lo = lambda i: min(g[i] for g in gains)  # noqa: E731
        hi = lambda i: max(g[i] for g in gains)  # noqa: E731
        out[-1] += (
            ". Why: the fit also holds ours/fastest, Fig. 1 and Fig. 2 and the profiles' physics "
            "(time falling with the clock, the TX2 NX 1.5-2.5x the Nano); under them the "
            f"model's ours gains {lo(1):.2f}-{hi(1):.2f}x from 4.5 W to 7 W where the paper's "
            f"gains {lo(0):.2f}-{hi(0):.2f}x, so ours at 4.5 W is too fast against the "
            "baselines at their cap. Sweeps of the ratio and ours/fastest weights found no "
            "weighting that meets both."
            if gains
            else "."
        )
    out += [
        "",
        f"ours over the fastest configuration per cell (goal: <= paper + {GAP_SLACK_PCT:g} "
        "points; the fastest is one configuration chosen on the target's mean, costed per seed):",
        "",
        "| model | board | dataset | budget | paper % | "
        + " | ".join(f"{c} %" for c in cols)
        + " |",
        "|---|---|---|---|---:|" + "---:|" * len(cols),
    ]
    before = {g["cell"]: g for g in old["gaps"]} if old else {}
    for g in now["gaps"]:
        m, bd, ds, bu = g["cell"]
        vals = ([before.get(g["cell"], {}).get("pct")] if old else []) + [g["pct"]]
        flag = "" if g["ok"] else " (missed)"
        out.append(
            f"| {m} | {bd} | {ds} | {_b(bu)} | {g['paper_pct']:.1f} | "
            + " | ".join(_fmt(v, ".1f") for v in vals)
            + f"{flag} |"
        )
    summary = [("now", now)] + ([("before", old)] if old else [])
    out.append("")
    for name, m in summary:
        out.append(
            f"- {name}: max {m['gap_max_pct']:.1f} %, median {m['gap_median_pct']:.1f} %, "
            f"equal in {m['gap_equal']} of {len(m['gaps'])} (paper: max 8.3 %, median 0 %, "
            "equal in 20 of 24)"
        )
    out += [
        "",
        f"ours/fastest goal: {mark[now['gap_ok']]}.",
        "",
        f"Proxy sensitivity (Fig. 5 / Fig. 6, the entries the paper reports; goal: within "
        f"{SENSITIVITY_SLACK_PCT:g} points): the largest entry of each matrix.",
        "",
        "| model | board | budget | paper % | " + " | ".join(f"{c} %" for c in cols) + " |",
        "|---|---|---|---:|" + "---:|" * len(cols),
    ]
    prev = {(s["model"], s["budget"]): s for s in old["sensitivity"]} if old else {}
    for s in now["sensitivity"]:
        vals = [prev.get((s["model"], s["budget"]), {}).get("max_pct")] if old else []
        vals.append(s["max_pct"])
        out.append(
            f"| {s['model']} | {s['board']} | {s['budget']} | {s['paper_pct']:.0f} | "
            + " | ".join(_fmt(v, ".1f") for v in vals)
            + " |"
        )
    out += ["", f"Sensitivity goal: {mark[now['sensitivity_ok']]}.", ""]
    return out
