"""The one budget grammar: a power budget on every surface, parsed here and nowhere else.

A budget reaches a device as ``--budget-w`` / ``--budget-schedule`` text (``select``, ``train``,
``predict``...), a fleet TOML value, a SuperNode's node-config string, the agent's ``train``
request or a live budget file's line. Every one of them is read by this module, so the same
text means the same budget everywhere and every refusal is the same one line (the field's name,
then what is wrong and what was expected). The grammar:

- **Watts**: a positive finite decimal number of at most ``MAX_WATTS`` (``7``, ``4.5``,
  ``1e1``), optionally followed by the unit, ``W`` or ``w``, with or without a space
  (``4.5 W``: people write it, and refusing it on one surface while accepting it on another
  was the bug this module ends). Surrounding spaces are ignored. Zero, negatives, ``nan``, a
  decimal comma (``7,5``), an empty string and anything else are refused. From TOML or JSON a
  number is taken as it is (a boolean is not a number).
- **No limit**: ``none``, ``unlimited``, ``inf`` or ``infinity`` (any case) is ``None``; so is a
  TOML/JSON number of +infinity. The exact text form of ``None`` is ``none``.
- **Schedule**: ``SECONDS:WATTS`` steps separated by commas, ``"0:7,600:4.5"`` (from 0 s of
  training 7 W, from 600 s 4.5 W); from TOML/JSON also ``[[0, 7], [600, 4.5]]``. Each step's
  watts follow the grammar above (``0:none`` is allowed). The first step starts at 0 and times
  strictly increase: an unsorted schedule (``600:4.5,0:7``) or a repeated time (``0:7,0:5``) is
  refused, not sorted, because a typo in a timetable should be seen, not silently re-ordered.
- **Live file**: a file whose first line is a budget in the watts grammar, re-read at most once
  a second (``FileBudget``); garbage (text that is no budget, bytes that are not UTF-8, a file
  over 256 bytes) keeps the last good budget and warns once, and is refused at the start.

Text forms are exact: ``format_budget`` / ``format_schedule`` write the shortest text that reads
back as the very same float (a 4.4999996 W budget written as "4.5" would let a device run over
it), and ``format(parse(x)) == x`` for text already in that form. A budget crosses a process
boundary as this text (or a JSON number) and is parsed once on arrival (docs/architecture.md,
"How a budget travels").

Python 3.6 compatible, stdlib only.
"""

import bisect
import math
import os
import re
import sys
import time
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from fleet.method.errors import InputError

