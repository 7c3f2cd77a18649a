"""Where the device's power budget comes from: a fixed value, a schedule, or a live file.

Why three: a board on a fixed supply has one budget; a planned run (a battery drained on a
timetable, a site that caps power at night) has a schedule of ``seconds: watts`` steps; and a
battery or solar controller (or an operator) changes it live by writing a number into a file.
The closed loop asks ``budget_at(t)`` about once per power sample and re-selects whenever the
answer changes (see ``docs/architecture.md``, closed loop).

A budget is watts (> 0, finite) or None for "unlimited" (written ``none``). A schedule is
``"0:7,600:4.5"``: from 0 s of training 7 W, from 600 s 4.5 W; times start at 0 and strictly
increase. A budget file holds one such value; it is re-read at most once a second, and a file
that holds garbage (or vanished, or is half-written) keeps the last good budget and warns once
until a good value comes back.

Python 3.6 compatible, stdlib only.
"""

import math
import os
import sys
import time
from typing import Callable, List, Optional, Tuple


class BudgetError(ValueError):
    """A budget, schedule or budget file that cannot be used; one line naming what is wrong."""


def parse_watts(text: str, where: str = "budget") -> Optional[float]:
    """'7', '4.5 W' -> watts; 'none'/'unlimited' -> None; anything else -> BudgetError."""
    raw = str(text).strip()
    low = raw.lower()
    if low in ("none", "unlimited", "inf"):
        return None
    if low.endswith("w"):
        low = low[:-1].strip()
    try:
        value = float(low)
    except ValueError:
        value = math.nan  # not a number: the same refusal as NaN or <= 0
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(
            "{}: {!r} is not a budget; expected watts > 0 or 'none'".format(where, raw)
        )
    return value


def parse_schedule(text: str) -> List[Tuple[float, Optional[float]]]:
    """'0:7,600:4.5' -> [(0.0, 7.0), (600.0, 4.5)]; times from 0, strictly increasing."""
    steps = []  # type: List[Tuple[float, Optional[float]]]
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise BudgetError("budget schedule {!r} is empty; expected e.g. '0:7,600:4.5'".format(text))
    for item in items:
        if ":" not in item:
            raise BudgetError(
                "budget schedule: {!r} is not SECONDS:WATTS (e.g. '0:7,600:4.5')".format(item)
            )
        t_raw, w_raw = item.split(":", 1)
        try:
            t = float(t_raw)
        except ValueError:
            raise BudgetError(
                "budget schedule: time {!r} in {!r} is not a number of seconds".format(t_raw, item)
            ) from None
        if not math.isfinite(t) or t < 0:
            raise BudgetError(
                "budget schedule: time {!r} in {!r} must be >= 0 seconds".format(t_raw, item)
            )
        if steps and t <= steps[-1][0]:
            raise BudgetError(
                "budget schedule: times must increase; {:g} s comes after {:g} s".format(
                    t, steps[-1][0]
                )
            )
        steps.append((t, parse_watts(w_raw, "budget schedule step {!r}".format(item))))
    if steps[0][0] != 0:
        raise BudgetError(
            "budget schedule must start at 0 s (first step is at {:g} s)".format(steps[0][0])
        )
    return steps


class BudgetSource(object):
    """``budget_at(t)``: the budget ``t`` seconds into the run; ``highest()``: its maximum."""

    kind = "fixed"

    def budget_at(self, t_s: float) -> Optional[float]:
        raise BudgetError("a budget source must define budget_at")

    def highest(self) -> Optional[float]:
        """The highest budget this source can give (None: unlimited or unknown)."""
        return self.budget_at(0.0)

    def describe(self) -> str:
        return self.kind


class FixedBudget(BudgetSource):
    kind = "fixed"

    def __init__(self, watts: Optional[float]) -> None:
        self.watts = watts

    def budget_at(self, t_s: float) -> Optional[float]:
        return self.watts

    def describe(self) -> str:
        return "fixed {}".format(_label(self.watts))


class ScheduleBudget(BudgetSource):
    kind = "schedule"

    def __init__(self, steps: List[Tuple[float, Optional[float]]]) -> None:
        if not steps:
            raise BudgetError("budget schedule is empty")
        self.steps = list(steps)

    def budget_at(self, t_s: float) -> Optional[float]:
        current = self.steps[0][1]
        for t, w in self.steps:
            if t <= t_s:
                current = w
            else:
                break
        return current

    def highest(self) -> Optional[float]:
        ws = [w for _, w in self.steps]
        known = [w for w in ws if w is not None]
        return None if len(known) < len(ws) else max(known)

    def describe(self) -> str:
        return "schedule " + ",".join("{:g}:{}".format(t, _label(w)) for t, w in self.steps)


class FileBudget(BudgetSource):
    """A file holding one budget, re-read at most every ``reread_s`` seconds (wall clock)."""

    kind = "file"

    def __init__(
        self,
        path: str,
        reread_s: float = 1.0,
        warn: Optional[Callable[[str], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reread_s = float(reread_s)
        self._warn = warn or _stderr_warn
        self._clock = clock
        self.warnings = []  # type: List[str]
        self._warned = False
        try:
            self._value = self._read()
        except BudgetError as exc:
            raise BudgetError("budget file {}: {}".format(path, exc)) from None
        self._read_at = clock()

    def _read(self) -> Optional[float]:
        try:
            with open(self.path, "r") as fh:
                text = fh.read(256)
        except OSError as exc:
            raise BudgetError("cannot read it ({})".format(exc.strerror or exc)) from None
        return parse_watts(text.strip().splitlines()[0] if text.strip() else "", "value")

    def budget_at(self, t_s: float) -> Optional[float]:
        now = self._clock()
        if now - self._read_at < self.reread_s:
            return self._value
        self._read_at = now
        try:
            self._value = self._read()
            self._warned = False
        except BudgetError as exc:
            if not self._warned:
                msg = "budget file {}: {}; keeping {}".format(self.path, exc, _label(self._value))
                self.warnings.append(msg)
                self._warn(msg)
                self._warned = True
        return self._value

    def highest(self) -> Optional[float]:
        return None  # a live file can go anywhere

    def describe(self) -> str:
        return "file {}".format(self.path)


def _label(watts: Optional[float]) -> str:
    return "unlimited" if watts is None else "{:g} W".format(watts)


def _stderr_warn(message: str) -> None:
    sys.stderr.write("powerfleet: warning: {}\n".format(message))


def make_source(
    budget_w: Optional[str] = None,
    schedule: Optional[str] = None,
    budget_file: Optional[str] = None,
    warn: Optional[Callable[[str], None]] = None,
) -> BudgetSource:
    """Exactly one of the three, as given on a command line or in a request."""
    given = [x for x in (budget_w, schedule, budget_file) if x is not None]
    if len(given) != 1:
        raise BudgetError(
            "give exactly one of a budget (watts), a budget schedule or a budget file "
            "({} given)".format(len(given))
        )
    if budget_w is not None:
        return FixedBudget(parse_watts(str(budget_w)))
    if schedule is not None:
        return ScheduleBudget(parse_schedule(str(schedule)))
    path = str(budget_file)
    if not os.path.isfile(path):
        raise BudgetError("budget file {} not found".format(path))
    return FileBudget(path, warn=warn)
