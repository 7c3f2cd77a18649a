"""The paper's cells audited before they are fitted: counted, faulty, copied.

A fit can only be as good as the cells it is asked to match, and three kinds of fact about the
tables decide how each cell is used:

* **Counted.** Tables 2-4 print 120 time cells (Table 2: 3 models x 2 datasets x 3 budgets x
  4 methods = 72; Table 3: 24; Table 4: 24). EfficientViT's 24 are not transcribed (the project
  has no EfficientViT), so 96 of 120 are fitted and every goal is counted over those 96.
* **Faulty mean.** B1 and B2 run one batch size at every budget, so a baseline's time on one
  target divided by its time on the other target of the same model and board is N(b) on the
  first over N(b) on the second: the same number at every budget. A cell whose ratio departs
  from its row's other budgets (:data:`RATIO_TOLERANCE`) is faulty; the fit uses the value its
  row's ratio gives (the other target's cell times that ratio), and the report prints both.
* **Copied std.** A cell whose std equals (within :data:`STD_MATCH`) the std of a cell with a
  different mean in its column (same table, model, dataset, budget) or in the same row of the
  other board's table, while its std/mean is unlike the rest of its row (:data:`REL_DEPART`),
  carries a copied std: it is left out of the seed spreads the efficiency files take.

Everything here is computed from ``paper_cells.csv`` alone; the numbers travel into the report.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from simulations.calibrate.paper import BUDGETS, DATASETS, Cell

#: Cells the paper prints: Table 2 (3 models), Table 3 (transformer), Table 4 (ResNet18, TX2 NX),
#: each 2 datasets x 3 budgets x 4 methods.
PAPER_CELLS = 120
#: Of which EfficientViT's (Table 2) have no model here.
NOT_TRANSCRIBED = {"efficientvit": 24}
#: A baseline row's target/target ratio may move this much between budgets (rounding: ~0.1 %).
RATIO_TOLERANCE = 0.02
#: Two stds this close (relative) count as the same number.
STD_MATCH = 0.005
#: A baseline's std/mean this far (relative) from the rest of its row is unlike the row.
REL_DEPART = 0.10
#: Two std/mean ratios this close (relative) belong to the same batch size.
REL_MATCH = 0.02
BASELINE_METHODS = ("b1", "b2")


@dataclass(frozen=True)
class FaultyCell:
    """A baseline cell whose target/target ratio leaves its row (and what it should be)."""

    cell: Cell
    other: Cell  # the same row and budget on the model's other target
    ratio: float  # this cell / other
    row_ratios: tuple[float, ...]  # the same ratio at the row's other budgets
    all_ratios: tuple[float, ...]  # every other (method, budget) pair of the two targets
    corrected_s: float  # other x mean of row_ratios
    rel_std: float  # this cell's std / mean
    row_rel_stds: tuple[float, ...]  # std / mean of every other cell on this target


@dataclass(frozen=True)
class CopiedStd:
    cell: Cell
    source: Cell  # the cell whose std it repeats
    rel_std: float
    row_rel_std: float  # median std / mean of the rest of its row


def _index(cells: Sequence[Cell]) -> dict[tuple, Cell]:
    return {c.key: c for c in cells}


def faulty_cells(cells: Sequence[Cell]) -> list[FaultyCell]:
    """Baseline cells whose target/target ratio is not their row's (see the module docstring)."""
    at = _index(cells)
    out = []
    models = sorted({(c.model, c.board) for c in cells})
    for model, board in models:
        first, second = DATASETS[model][1:]
        pairs = {}
        for c in cells:
            if (c.model, c.board, c.dataset) != (model, board, second):
                continue
            o = at.get((model, board, first, c.budget_w, c.method))
            if o:
                pairs[(c.method, c.budget_w)] = (c, o, c.time_s / o.time_s)
        for method in BASELINE_METHODS:
            for budget in BUDGETS:
                if (method, budget) not in pairs:
                    continue
                c, o, ratio = pairs[(method, budget)]
                row = [
                    pairs[(method, b)][2] for b in BUDGETS if b != budget and (method, b) in pairs
                ]
                if not row:
                    continue
                ref = statistics.mean(row)
                agree = max(row) / min(row) - 1 <= RATIO_TOLERANCE / 2
                if not agree or abs(ratio / ref - 1) <= RATIO_TOLERANCE:
                    continue
                others = tuple(
                    r for k, (_, _, r) in sorted(pairs.items(), key=str) if k != (method, budget)
                )
                rels = tuple(
                    x.std_s / x.time_s
                    for x in cells
                    if (x.model, x.board, x.dataset) == (model, board, second) and x is not c
                )
                out.append(
                    FaultyCell(
                        c, o, ratio, tuple(row), others, o.time_s * ref, c.std_s / c.time_s, rels
                    )
                )
    return out


