"""The floors: the least ratio error any model of this class can reach against the paper.

A baseline runs one batch size at the clock caps, so its times over the budgets lie on a line in
``1 / f_cap``; how far the paper's column sits from the nearest such line bounds every fit from
below. Pure geometry on the transcribed cells, apart from the fit itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulations.calibrate.paper import BOARDS_OF, BUDGETS, CAPS_MHZ, DATASETS, Cell


def line_floor(x: Sequence[float], t: Sequence[float], w: Sequence[float]) -> float:
    """Least ``sum(w_k |a + c x_k - t_k|)`` over a, c >= 0: the weighted L1 distance of the
    points (x_k, t_k) from the nearest line with non-negative intercept and slope.

    A two-variable linear program: its optimum is a vertex, where two constraints are tight —
    the line passes through two points, or through one point with a = 0 or c = 0 — so trying
    every vertex is exact.
    """
    pts = list(zip(x, t, strict=True))
    cands: list[tuple[float, float]] = []
    for i, (xi, ti) in enumerate(pts):
        cands += [(ti, 0.0), (0.0, ti / xi)]
        for xj, tj in pts[i + 1 :]:
            if xi != xj:
                c = (tj - ti) / (xj - xi)
                cands.append((ti - c * xi, c))
    ok = [(a, c) for a, c in cands if a >= -1e-9 and c >= -1e-9]
    return min(
        sum(wk * abs(a + c * xk - tk) for xk, tk, wk in zip(x, t, w, strict=True)) for a, c in ok
    )


def baseline_floors(cells: Sequence[Cell]) -> dict[tuple, float]:
    """The least mean |ref/ours ratio error| any model of this class can reach, per (model,
    board, ref), with "ours" held at the paper's times.

    B1 and B2 each run one batch size at the baselines' clock caps, the same over the three
    budgets, and a step takes a part that follows the clock plus a part that does not, so a
    baseline's times over the budgets lie on ``t = a + c / f_cap`` with a, c >= 0. The ratio
    error of a cell is ``|t_model - t_paper| / ours``, so the least reachable error is the
    weighted L1 distance of the paper's column from that line (``line_floor``). A column that
    is not on such a line (Table 3's Dickens B2) sets a floor no fit can go under.
    """
    paper = {c.key: c.time_s for c in cells}
    sums: dict[tuple, list[float]] = {}
    for model, boards in BOARDS_OF.items():
        for board in boards:
            budgets = list(BUDGETS)
            x = [1.0 / CAPS_MHZ[board][b] for b in budgets]
            for ds in DATASETS[model][1:]:
                got = [paper.get((model, board, ds, b, "ours")) for b in budgets]
                for ref in ("b1", "b2"):
                    theirs = [paper.get((model, board, ds, b, ref)) for b in budgets]
                    if None in got or None in theirs:
                        continue
                    t = [float(v) for v in theirs if v is not None]
                    w = [1.0 / float(o) for o in got if o is not None]
                    acc = sums.setdefault((model, board, ref), [0.0, 0.0])
                    acc[0] += line_floor(x, t, w)
                    acc[1] += len(budgets)
    return {k: total / n for k, (total, n) in sums.items()}
