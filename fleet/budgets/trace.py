"""Budgets that follow the power available: a trace (solar panel, battery limit) -> a schedule.

A device entry may name ``budget_trace = "file.csv"`` with columns ``time_s`` and
``available_w`` (``#`` comment lines allowed). The trace becomes the device's budget schedule
(``fleet.method.budget.BudgetStep``; seconds into training, the trace's first row is second 0),
under two rules (docs/architecture.md, budgets):

- **Never above what is available.** Between two readings the power is taken as the lower of
  the two (a reading holds until the next, or the power moves linearly in between: either way
  the lower end is safe), and when the available power falls the budget falls at once.
- **No flapping.** A budget level is held at least ``dwell_s`` before it may rise, and it rises
  only to a level that has been available for the whole last ``dwell_s`` seconds (the minimum
  over that window). Every re-selection re-locks the GPU clock; a cloud passing over a panel
  should not do that every few seconds. Only drops may come sooner than the dwell, because a
  drop protects the budget.

Where nothing is available (0 W: night, an empty battery), the budget is ``NO_POWER_W``: below
any profiled point, so the device pauses (``fleet.rounds.virtual_clock``) instead of running on
power it does not have.
"""

from __future__ import annotations

import csv
import heapq
import math
from collections.abc import Sequence
from pathlib import Path

from fleet.common.errors import InputError
from fleet.method.budget import BudgetStep

DEFAULT_DWELL_S = 60.0
NO_POWER_W = 1e-3  # a positive budget below every real operating point: the device pauses
COLUMNS = ("time_s", "available_w")


