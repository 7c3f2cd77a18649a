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


_PARSED: dict[str, tuple[object, Progress]] = {}


def entry_progress(device: str, data: object, where: str = "progress") -> Progress:
    """``read_progress`` of the progress a round's book holds for ``device``, parsed once.

    Why: at 1,000 devices a lock-step reads every active device's progress several times (who
    is due, the re-plan, the next instruction, the state file's check), and checking a record
    with its learning state was most of the coordinator's work per reply. The book never edits
    a progress in place (a reply replaces it whole), so the same object is the same progress:
    the memo answers only for the very object it parsed (``remember`` seeds it with a record
    checked already), and anything else, e.g. a book read back from disk, is parsed."""
    hit = _PARSED.get(device)
    if hit is not None and hit[0] is data:
        return hit[1]
    got = read_progress(data, where)
    _PARSED[device] = (data, got)
    return got


def remember(device: str, data: object, progress: Progress) -> None:
    """``data`` (now in the book) is ``progress.to_dict()`` of a record checked already."""
    _PARSED[device] = (data, progress)


def later(a: Progress, b: Progress) -> Progress:
    """The further of two views of the same device (more device time; then more samples):
    the coordinator's last persisted progress and the device's own checkpoint."""
    return a if (a.time_s, a.samples) >= (b.time_s, b.samples) else b
