"""Drive a board's live budget file from a power trace, in real time.

The closed loop re-reads a budget file every second (``powerfleet train --budget-file``); on a
real installation a charge controller, a battery manager or an operator writes that file. A
recorded or synthetic trace (a solar panel's clear day, ``simulations/traces/``) can play that
part: the trace becomes the same schedule a fleet file's ``budget_trace`` gives
(``fleet.budgets.trace``: never above what is available, no flapping), and each step's budget is
written into the file when its time comes, atomically, so the loop never reads half a number.
``speed`` plays the trace faster than real time (a day in minutes) for rehearsals and tests.
(docs/architecture.md, budgets.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from fleet.common.errors import InputError
from fleet.method.budget import BudgetStep, format_budget
from fleet.method.profile_io import atomic_write_text


def check_speed(speed: float) -> float:
    if not math.isfinite(speed) or speed <= 0:
        raise InputError(f"--speed: expected a positive number, got {speed:g}")
    return float(speed)


def feed(
    steps: Sequence[BudgetStep],
    path: str,
    speed: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_write: Callable[[float, float | None], None] | None = None,
) -> list[tuple[float, float | None]]:
    """Write each step's budget into ``path`` at its time (trace seconds / ``speed`` after the
    call), and return what was written when: [(seconds since the start, watts or None)].

    The first step is written at once; the call returns after the last step is written (its
    level then holds, as the schedule's last step does).
    """
    speed = check_speed(speed)
    start = clock()
    written: list[tuple[float, float | None]] = []
    for step in steps:
        due = start + step.at_s / speed
        while (left := due - clock()) > 0:
            sleep(min(left, 0.5))
        # readable by all: the agent reading it may run as another user than the feeder
        atomic_write_text(path, format_budget(step.budget_w) + "\n", mode=0o644)
        at = clock() - start
        written.append((at, step.budget_w))
        if on_write:
            on_write(at, step.budget_w)
    return written
