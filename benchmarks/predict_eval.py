"""The measuring side of ``benchmarks/predict.py``: grids, probe designs, errors and regret.

A *grid* is a full table of truth ``{(b, k): row}``; a *design* says which of its points a
device would probe. ``evaluate_grid`` probes the design, predicts the rest with a predictor,
and scores the prediction against the held-out truth: mean relative error of time and power on
the predicted points, and, choosing with the predicted table at several budgets, the regret
(time to accuracy of the predicted choice in truth over the true best, minus one) and how many
choices are over the budget in truth. Budgets sit inside each grid's own power range so that
they bind; efficiencies are a few shapes of samples-to-accuracy over batch size.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

from fleet.agent.prediction.adapt import next_probes
from fleet.agent.prediction.design import design_probes, frame_probes
from fleet.agent.prediction.predict import QUANTITIES, predict_profile
from fleet.common.errors import InfeasibleError
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import select
from fleet.method.point import Point
from fleet.method.profile_io import read_rows
from fleet.trust.verify import select_verified

Key = tuple[int, float]
Table = dict[Key, dict[str, float]]
Predictor = Callable[[list[dict], list[int], list[float]], dict[str, dict[Key, float]]]
BUDGET_FRACTIONS = (0.15, 0.3, 0.45, 0.6, 0.75, 0.9)


def load_grid(path: str) -> Table:
    """A profile CSV's ok rows with time and power, as numbers."""
    _header, numbered, _comments = read_rows(path)
    table: Table = {}
    for _lineno, row in numbered:
        if (row.get("status") or "ok") != "ok" or not row.get("time_per_batch_s"):
            continue
        if not row.get("peak_power_w"):
            continue
        vals = {q: float(row[q]) for q in QUANTITIES if row.get(q)}
        vals.setdefault("mean_power_w", vals["peak_power_w"])
        table[(int(row["batch_size"]), float(row["freq_mhz"]))] = vals
    return table


def power_limit_view(table: Table, steps: int = 9) -> Table:
    """The same device driven by a power limit instead of a clock, as a firmware cap does it:
    at each limit a batch size runs at the clock where its power meets the limit (between two
    table clocks: power and throughput interpolated), or free when it draws less. Limits span
    the power at 40 % of the top clock (about the floor datacenter limits allow) to the top."""
    bs, ks = axes(table)
    floor = min(ks, key=lambda k: abs(k - 0.4 * ks[-1]))
    lo = max(table[(b, floor)]["peak_power_w"] for b in bs)
    hi = max(v["peak_power_w"] for v in table.values())
    out: Table = {}
    for i in range(steps):
        limit = round(lo + (hi - lo) * i / (steps - 1), 3)
        for b in bs:
            row = [table[(b, k)] for k in ks]
            if row[-1]["peak_power_w"] <= limit:
                out[(b, limit)] = dict(row[-1])
                continue
            j = max(n for n, v in enumerate(row) if v["peak_power_w"] <= limit or n == 0)
            lo_pt, hi_pt = row[j], row[j + 1]
            span = hi_pt["peak_power_w"] - lo_pt["peak_power_w"]
            w = min(1.0, max(0.0, (limit - lo_pt["peak_power_w"]) / span)) if span > 0 else 0.0
            rate = (1 - w) / lo_pt["time_per_batch_s"] + w / hi_pt["time_per_batch_s"]
            ratio = lo_pt["mean_power_w"] / lo_pt["peak_power_w"]
            peak = lo_pt["peak_power_w"] + w * span
            out[(b, limit)] = {
                "time_per_batch_s": 1.0 / rate,
                "peak_power_w": peak,
                "mean_power_w": peak * ratio,
            }
    return out


def noisy_limit_view(table: Table, seed: int, noise: float = 0.01) -> Table:
    """A power-limit grid as a real card measures it: each batch size sits at its own fraction
    (0.92-1.0) of a limit it is pinned to, and every reading carries ``noise`` (relative sd,
    1 %; time and power, independent). Deterministic for a seed. The modeled power-limit view
    is exact, which no real grid is; this one asks whether the model choice and the bound
    survive the noise."""
    rnd = random.Random(seed)
    share = {b: rnd.uniform(0.92, 1.0) for b in axes(table)[0]}
    out: Table = {}
    for (b, k), row in sorted(table.items()):
        e_power, e_time = rnd.gauss(0.0, noise), rnd.gauss(0.0, noise)
        out[(b, k)] = {
            "time_per_batch_s": row["time_per_batch_s"] * (1 + e_time),
            "peak_power_w": row["peak_power_w"] * share[b] * (1 + e_power),
            "mean_power_w": row["mean_power_w"] * share[b] * (1 + e_power),
        }
    return out


