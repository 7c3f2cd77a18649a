"""Issue 21's goals for the reference, measured on an experiment's results against the paper.

The experiment (`powerfleet experiment paper`, ``results.json``) is what every simulation
inherits, so the goals are judged on it, not on the fit's noise-free prediction:

* B1/ours and B2/ours: mean |ratio error| per model and board <= :data:`RATIO_GOAL`, against the
  audited cells (:func:`.audit.fitted_cells`: Table 3's faulty Dickens B2 cell corrected);
* ours/fastest: per cell, ours's time over the fastest configuration's at most the paper's
  plus :data:`GAP_SLACK_PCT` points;
* proxy sensitivity (Fig. 5 / Fig. 6): every entry the paper reports for the datasets this
  project has (MobileNetV2 and the transformer on the Nano: all 0 %) within
  :data:`SENSITIVITY_SLACK_PCT` points.

:func:`measure` returns every number and whether each goal holds; the report, the benchmark
(``benchmarks/paper_audit.py``) and the tests read the same dictionary.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulations.calibrate.evaluate import ratio_errors
from simulations.calibrate.paper import Cell

RATIO_GOAL = 0.10
GAP_SLACK_PCT = 3.0
SENSITIVITY_SLACK_PCT = 5.0
#: Fig. 5 (MobileNetV2) and Fig. 6 (transformer), Nano, the datasets this project has: the
#: paper's entries for these rows and columns are 0 at every budget (Fig. 5's non-zero entries
#: sit in the FMNIST/STL rows and the STL column, which the project does not have). Fig. 8
#: (ResNet18) is described in words only ("the same observation"), so it has no numbers here.
PAPER_SENSITIVITY = {
    ("mobilenetv2", "nano"): 0.0,
    ("transformer", "nano"): 0.0,
}


def project_values(rows: Sequence[dict]) -> dict[tuple, float]:
    """(model, board, dataset, budget, method) -> mean time over seeds, from results rows."""
    out = {}
    for r in rows:
        t = r.get("time_mean_s")
        if isinstance(t, float):
            out[(r["model"], r["device"], r["dataset"], r["budget_w"], r["method"])] = t
    return out


def gaps(values: dict[tuple, float], cells: Sequence[Cell]) -> list[dict]:
    """ours over fastest (%) per (model, board, dataset, budget): paper and ``values``."""
    paper = {c.key: c.time_s for c in cells}
    out = []
    for c in cells:
        if c.method != "ours":
            continue
        k = c.key[:4]
        o = paper.get((*k, "oracle"))
        mine, best = values.get((*k, "ours")), values.get((*k, "oracle"))
        if o is None or mine is None or best is None:
            continue
        p = (c.time_s / o - 1) * 100
        v = (mine / best - 1) * 100
        out.append({"cell": k, "paper_pct": p, "pct": v, "ok": v <= p + GAP_SLACK_PCT})
    return out


def sensitivity(sens: Sequence[dict]) -> list[dict]:
    """The largest entry of each Fig. 5/6 matrix the paper reports, per budget."""
    out = []
    for s in sens:
        key = (s["model"], s["device"])
        if key not in PAPER_SENSITIVITY:
            continue
        for budget, mat in s["matrices"].items():
            vals = [v for row in mat for v in row if v is not None]
            worst = max(vals) if vals else None
            paper = PAPER_SENSITIVITY[key]
            ok = worst is not None and worst <= paper + SENSITIVITY_SLACK_PCT
            out.append(
                {
                    "model": key[0],
                    "board": key[1],
                    "budget": budget,
                    "max_pct": worst,
                    "paper_pct": paper,
                    "ok": ok,
                }
            )
    return out


def ours_gains(values: dict[tuple, float], cells: Sequence[Cell]) -> dict[tuple, tuple]:
    """ours at 4.5 W over ours at 7 W per (model, board, dataset): (paper, ``values``).

    What the ratio misses come from: a baseline's clock cap moves 307 -> 614 MHz between the two
    budgets, so B1/ours and B2/ours at 4.5 W follow how much ours itself gains from the budget.
    """
    paper = {c.key: c.time_s for c in cells}
    out = {}
    for c in cells:
        if c.method == "ours" and c.budget_w == 4.5:
            k = c.key[:3]
            p7, m45, m7 = (
                paper.get((*k, 7.0, "ours")),
                values.get(c.key),
                values.get((*k, 7.0, "ours")),
            )
            if p7 and m45 and m7:
                out[k] = (c.time_s / p7, m45 / m7)
    return out


def measure(results: dict, cells: Sequence[Cell]) -> dict:
    """Every goal's numbers on ``results`` (``results.json``'s object) against ``cells``."""
    values = project_values(results["rows"])
    ratios = ratio_errors(values, cells)
    g = gaps(values, cells)
    s = sensitivity(results.get("sensitivity", []))
    pcts = sorted(x["pct"] for x in g)
    return {
        "ratio_errors": ratios,
        "ratio_ok": all(v <= RATIO_GOAL for v in ratios.values()),
        "ours_gains": ours_gains(values, cells),
        "gaps": g,
        "gap_ok": all(x["ok"] for x in g),
        "gap_max_pct": max(pcts) if pcts else None,
        "gap_median_pct": pcts[len(pcts) // 2] if pcts else None,
        "gap_equal": sum(1 for x in g if abs(x["pct"]) < 0.05),
        "sensitivity": s,
        "sensitivity_ok": all(x["ok"] for x in s),
    }
