"""The budget codec: one vocabulary for a power budget on every surface.

A budget arrives as CLI text (``--budget-w``, ``--budget-schedule``), a fleet TOML value, a
SuperNode's node-config string or a live budget file's line, and leaves as wire text. All of
them read and write through this module so that "7", 7.0 and "7.0" are the same budget, the
words none / unlimited / inf mean "no limit" everywhere, and a value round-trips exactly
(``format_budget(parse_budget(x))``). The accepted values: a positive finite number of watts,
or one of ``NO_BUDGET_WORDS`` (any case) for "no limit", which is ``None`` in Python and the
word "none" on the wire. Positive infinity means no limit too. Nothing else is a budget: zero,
negatives, NaN, booleans and empty strings are refused with one line naming the field.
A *schedule* is the same vocabulary over time: ``BudgetStep``s, first at 0 s.
See docs/architecture.md, "Data contracts".
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fleet.common.errors import InputError

UNLIMITED = math.inf  # a missing budget as a limit to compare peaks with


@dataclass(frozen=True)
class BudgetStep:
    at_s: float  # seconds of training after which this budget applies
    budget_w: float | None  # None: unlimited


NO_BUDGET = "none"  # the wire / node-config form of "no budget"


NO_BUDGET_WORDS = ("none", "unlimited", "inf")


def check_budget(where: str, value: float | None) -> float | None:
    """The one place a budget is validated: None, or a finite number of watts > 0."""
    if value is None:
        return None
    if math.isinf(value) and value > 0:
        return None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: budget must be > 0 W (or 'none'), got {value!r}")
    return float(value)


def budget_limit(budget_w: float | None, where: str = "budget_w") -> float:
    """A budget as a limit to compare peak powers with: validated (``check_budget``), and
    None (no limit) becomes +inf, so ``peak <= limit`` needs no special case."""
    checked = check_budget(where, budget_w)
    return UNLIMITED if checked is None else checked


def parse_budget(raw: object, where: str = "budget") -> float | None:
    """A budget from any surface: a number, a numeric string, or a no-budget word -> watts/None."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in NO_BUDGET_WORDS:
            return None
        try:
            value = float(text)
        except ValueError:
            raise InputError(
                f"{where}: expected watts (a number) or one of {', '.join(NO_BUDGET_WORDS)}, "
                f"got {raw!r}"
            ) from None
        return check_budget(where, value)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise InputError(
            f"{where}: expected watts (a number) or one of {', '.join(NO_BUDGET_WORDS)}, "
            f"got {raw!r}"
        )
    return check_budget(where, float(raw))


def format_number(value: float) -> str:
    """The shortest text that reads back as exactly ``value`` (``repr``; 7.0 -> "7")."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def format_budget(budget_w: float | None) -> str:
    """The exact inverse of ``parse_budget``: "none" or the shortest exact decimal."""
    return NO_BUDGET if budget_w is None else format_number(budget_w)


def parse_schedule(raw: object, where: str = "budget schedule") -> tuple[BudgetStep, ...]:
    """[[0, 7.0], [600, 4.5]] or "0:7,600:4.5" -> steps sorted by time, first at 0."""
    items: list[tuple[object, object]] = []
    if isinstance(raw, str):
        for part in raw.split(","):
            if ":" not in part:
                raise InputError(f"{where}: {part!r} is not SECONDS:WATTS")
            a, b = part.split(":", 1)
            items.append((a, b))
    elif isinstance(raw, list):
        for step in raw:
            if not isinstance(step, list) or len(step) != 2:
                raise InputError(f"{where}: each step must be [seconds, watts], got {step!r}")
            items.append((step[0], step[1]))
    else:
        raise InputError(f"{where}: expected a list of [seconds, watts] pairs")
    steps = []
    for at, w in items:
        try:
            if isinstance(at, bool) or not isinstance(at, (int, float, str)):
                raise TypeError
            at_s = float(at)
        except (TypeError, ValueError):
            raise InputError(f"{where}: time {at!r} is not a number of seconds") from None
        if at_s < 0 or not math.isfinite(at_s):
            raise InputError(f"{where}: time {at!r} must be >= 0 seconds")
        steps.append(BudgetStep(at_s, parse_budget(w, where)))
    steps.sort(key=lambda s: s.at_s)
    if not steps or steps[0].at_s != 0:
        raise InputError(f"{where}: the first step must start at 0 seconds")
    if len({s.at_s for s in steps}) != len(steps):
        raise InputError(f"{where}: two steps start at the same time")
    return tuple(steps)


def step_index(schedule: Sequence[BudgetStep], clock_s: float) -> int:
    """The budget step in force at ``clock_s`` (the last one starting at or before it)."""
    return max(0, bisect.bisect_right([s.at_s for s in schedule], clock_s) - 1)


def format_schedule(steps: tuple[BudgetStep, ...]) -> str:
    """The exact inverse of ``parse_schedule`` for its string form (no digit is lost)."""
    return ",".join(f"{format_number(s.at_s)}:{format_budget(s.budget_w)}" for s in steps)


def read_budget(
    where: str, budget: object = None, schedule: object = None
) -> tuple[float | None, tuple[BudgetStep, ...]]:
    """The one reader of a device's budget, whatever the surface: (first budget, schedule).

    ``budget`` and ``schedule`` are the raw values as the surface gives them; ``None`` means
    the surface has no such field (no surface spells "no limit" as a null: that is a word).
    With a schedule, a budget given beside it must equal the schedule's first step; without
    one, the budget is required. The schedule is ``()`` for a fixed budget.
    """
    if schedule is not None and schedule != "":
        steps = parse_schedule(schedule, f"{where} budget schedule")
        if budget is not None and parse_budget(budget, f"{where} budget") != steps[0].budget_w:
            raise InputError(f"{where}: the budget disagrees with the schedule's first step")
        return steps[0].budget_w, steps
    if budget is None:
        raise InputError(f'{where}: missing budget (watts, or "none" for no limit)')
    return parse_budget(budget, f"{where} budget"), ()
