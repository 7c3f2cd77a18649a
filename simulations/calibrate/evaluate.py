"""A fit judged the way the fleet would run it: hard-rule predictions, ratio errors, leave-one-out.

Every number reported comes from here, recomputed with the hard selection rules rather than the
soft minimum the solver optimises; leave-one-out refits each model without one cell at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from simulations.calibrate.fit import TEMPERATURES, Fit, fit_model, lighter_grids
from simulations.calibrate.paper import BOARDS_OF, DATASETS, Cell
from simulations.calibrate.predict import predict_cells
from simulations.devicemodel.fitted import PRIOR_TX2NX


def hard_predictions(fit: Fit, cells: Sequence[Cell]) -> dict[tuple, float]:
    out = {}
    for model, st in fit.states.items():
        proxy = DATASETS[model][0]
        for board in BOARDS_OF[model]:
            for ds in DATASETS[model][1:]:
                for (budget, method), v in predict_cells(st, board, ds, proxy, None).items():
                    out[(model, board, ds, budget, method)] = v
    return {c.key: out[c.key] for c in cells if c.key in out}


def ratio_errors(values: dict[tuple, float], cells: Sequence[Cell]) -> dict[tuple, float]:
    """Mean |ratio error| of B1/ours and B2/ours per (model, board, ref), values vs the paper."""
    paper = {c.key: c.time_s for c in cells}
    errs: dict[tuple, list[float]] = {}
    for c in cells:
        if c.method != "ours":
            continue
        for ref in ("b1", "b2"):
            k = (c.model, c.board, c.dataset, c.budget_w, ref)
            if k in paper and k in values and c.key in values:
                e = abs(values[k] / values[c.key] - paper[k] / paper[c.key])
                errs.setdefault((c.model, c.board, ref), []).append(e)
    return {k: float(np.mean(v)) for k, v in errs.items()}


def leave_one_out(
    fit: Fit, cells: Sequence[Cell], progress: Callable[[int, int], None] | None = None
) -> dict[tuple, float]:
    """Each cell predicted by a refit (warm-started from the full fit) that did not see it.

    The TX2 NX scales and the heavier models' grids stay as in the full fit (a cell of one model
    moves only that model's constants), which keeps the pass to about a minute.
    """
    out = {}
    tx2nx = fit.states["resnet18"].tx2nx
    for k, cell in enumerate(cells):
        rest = [c for c in cells if c is not cell]
        lighter = lighter_grids(fit.states, cell.model, tx2nx)
        st, _, _ = fit_model(
            cell.model,
            rest,
            tx2nx if cell.model != "resnet18" else PRIOR_TX2NX,
            lighter,
            x0=_warm(fit, cell.model),
            temperatures=TEMPERATURES[-1:],
            iters=12,
        )
        pred = predict_cells(st, cell.board, cell.dataset, DATASETS[cell.model][0], None)
        out[cell.key] = pred[(cell.budget_w, cell.method)]
        if progress:
            progress(k + 1, len(cells))
    return out


def _warm(fit: Fit, model: str) -> np.ndarray:
    return fit.vectors[model].copy()