def load_trace(path: str | Path) -> list[tuple[float, float]]:
    """Read (time_s, available_w) rows; one InputError naming file, line and field otherwise.

    Every caller (a fleet file's ``budget_trace``, ``train --budget-trace``, ``budget-feed``)
    reads through here, so a file that is not a trace is refused here, once: not UTF-8 text, a
    header naming a column twice (which one is meant?), a row with more or fewer cells than the
    header (a stray comma would shift a reading into the wrong column).
    """
    path = str(path)
    what = f"a power trace CSV: {', '.join(COLUMNS)}"
    text: str | None
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")  # -sig: a spreadsheet's BOM is fine
    except FileNotFoundError:
        raise InputError(f"{path}: budget trace not found") from None
    except UnicodeDecodeError:
        text = None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the budget trace ({exc.strerror or exc})") from None
    if text is None or "\0" in text:  # NUL is valid UTF-8, but no text has one (UTF-16 does)
        raise InputError(f"{path}: not a UTF-8 text file ({what})")
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    lines = [(n, ln) for n, ln in lines if not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{path}: empty budget trace; expected columns {', '.join(COLUMNS)}")
    header_line, header = lines[0][0], [h.strip() for h in next(csv.reader([lines[0][1]]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}"
        )
    twice = [h for i, h in enumerate(header) if h and h in header[:i]]
    if twice:
        raise InputError(
            f"{path}: line {header_line}: column {twice[0]!r} appears twice in the header; "
            f"expected each column once ({', '.join(COLUMNS)})"
        )
    ti, wi = header.index("time_s"), header.index("available_w")
    rows: list[tuple[float, float]] = []
    for n, ln in lines[1:]:
        cells = next(csv.reader([ln]))
        if len(cells) != len(header):
            raise InputError(
                f"{path}: line {n}: {len(cells)} cell(s), the header (line {header_line}) has "
                f"{len(header)}; expected one value per column"
            )
        vals = []
        for col, i in (("time_s", ti), ("available_w", wi)):
            raw = cells[i].strip()
            number = raw[:-1].rstrip() if col == "available_w" and raw[-1:] in ("W", "w") else raw
            try:  # watts as every budget is written ("4.5 W" too); 0 W is a reading here
                v = float(number)
            except ValueError:
                raise InputError(f"{path}: line {n}: {col}={raw!r} is not a number") from None
            if not math.isfinite(v) or v < 0:
                raise InputError(f"{path}: line {n}: {col}={raw!r} must be a finite number >= 0")
            vals.append(v)
        if rows and vals[0] <= rows[-1][0]:
            raise InputError(f"{path}: line {n}: time_s={vals[0]:g} is not after the row before")
        rows.append((vals[0], vals[1]))
    if not rows:
        raise InputError(f"{path}: no readings below the header")
    return rows


def trace_to_schedule(
    readings: Sequence[tuple[float, float]],
    dwell_s: float = DEFAULT_DWELL_S,
    start_s: float | None = None,
    names: tuple[str, str] = ("budget_dwell_s", "budget_trace_start_s"),
) -> tuple[BudgetStep, ...]:
    """The budget schedule for a power trace (rules in the module docstring). Pure.

    ``readings`` are (time_s, available_w) with increasing times; training starts at trace
    time ``start_s`` (default: the first reading), which becomes second 0 of the schedule; the
    last level holds after the trace ends. ``names``: what the caller calls the dwell and the
    start (the fleet file's keys; a command's flags), so a refusal names what was typed.
    """
    if not readings:
        raise InputError("budget trace: no readings")
    if not math.isfinite(dwell_s) or dwell_s < 0:
        raise InputError(f"{names[0]}: expected seconds >= 0, got {dwell_s}")
    if start_s is not None:
        if not readings[0][0] <= start_s <= readings[-1][0]:
            raise InputError(
                f"{names[1]}: {start_s:g} is outside the trace "
                f"({readings[0][0]:g} to {readings[-1][0]:g} s)"
            )
        k = max(i for i, (t, _) in enumerate(readings) if t <= start_s)
        if readings[k][0] < start_s:  # the reading in force at the start, conservatively
            nxt = readings[k + 1][1] if k + 1 < len(readings) else readings[k][1]
            readings = [(start_s, min(readings[k][1], nxt)), *readings[k + 1 :]]
        else:
            readings = list(readings[k:])
    t0 = readings[0][0]
    starts = [t - t0 for t, _ in readings]
    # conservative level on [start_i, start_i+1): the lower end of the interval
    levels = [min(readings[i][1], readings[i + 1][1]) for i in range(len(readings) - 1)]
    levels.append(readings[-1][1])

    def window_min(i: int, t: float) -> float:
        """Lowest availability on [t - dwell, t], with interval i the one holding t."""
        lo = levels[i]
        j = i - 1
        while j >= 0 and starts[j + 1] > t - dwell_s:
            lo = min(lo, levels[j])
            j -= 1
        return lo

    events = sorted(set(starts) | {s + dwell_s for s in starts})
    heapq.heapify(events)
    level, since = levels[0], 0.0
    out = [(0.0, level)]
    i = 0
    while events:
        t = heapq.heappop(events)
        while events and events[0] == t:
            heapq.heappop(events)
        while i + 1 < len(starts) and starts[i + 1] <= t:
            i += 1
        avail = levels[i]
        if avail < level:  # a drop never waits
            level, since = avail, t
            out.append((t, level))
            heapq.heappush(events, t + dwell_s)
        elif avail > level and t - since >= dwell_s:
            up = window_min(i, t)
            if up > level:
                level, since = up, t
                out.append((t, level))
                heapq.heappush(events, t + dwell_s)
    steps: list[BudgetStep] = []
    for t, w in out:
        w = max(w, NO_POWER_W)
        if steps and steps[-1].at_s == t:
            steps[-1] = BudgetStep(t, w)
        elif not steps or steps[-1].budget_w != w:
            steps.append(BudgetStep(t, w))
    return tuple(steps)


def schedule_from_trace(
    path: str | Path,
    dwell_s: object = DEFAULT_DWELL_S,
    where: str = "budget_trace",
    start_s: object = None,
    names: tuple[str, str] = ("budget_dwell_s", "budget_trace_start_s"),
) -> tuple[BudgetStep, ...]:
    """The fleet TOML hook: file + dwell (+ start) -> schedule, errors naming the entry."""
    for name, v in zip(names, (dwell_s, start_s), strict=True):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InputError(f"{where}: {name} must be a number of seconds, got {v!r}")
    # both are None or numbers (checked above); the object-typed TOML values do not narrow
    start = None if start_s is None else float(start_s)  # type: ignore[arg-type]
    try:
        readings = load_trace(path)
        return trace_to_schedule(readings, float(dwell_s), start, names)  # type: ignore[arg-type]
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