def noisy_view(table: Table, seed: int, noise: float = 0.01) -> Table:
    """A clock grid as a sensor reads it: ``noise`` (relative sd, 1 %) on every time and power
    reading (independent, deterministic for a seed); no share of a limit (the knob is a clock)."""
    rnd = random.Random(seed)
    out: Table = {}
    for (b, k), row in sorted(table.items()):
        e_power, e_time = rnd.gauss(0.0, noise), rnd.gauss(0.0, noise)
        out[(b, k)] = {
            "time_per_batch_s": row["time_per_batch_s"] * (1 + e_time),
            "peak_power_w": row["peak_power_w"] * (1 + e_power),
            "mean_power_w": row["mean_power_w"] * (1 + e_power),
        }
    return out


def axes(table: Table) -> tuple[list[int], list[float]]:
    return sorted({k[0] for k in table}), sorted({k[1] for k in table})


def is_full(table: Table) -> bool:
    bs, ks = axes(table)
    return len(bs) >= 3 and len(ks) >= 3 and len(table) == len(bs) * len(ks)


DESIGNS: dict[str, Callable[[list[int], list[float]], list[Key]]] = {
    "frame": frame_probes,
    "default": design_probes,
}


def ours(rows: list[dict], bs: list[int], ks: list[float]) -> tuple[dict, dict]:
    """The product's predictor; returns (values per column, details)."""
    pred = predict_profile(rows, bs, ks)
    vals: dict[str, dict[Key, float]] = {q: {} for q in QUANTITIES}
    vals["peak_power_bound_w"] = {}
    for r in pred.rows:
        key = (int(r["batch_size"]), float(r["freq_mhz"]))
        for q in QUANTITIES:
            if r.get(q) not in (None, ""):
                vals[q][key] = float(r[q])
        if r.get("peak_power_bound_w") not in (None, ""):
            vals["peak_power_bound_w"][key] = float(r["peak_power_bound_w"])
    return vals, {"methods": pred.methods, "cv": pred.candidates, "margin": pred.margin}


def separable(rows: list[dict], bs: list[int], ks: list[float]) -> tuple[dict, dict]:
    """The naive baseline: ``log y = a(b) + c(k)`` on the same probes, no bound."""
    from fleet.agent.prediction.models import separable as fit

    vals: dict[str, dict[Key, float]] = {}
    points = [(b, k) for b in bs for k in ks]
    for q in QUANTITIES:
        obs = {(int(r["batch_size"]), float(r["freq_mhz"])): float(r[q]) for r in rows}
        vals[q] = fit(obs, bs, ks, points)
    return vals, {}


PREDICTORS: dict[str, Callable] = {"ours": ours, "separable": separable}


def fixed_batch(path: str) -> bool:
    """A grid whose first axis is not a batch size (a header line ``# axes: batch_size holds
    ...``: e.g. a memory clock): its steps all do the same work, so time per step decides."""
    _header, _rows, comments = read_rows(path)
    return any(c.startswith("axes:") and "batch_size holds" in c for c in comments)


