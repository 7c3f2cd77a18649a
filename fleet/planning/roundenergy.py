"""Round energy: what a fleet spends over a round, the waiting included.

Fleet energy (``energy_j``) counts training only. A board that finishes early stays powered and
draws its idle power until the round ends (a Flower SuperNode waits for the aggregation), and a
board that could not train at all idles the whole round. Reporting only what happened, the
fleet's energy over the round is

    round_energy_j = sum(training energy) + sum(idle power x (round time - own training time))

for every device of the round; a device that did not train waits the whole round time. Idle
power comes from the device's profile (the ``idle_power_w`` column: measured by the profiler
with the GPU idle, or the device model's ``idle_w`` in the modeled references), or from the row
itself when a runner reports it. A device whose idle power is unknown contributes no waiting and
is counted in ``idle_unknown``, so a total never silently looks complete.

The one place this is computed: the round report (``fleet.reports.report``), the what-if sweep and
the deadline comparison (``fleet.planning.whatif``) all call :func:`round_energy`.
(docs/architecture.md, "Run directory".)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeGuard

from fleet.common.errors import InputError
from fleet.core.profile import load_profile
from fleet.rounds.device_round import TRAINED


def _finite(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@lru_cache(maxsize=512)
def _idle_from_file(path: str, mtime_ns: int, size: int) -> float | None:
    """Keyed by the file's stat: a profile rewritten on disk is read again."""
    try:
        return load_profile(path).idle_power_w
    except InputError:  # a file moved or broken since the run: the idle power is unknown
        return None


def profile_idle_power(path: object) -> float | None:
    """The ``idle_power_w`` of the profile at ``path``, or None (no path, no file, no column)."""
    if not isinstance(path, str) or not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _idle_from_file(path, st.st_mtime_ns, st.st_size)


def idle_power_of(row: dict[str, object], memo: dict[str, float | None]) -> float | None:
    """A row's idle power: its own ``idle_power_w`` if it carries one, else its profile's."""
    own = row.get("idle_power_w")
    if _finite(own) and own > 0:
        return float(own)
    path = str(row.get("profile") or "")
    if path not in memo:
        memo[path] = profile_idle_power(path)
    return memo[path]


def round_energy(
    rows: Sequence[dict[str, object]],
) -> tuple[list[dict[str, float | None]], dict[str, object]]:
    """Per device (in ``rows`` order) and fleet: training energy plus idle power x waiting.

    The round lasts until the last device that ran reports: the slowest that reached the
    target (the fleet totals' round time) or one that ran without reaching it (stopped at its
    sample cap, or over budget) if that took longer. Every joule a device spent training
    counts, reached or not. Per device: ``idle_power_w``, ``wait_s`` (round end - its own
    training time, or the whole round if it did not run) and ``idle_wait_j`` (None where the
    idle power is unknown). Fleet: ``training_energy_j`` (all training, so at least the
    totals' fleet energy, which counts devices that reached the target), ``idle_wait_j``,
    ``round_energy_j`` and ``idle_unknown`` (devices whose waiting could not be charged).
    """
    ran_j = (r.get("energy_j") for r in rows if _ran(r))
    training = sum(float(e) for e in ran_j if _finite(e))
    own_s = [_training_s(r) for r in rows]  # None: did not run, waits the whole round
    round_s = max((t for t in own_s if t is not None), default=0.0)
    memo: dict[str, float | None] = {}
    devices: list[dict[str, float | None]] = []
    idle_total, unknown = 0.0, 0
    for r, t in zip(rows, own_s, strict=True):
        wait = round_s if t is None else round_s - t
        idle = idle_power_of(r, memo)
        joules = None if idle is None else idle * wait
        if joules is None:
            unknown += 1
        else:
            idle_total += joules
        devices.append({"idle_power_w": idle, "wait_s": wait, "idle_wait_j": joules})
    return devices, {
        "training_energy_j": training,
        "idle_wait_j": idle_total,
        "round_energy_j": training + idle_total,
        "idle_unknown": unknown,
    }


#: Statuses of a device that ran this round without reaching the target (its time and energy
#: are measured): the trainer's sample cap, the closed loop's stop over budget, and its stop on a
#: setting the board refused (``error``; an error before training has no time or energy).
RAN_SHORT = ("not reached", "over-budget", "error")


def _ran(row: dict[str, object]) -> bool:
    return row.get("status") in TRAINED or row.get("status") in RAN_SHORT


def _training_s(row: dict[str, object]) -> float | None:
    """How long the device trained this round (None if it did not run)."""
    t = row.get("time_s")
    return float(t) if _ran(row) and _finite(t) else None


def round_totals(rows: Sequence[dict[str, object]]) -> dict[str, object]:
    """The fleet half of :func:`round_energy` (what the totals lines print)."""
    return round_energy(rows)[1]
