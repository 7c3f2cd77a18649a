"""A device's progress through a round, as it travels in segment replies and resume requests.

Why a record of its own: a round that lasts hours runs in bounded segments
(docs/architecture.md, "Segmented rounds"). Every segment reply carries where the device is now,
every segment request carries where the coordinator last saw it (the device resumes from the
later of that and its own checkpoint), and the coordinator's persisted round state keeps it.
All counters are *cumulative since the round began* and in the device's own clock, so a
segment replayed after a lost reply or a coordinator restart replaces the previous value and
can never be counted twice.

The record itself is the kernel's (``fleet.method.records.Progress``: the board builds it
too); values come from another machine: ``read_progress`` refuses anything that is not a finite,
bounded number of the right kind, naming the field (a hostile or broken device must not corrupt
the fleet's aggregate).
"""

from __future__ import annotations

from fleet.common.errors import InputError
from fleet.method.records import (  # noqa: F401 - the bounds are this module's API too
    MAX_BATCH,
    MAX_ENERGY_J,
    MAX_FREQ,
    MAX_POWER_W,
    MAX_SAMPLES,
    MAX_SECONDS,
    Progress,
    RecordError,
)


def read_progress(data: object, where: str = "progress") -> Progress:
    """``Progress.from_dict`` for the host: a refused record is the host's ``InputError`` (one
    line naming the field), which the coordinator and the CLI turn into a row or exit 2."""
    try:
        return Progress.from_dict(data, where)
    except RecordError as exc:
        raise InputError(str(exc)) from None


def later(a: Progress, b: Progress) -> Progress:
    """The further of two views of the same device (more device time; then more samples):
    the coordinator's last persisted progress and the device's own checkpoint."""
    return a if (a.time_s, a.samples) >= (b.time_s, b.samples) else b
