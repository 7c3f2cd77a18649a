"""The paper's comparison: B1, B2, ours (time and energy objectives) and the oracle, per budget.

Every method chooses with what it would know in practice (B1: nothing but memory; B2 and ours:
the proxy efficiency; the oracle: the target's true efficiency) and every choice is then costed
with the same truth, so the speed-ups compare like with like. Without a truth file the proxy is
the truth and the oracle equals ours by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.efficiency import Efficiency
from fleet.errors import InfeasibleError
from fleet.profile import Profile
from fleet.selection import (
    Choice,
    SelectionIndex,
    baseline_b1,
    baseline_b2,
    evaluate,
    safe_frequency_cap,
)

METHODS = ("b1", "b2", "ours", "ours-energy", "oracle")


@dataclass(frozen=True)
class Row:
    budget_w: float | None
    method: str
    cap_mhz: float | None
    choice: Choice | None  # costed with the truth; None when infeasible
    status: str  # "ok" or "infeasible: ..."

    def to_dict(self, b1: Row | None, b2: Row | None, oracle: Row | None) -> dict[str, object]:
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
        d["speedup_vs_b1"] = _ratio(b1, self)
        d["speedup_vs_b2"] = _ratio(b2, self)
        gap = _ratio(self, oracle)
        d["gap_to_oracle_pct"] = None if gap is None else (gap - 1.0) * 100.0
        return d


def _ratio(num: Row | None, den: Row | None) -> float | None:
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
                cap = safe_frequency_cap(cap_profiles or [profile], budget)
        except InfeasibleError as exc:
            cap, cap_err = None, str(exc)
        else:
            cap_err = ""
        for method in METHODS:
            if method in ("b1", "b2") and cap is None:
                rows[method] = Row(budget, method, None, None, f"infeasible: {cap_err}")
                continue
            try:
                choice = evaluate(choose(method, index, proxy, truth, budget, cap), truth)
            except InfeasibleError as exc:
                rows[method] = Row(budget, method, None, None, f"infeasible: {exc}")
                continue
            status = "ok" if math.isfinite(choice.predicted_time_s) else "target not reached"
            row_cap = cap if method in ("b1", "b2") else None
            rows[method] = Row(budget, method, row_cap, choice, status)
        for method in METHODS:
            out.append(rows[method].to_dict(rows["b1"], rows["b2"], rows["oracle"]))
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
    if method == "b1":
        return baseline_b1(index.profile, proxy, budget, cap)
    if method == "b2":
        return baseline_b2(index.profile, proxy, budget, cap)
    if method == "ours":
        return index.select(proxy, budget, "time", "ours")
    if method == "ours-energy":
        return index.select(proxy, budget, "energy", "ours-energy")
    return index.select(truth, budget, "time", "oracle")
