"""The paper's comparison: the baselines, ours (every objective) and the oracle, per budget.

Every method chooses with what it would know in practice (a baseline: its own rule at the safe
cap; ours: the proxy efficiency; the oracle: the target's true efficiency) and every choice is
then costed with the same truth, so the speed-ups compare like with like. Without a truth file
the proxy is the truth and the oracle equals ours by construction.

The methods come from the registries (``fleet.core.baselines.BASELINES``,
``fleet.core.objectives.OBJECTIVES``): a baseline adds a row and a ``speedup_vs_<name>`` column, an
objective without parameters adds an "ours-<name>" row ("ours" for ``time``). Nothing here
names a particular baseline or objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.common.errors import InfeasibleError
from fleet.core.baselines import BASELINES, run_baseline, speedup_column
from fleet.core.choice import Choice, evaluate
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import OBJECTIVES
from fleet.core.profile import Profile
from fleet.core.selection import SelectionIndex, safe_frequency_cap

ORACLE = "oracle"


def ours_method(objective: str) -> str:
    return "ours" if objective == "time" else f"ours-{objective}"


def methods() -> list[str]:
    """Every method compared, in report order: baselines, ours per objective, the oracle."""
    ours = [ours_method(o) for o, obj in OBJECTIVES.items() if not obj.context]
    return [*BASELINES, *ours, ORACLE]


@dataclass(frozen=True)
class Row:
    budget_w: float | None
    method: str
    cap_mhz: float | None
    choice: Choice | None  # costed with the truth; None when infeasible
    status: str  # "ok" or "infeasible: ..."

    def to_dict(self, rows: dict[str, Row]) -> dict[str, object]:
        d: dict[str, object] = {"budget_w": self.budget_w, "method": self.method}
        d["cap_mhz"] = self.cap_mhz
        d["status"] = self.status
        c = self.choice
        for k in (
            "batch_size",
            "freq_mhz",
            "peak_power_w",
            "mean_power_w",
            "predicted_time_s",
            "predicted_energy_j",
        ):
            v = getattr(c, k) if c else None
            d[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        for name in BASELINES:
            d[speedup_column(name)] = ratio(rows.get(name), self)
        gap = ratio(self, rows.get(ORACLE))
        d["gap_to_oracle_pct"] = None if gap is None else (gap - 1.0) * 100.0
        return d


def ratio(num: Row | None, den: Row | None) -> float | None:
    if not num or not den or not num.choice or not den.choice:
        return None
    a, b = num.choice.predicted_time_s, den.choice.predicted_time_s
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return a / b


def compare(
    profile: Profile,
    proxy: Efficiency,
    budgets: list[float | None],
    truth: Efficiency | None = None,
    caps: dict[float | None, float] | None = None,
    cap_profiles: list[Profile] | None = None,
) -> list[dict[str, object]]:
    """One row per (budget, method), costed with ``truth`` (the proxy when not given).

    ``caps`` fixes the baselines' frequency cap per budget (the paper's 307/614/921 MHz);
    otherwise it is the highest clock safe for every point of ``cap_profiles`` (default: this
    profile alone).
    """
    truth = truth or proxy
    index = SelectionIndex(profile)
    out: list[dict[str, object]] = []
    for budget in budgets:
        rows: dict[str, Row] = {}
        try:
            cap = (caps or {}).get(budget)
            if cap is None:
                cap = (
                    safe_frequency_cap(cap_profiles, budget)
                    if cap_profiles
                    else index.safe_cap(budget)
                )
        except InfeasibleError as exc:
            cap, cap_err = None, str(exc)
        else:
            cap_err = ""
        for method in methods():
            if method in BASELINES and cap is None:
                rows[method] = Row(budget, method, None, None, f"infeasible: {cap_err}")
                continue
            try:
                choice = evaluate(choose(method, index, proxy, truth, budget, cap), truth)
            except InfeasibleError as exc:
                rows[method] = Row(budget, method, None, None, f"infeasible: {exc}")
                continue
            status = "ok" if math.isfinite(choice.predicted_time_s) else "target not reached"
            row_cap = cap if method in BASELINES else None
            rows[method] = Row(budget, method, row_cap, choice, status)
        out.extend(row.to_dict(rows) for row in rows.values())
    return out


def choose(
    method: str,
    index: SelectionIndex,
    proxy: Efficiency,
    truth: Efficiency,
    budget: float | None,
    cap: float | None,
) -> Choice:
    """What each method picks, knowing only what it would know in practice."""
    if method in BASELINES:
        if cap is None:
            raise InfeasibleError("no clock cap is safe for every model under this budget")
        return run_baseline(method, index.profile, proxy, budget, cap)
    if method == ORACLE:
        return index.select(truth, budget, "time", ORACLE)
    for objective in OBJECTIVES:
        if ours_method(objective) == method:
            return index.select(proxy, budget, objective, method)
    raise InfeasibleError(f"unknown method {method!r}; expected one of {', '.join(methods())}")