NO_BUDGET = "none"  # the exact text form of "no limit"
NO_BUDGET_WORDS = ("none", "unlimited", "inf", "infinity")
UNLIMITED = math.inf  # a missing budget as a limit to compare peaks with
#: The largest budget (and power) anything carries: 100 kW. Why a bound: a budget of 1e300 W
#: was taken by the fleet file and refused only later by a record crossing a process boundary,
#: naming a state file; a value this large is a slip (milliwatts typed as watts, a stray
#: exponent), and "no limit" has its own words.
MAX_WATTS = 1e5
#: The latest a schedule's step may start: ten years of training (the records' bound on device
#: time). A step at 1e300 s was taken; it can never come, so it is a slip, not a plan.
MAX_STEP_S = 10 * 365 * 86400.0
EXPECTED_WATTS = "expected watts > 0 (e.g. 7, 4.5 or 4.5 W) or none/unlimited/inf"
EXAMPLE_SCHEDULE = "e.g. 0:7,600:4.5"
_NUMBER = re.compile(r"^\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
FIELDS = ("budget_w", "budget_schedule", "budget_file")  # the agent's and the fleet file's names
BUDGET_FILE_MAX_BYTES = 256  # a live budget file's whole size: one budget, a newline, some room


class BudgetError(InputError):
    """A budget, schedule or budget file that cannot be used; one line naming the field."""


class BudgetStep(NamedTuple):
    """One step of a schedule: from ``at_s`` seconds of training, ``budget_w`` (None: no limit)."""

    at_s: float
    budget_w: Optional[float]


def _show(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(text: str) -> float:
    """A decimal number as the grammar spells it, else NaN (refused by every caller)."""
    if not _NUMBER.match(text):
        return math.nan
    try:
        return float(text)
    except (ValueError, OverflowError):
        return math.nan


def parse_budget(raw: Any, where: str = "budget") -> Optional[float]:
    """Watts from text (``'7'``, ``' 4.5 W '``) or a number; a no-limit word -> None."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in NO_BUDGET_WORDS:
            return None
        if text[-1:] in ("W", "w"):
            text = text[:-1].rstrip()
        value = _number(text)
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:
            value = math.nan
        if math.isinf(value) and value > 0:
            return None
    else:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise BudgetError("{}: {} is not a budget; {}".format(where, _show(raw), EXPECTED_WATTS))
    if value > MAX_WATTS:
        raise BudgetError(
            "{}: {} is above the largest budget ({:g} W); for no limit write none".format(
                where, _show(raw), MAX_WATTS
            )
        )
    return value


def check_budget(where: str, value: Optional[float]) -> Optional[float]:
    """A budget already in Python (None or a number) validated by the same grammar."""
    return None if value is None else parse_budget(value, where)


def budget_limit(budget_w: Optional[float], where: str = "budget_w") -> float:
    """A budget as a limit to compare peak powers with: validated, and None (no limit) becomes
    +inf, so ``peak <= limit`` needs no special case."""
    checked = check_budget(where, budget_w)
    return UNLIMITED if checked is None else checked


def format_number(value: float) -> str:
    """The shortest text that reads back as exactly ``value`` (``repr``; 7.0 -> "7")."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def format_budget(budget_w: Optional[float]) -> str:
    """The exact inverse of ``parse_budget``: "none" or the shortest exact decimal."""
    return NO_BUDGET if budget_w is None else format_number(budget_w)


def _seconds(raw: Any, where: str) -> float:
    if isinstance(raw, str):
        value = _number(raw.strip())
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    else:
        value = math.nan
    if not math.isfinite(value):
        raise BudgetError(
            "{}: time {} is not a number of seconds >= 0 ({})".format(
                where, _show(raw), EXAMPLE_SCHEDULE
            )
        )
    if value > MAX_STEP_S:
        raise BudgetError(
            "{}: time {} s is after ten years of training ({:g} s), the latest a step may "
            "start".format(where, _show(raw), MAX_STEP_S)
        )
    return value


def _pairs(raw: Any, where: str) -> List[Tuple[Any, Any]]:
    """A schedule's (time, watts) items as written, before either is read."""
    pairs = []  # type: List[Tuple[Any, Any]]
    if isinstance(raw, str):
        if not raw.strip():
            raise BudgetError(
                "{}: empty schedule; expected SECONDS:WATTS steps ({})".format(
                    where, EXAMPLE_SCHEDULE
                )
            )
        for item in raw.split(","):
            if ":" not in item:
                raise BudgetError(
                    "{}: {} is not SECONDS:WATTS ({})".format(
                        where, _show(item.strip()), EXAMPLE_SCHEDULE
                    )
                )
            at, watts = item.split(":", 1)
            pairs.append((at, watts))
    elif isinstance(raw, (list, tuple)):
        for step in raw:
            if not isinstance(step, (list, tuple)) or len(step) != 2:
                raise BudgetError(
                    "{}: each step must be [seconds, watts], got {}".format(where, _show(step))
                )
            pairs.append((step[0], step[1]))
        if not pairs:
            raise BudgetError("{}: empty schedule; expected [[0, watts], ...]".format(where))
    else:
        raise BudgetError(
            "{}: expected SECONDS:WATTS steps ({}), got {}".format(
                where, EXAMPLE_SCHEDULE, _show(raw)
            )
        )
    return pairs


def parse_schedule(raw: Any, where: str = "budget schedule") -> Tuple[BudgetStep, ...]:
    """``"0:7,600:4.5"`` or ``[[0, 7], [600, 4.5]]`` -> steps; first at 0, times increasing."""
    steps = []  # type: List[BudgetStep]
    for n, (at_raw, w_raw) in enumerate(_pairs(raw, where), 1):
        at = _seconds(at_raw, where)
        if not steps and at != 0:
            raise BudgetError(
                "{}: the first step must start at 0 s, not {} s ({})".format(
                    where, format_number(at), EXAMPLE_SCHEDULE
                )
            )
        if steps and at <= steps[-1].at_s:
            raise BudgetError(
                "{}: times must strictly increase, but {} s follows {} s ({})".format(
                    where, format_number(at), format_number(steps[-1].at_s), EXAMPLE_SCHEDULE
                )
            )
        steps.append(BudgetStep(at, parse_budget(w_raw, "{} step {}".format(where, n))))
    return tuple(steps)


def format_schedule(steps: Sequence[BudgetStep]) -> str:
    """The exact inverse of ``parse_schedule`` for its text form (no digit is lost)."""
    return ",".join("{}:{}".format(format_number(at), format_budget(w)) for at, w in steps)


def step_index(schedule: Sequence[BudgetStep], clock_s: float) -> int:
    """The budget step in force at ``clock_s`` (the last one starting at or before it)."""
    return max(0, bisect.bisect_right([s[0] for s in schedule], clock_s) - 1)


def read_budget(
    where: str,
    budget: Any = None,
    schedule: Any = None,
    names: Tuple[str, str] = ("budget_w", "budget_schedule"),
) -> Tuple[Optional[float], Tuple[BudgetStep, ...]]:
    """A device's budget from a settings table (fleet file, node config): (first, schedule).

    ``budget`` and ``schedule`` are the raw values as the surface gives them (None: the field
    is absent; "no limit" is a word, never a null); ``names`` are the surface's field names.
    With a schedule, a budget beside it must equal the schedule's first step; without one, the
    budget is required. The schedule is ``()`` for a fixed budget.
    """
    if schedule is not None:
        steps = parse_schedule(schedule, "{}: {}".format(where, names[1]))
        if budget is not None:
            first = parse_budget(budget, "{}: {}".format(where, names[0]))
            if first != steps[0].budget_w:
                raise BudgetError(
                    "{}: {} {} disagrees with {}'s first step {}".format(
                        where, names[0], format_budget(first), names[1],
                        format_budget(steps[0].budget_w),
                    )
                )  # fmt: skip
        return steps[0].budget_w, steps
    if budget is None:
        raise BudgetError(
            '{}: missing field {!r} (watts, or "none" for no limit)'.format(where, names[0])
        )
    return parse_budget(budget, "{}: {}".format(where, names[0])), ()


# ---------------------------------------------------------------------------- the live file


def parse_budget_line(text: str, where: str = "budget file") -> Optional[float]:
    """A live budget file's contents: its first line, in the watts grammar."""
    stripped = text.strip()
    return parse_budget(stripped.splitlines()[0] if stripped else "", where)


def read_budget_file(path: str) -> Optional[float]:
    """The budget a live file holds now; BudgetError (naming the file) when it holds none.

    Read as bytes, at most ``BUDGET_FILE_MAX_BYTES`` + 1 of them: the loop re-reads it every
    second, so the read stays bounded, and a longer file is refused whole, never cut at the
    limit (``0...090e-1``, 9 W padded past it, once read as 90 W). Bytes that are not UTF-8
    are refused in one line too, never a UnicodeDecodeError out of the closed loop.
    """
    where = "budget file {}".format(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(BUDGET_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise BudgetError("{}: cannot read it ({})".format(where, exc.strerror or exc)) from None
    if len(data) > BUDGET_FILE_MAX_BYTES:
        raise BudgetError(
            "{}: longer than {} bytes; a budget file holds one budget (e.g. 4.5)".format(
                where, BUDGET_FILE_MAX_BYTES
            )
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BudgetError(
            "{}: not a UTF-8 text file; a budget file holds one budget (e.g. 4.5)".format(where)
        ) from None
    return parse_budget_line(text, where)


# ---------------------------------------------------------------------------- sources


class BudgetSource(object):
    """``budget_at(t)``: the budget ``t`` seconds into the run; ``highest()``: its maximum.

    Why three sources: a board on a fixed supply has one budget; a planned run (a battery drained
    on a timetable, a site that caps power at night) has a schedule; a battery or solar
    controller (or an operator) changes it live by writing into a file. The closed loop asks
    ``budget_at(t)`` about once per power sample and re-selects whenever the answer changes.
    """

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

    def __init__(self, steps: Sequence[BudgetStep]) -> None:
        if not steps:
            raise BudgetError("budget schedule is empty")
        self.steps = [BudgetStep(float(t), w) for t, w in steps]

    def budget_at(self, t_s: float) -> Optional[float]:
        return self.steps[step_index(self.steps, t_s)].budget_w

    def highest(self) -> Optional[float]:
        ws = [s.budget_w for s in self.steps]
        return None if any(w is None for w in ws) else max(ws)  # type: ignore

    def describe(self) -> str:
        return "schedule " + ",".join("{:g}:{}".format(t, _label(w)) for t, w in self.steps)


class FileBudget(BudgetSource):
    """A file holding one budget, re-read at most every ``reread_s`` seconds (wall clock).

    A file that holds garbage (or vanished, or is half-written) keeps the last good budget and
    warns once until a good value comes back.
    """

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
        self._value = read_budget_file(path)
        self._read_at = clock()

    def budget_at(self, t_s: float) -> Optional[float]:
        now = self._clock()
        if now - self._read_at < self.reread_s:
            return self._value
        self._read_at = now
        try:
            self._value = read_budget_file(self.path)
            self._warned = False
        except BudgetError as exc:
            if not self._warned:
                msg = "{}; keeping {}".format(exc, _label(self._value))
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
    budget_w: Any = None,
    schedule: Any = None,
    budget_file: Optional[str] = None,
    warn: Optional[Callable[[str], None]] = None,
    names: Tuple[str, str, str] = FIELDS,
) -> BudgetSource:
    """Exactly one of the three, as given on a command line (``names``: its flags) or in the
    agent's request; each parsed by the grammar above, errors naming the field."""
    given = [x for x in (budget_w, schedule, budget_file) if x is not None]
    if len(given) != 1:
        raise BudgetError(
            "give exactly one of {}, {} or {} ({} given)".format(
                names[0], names[1], names[2], len(given)
            )
        )
    if budget_w is not None:
        return FixedBudget(parse_budget(budget_w, names[0]))
    if schedule is not None:
        return ScheduleBudget(parse_schedule(schedule, names[1]))
    path = str(budget_file)
    if not os.path.isfile(path):
        raise BudgetError("{}: {} not found".format(names[2], path))
    return FileBudget(path, warn=warn)