def copied_stds(cells: Sequence[Cell]) -> list[CopiedStd]:
    """Cells whose std repeats another cell's while unlike their own target (module docstring).

    A baseline runs one batch at every budget, so its std/mean is one number along its row; a
    baseline cell off its row is unlike its target. Ours and the fastest may change batch
    between budgets, so their cell is unlike its target when its std/mean matches no other cell
    of the same model, board and target (a cell printed twice, ours = fastest, aside).
    """
    out = []
    for c in cells:
        source = next((x for x in cells if _repeats_std(c, x)), None)
        if source is None:
            continue
        rel = c.std_s / c.time_s
        if c.method in BASELINE_METHODS:
            row = [x.std_s / x.time_s for x in _row(cells, c) if x is not c]
            if not row or max(row) / min(row) - 1 > REL_DEPART / 2:
                continue
            ref = statistics.mean(row)
            unlike = abs(rel / ref - 1) > REL_DEPART
        else:
            twins = [
                x.std_s / x.time_s
                for x in cells
                if (x.table, x.model, x.board, x.dataset) == (c.table, c.model, c.board, c.dataset)
                and (x.time_s, x.std_s) != (c.time_s, c.std_s)
                and x is not source
            ]
            ref = statistics.median([x.std_s / x.time_s for x in _row(cells, c) if x is not c])
            unlike = all(abs(rel / r - 1) > REL_MATCH for r in twins)
        if unlike:
            out.append(CopiedStd(c, source, rel, ref))
    return out


def _row(cells: Sequence[Cell], c: Cell) -> list[Cell]:
    """The cells of ``c``'s table row: same table, model, board, dataset and method."""
    key = (c.table, c.model, c.board, c.dataset, c.method)
    return [x for x in cells if (x.table, x.model, x.board, x.dataset, x.method) == key]


def _repeats_std(c: Cell, x: Cell) -> bool:
    """Whether ``x`` has ``c``'s std with another mean, in ``c``'s column (same table, model,
    dataset, budget) or in ``c``'s row of the other board's table."""
    if x is c or x.time_s == c.time_s or abs(x.std_s / c.std_s - 1) > STD_MATCH:
        return False
    column = (x.table, x.model, x.dataset, x.budget_w) == (c.table, c.model, c.dataset, c.budget_w)
    elsewhere = x.table != c.table and (x.model, x.dataset, x.budget_w, x.method) == (
        c.model,
        c.dataset,
        c.budget_w,
        c.method,
    )
    return column or elsewhere


def ours_runs_baseline(cells: Sequence[Cell]) -> dict[tuple, tuple[str, float | None]]:
    """Where the paper prints ours identical (mean and std) to a baseline's cell, ours ran that
    baseline's batch at that baseline's clock cap: (model, board, dataset, budget) -> (baseline,
    the baseline cell's budget). The paper's own words for MobileNetV2 (§5.3: B2 at 7 W "uses a
    lower frequency with the same batch size of our approach") agree."""
    out = {}
    for c in cells:
        if c.method != "ours":
            continue
        for x in cells:
            if (
                x.method in BASELINE_METHODS
                and (x.model, x.board, x.dataset) == (c.model, c.board, c.dataset)
                and (x.time_s, x.std_s) == (c.time_s, c.std_s)
            ):
                out[(c.model, c.board, c.dataset, c.budget_w)] = (x.method, x.budget_w)
                break
    return out


def fitted_cells(cells: Sequence[Cell]) -> list[Cell]:
    """The cells the fit matches: faulty means replaced by the value their row gives."""
    fix = {f.cell.key: f.corrected_s for f in faulty_cells(cells)}
    return [replace(c, time_s=fix[c.key]) if c.key in fix else c for c in cells]


def copied_keys(cells: Sequence[Cell]) -> set[tuple]:
    return {c.cell.key for c in copied_stds(cells)}