def efficiencies(bs: list[int], per_step: bool = False) -> dict[str, Efficiency]:
    """Shapes of samples-to-accuracy over batch size: flat (throughput decides), the gradient
    noise scale's ``N(b) = N0 (1 + b / B)`` with B at the middle batch size, and steep. A grid
    whose first axis is not a batch size gets one: every step the same work (``N(b) = b``)."""
    if per_step:
        return {"per-step": Efficiency({b: float(b) for b in bs}, source="per-step")}
    mid = bs[len(bs) // 2]
    shapes = {
        "flat": {b: 1e6 for b in bs},
        "noise-scale": {b: 1e6 * (1 + b / mid) for b in bs},
        "steep": {b: 1e6 * (1 + b / bs[0]) ** 0.9 for b in bs},
    }
    return {name: Efficiency(dict(n), source=name) for name, n in shapes.items()}


def budgets(table: Table) -> list[float]:
    powers = sorted(v["peak_power_w"] for v in table.values())
    lo, hi = powers[0], powers[-1]
    return [lo + f * (hi - lo) for f in BUDGET_FRACTIONS]


def _profile(vals: dict[str, dict[Key, float]], keys: Sequence[Key], name: str) -> Profile:
    bound = vals.get("peak_power_bound_w", {})
    pts = [
        Point(
            k[0],
            k[1],
            vals["time_per_batch_s"][k],
            vals["peak_power_w"][k],
            min(vals["mean_power_w"][k], vals["peak_power_w"][k]),
            bound.get(k, math.nan),
        )
        for k in keys
    ]
    return Profile(pts, name)


def _rows(table: Table, probed: Sequence[Key]) -> list[dict]:
    return [
        {"batch_size": b, "freq_mhz": k, **{q: table[(b, k)][q] for q in QUANTITIES}}
        for b, k in probed
    ]


def adapt(table: Table, probed: list[Key], extra: int, per_step: bool = False) -> list[Key]:
    """Spend ``extra`` more probes where they can change a choice (``predict_adapt``), a
    couple at a time, re-predicting in between, at this grid's budgets and efficiencies."""
    bs, ks = axes(table)
    effs = [e.reached for e in efficiencies(bs, per_step).values()]
    probed = list(probed)
    while extra > 0:
        pred = predict_profile(_rows(table, probed), bs, ks)
        step = next_probes(pred.rows, budgets(table), effs, min(2, extra), pred.margin or 0.0)
        step = [k for k in step if k in table and k not in probed]
        if not step:
            break
        probed += step
        extra -= len(step)
    return probed


def evaluate_grid(
    table: Table, design: str, predictor: str, per_step: bool = False
) -> dict[str, object]:
    """Probe ``design`` on ``table`` (``+adapt``: then up to a tenth of the grid more where
    the choice is in doubt), predict the rest with ``predictor``, score it."""
    bs, ks = axes(table)
    base, _, adaptive = design.partition("+")
    probed = [k for k in DESIGNS[base](bs, ks) if k in table]
    if adaptive:
        probed = adapt(table, probed, max(2, len(table) // 5), per_step)
    rows = _rows(table, probed)
    vals, details = PREDICTORS[predictor](rows, bs, ks)
    for k in probed:  # measured points are known exactly
        for q in QUANTITIES:
            vals[q][k] = table[k][q]
    todo = [k for k in sorted(table) if k not in set(probed)]
    out: dict[str, object] = {"probes": len(probed), "grid": len(table), **details}
    for q, short in (("time_per_batch_s", "time"), ("peak_power_w", "power")):
        errs = [abs(vals[q][k] / table[k][q] - 1.0) for k in todo]
        out[f"{short}_mean"] = statistics.mean(errs) if errs else 0.0
        out[f"{short}_max"] = max(errs) if errs else 0.0
    truth = _profile(
        {q: {k: v[q] for k, v in table.items()} for q in QUANTITIES}, sorted(table), "t"
    )
    guess = _profile(vals, sorted(table), "p")
    # Why a choice is off (the same choices, two things changed): selection held to the
    # prediction itself (no bound: what the bound costs, and what it saves in picks over the
    # budget), and selection knowing every point's true power (only predicted time left: what
    # a mis-ranking time model costs).
    no_margin = _profile({**vals, "peak_power_bound_w": {}}, sorted(table), "p")
    true_power = {k: v["peak_power_w"] for k, v in table.items()}
    exact = _profile(
        {**vals, "peak_power_w": true_power, "peak_power_bound_w": {}}, sorted(table), "p"
    )
    scored: dict[str, tuple[list[float], int]] = {}
    for label, prof in (("", guess), ("no_margin_", no_margin), ("exact_power_", exact)):
        scored[label] = _score(truth, prof, bs, per_step, table)
    regrets, over = scored[""]
    out["regrets"] = regrets
    out["over_budget"] = over
    for label in ("no_margin_", "exact_power_"):
        out[f"{label}regrets"], out[f"{label}over_budget"] = scored[label]
    out["verified_regrets"] = [
        _verified(table, vals, set(probed), eff, budget) / best - 1.0
        for eff, budget, best in _cases(truth, bs, per_step, table)
    ]
    return out


def _cases(truth: Profile, bs: list[int], per_step: bool, table: Table):
    """Every (efficiency, budget) the grid is scored at where the truth has a choice, with the
    true best time to accuracy there."""
    for eff in efficiencies(bs, per_step).values():
        for budget in budgets(table):
            try:
                best = select(truth, eff, budget)
            except InfeasibleError:
                continue
            yield eff, budget, best.predicted_time_s


def _score(
    truth: Profile, guess: Profile, bs: list[int], per_step: bool, table: Table
) -> tuple[list[float], int]:
    """Choosing with ``guess`` at every case of :func:`_cases`: the regrets (time to accuracy of
    the choice in truth over the true best, minus one; inf where ``guess`` finds nothing) and
    how many choices are over the budget in truth."""
    regrets, over = [], 0
    for eff, budget, best in _cases(truth, bs, per_step, table):
        try:
            got = select(guess, eff, budget)
        except InfeasibleError:
            regrets.append(math.inf)
            continue
        p = truth.point(got.batch_size, got.freq_mhz)
        if p.peak_power_w > budget + 1e-9:
            over += 1
        tta = p.time_per_batch_s / p.batch_size * eff.reached[p.batch_size]
        regrets.append(tta / best - 1.0)
    return regrets, over


def _verified(table: Table, vals: dict, probed: set, eff: Efficiency, budget: float) -> float:
    """Time to accuracy of the choice after the device's verify-before-trust
    (``fleet.trust.verify.select_verified``), the true table answering its probes."""
    rows = []
    for k in sorted(table):
        row = {"batch_size": k[0], "freq_mhz": k[1]}
        row.update({q: vals[q][k] for q in QUANTITIES})
        row["source"] = "measured" if k in probed else "predicted"
        if k in vals.get("peak_power_bound_w", {}) and k not in probed:
            row["peak_power_bound_w"] = vals["peak_power_bound_w"][k]
        rows.append(row)

    def measure(b: int, f: float) -> dict:
        return {"batch_size": b, "freq_mhz": f, **table[(b, f)]}

    got = select_verified(rows, eff, budget, measure, max_probes=20)
    p = table[(got.choice.batch_size, got.choice.freq_mhz)]
    return p["time_per_batch_s"] / got.choice.batch_size * eff.reached[got.choice.batch_size]
