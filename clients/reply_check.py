"""A device's reply row checked before it may touch the fleet's aggregate or report.

Why: replies come from other machines. A broken or hostile device may send NaN or negative
energy, a sample count as text, a status nobody knows, a megabyte of message, or another
device's name. ``records.decode_reply`` turns records into a row as they are; this module
refuses a row that is not a plausible report, with one line naming the device and the field,
so the coordinator can report that device as ``error`` and keep every other number clean.
Bounds are generous (what no real board can produce), not tight guesses, and they are the
kernel's (``fleet.method.records.ReportRow``, ``Segment``): the board's records hold the same.
"""

from __future__ import annotations

import math

from fleet.common.errors import InputError
from fleet.common.names import is_safe
from fleet.method.records import MAX_ENERGY_J, RecordError, ReportRow
from fleet.rounds.device_round import baseline_columns

# Every status a device may report (a segment reply's "running" included); "lost" is the
# coordinator's to give, never a device's.
DEVICE_STATUSES = frozenset(
    ("ok", "late", "infeasible", "not reached", "error", "selected", "over-budget", "running")
)
MAX_MESSAGE = 4096
MAX_EVENTS = 10_000  # segments or guard events in one row

_TEXTS = ("device_type", "profile", "efficiency", "learning", "trace")


def check_row(row: dict[str, object], device: str) -> dict[str, object]:
    """``row`` if every field is plausible; else InputError "device D: field F: ..."."""
    where = f"device {device}"
    name = row.get("device")
    if not is_safe(name):
        raise InputError(f"{where}: field 'device': {str(name)[:80]!r} is not a device name")
    if name != device:
        raise InputError(f"{where}: field 'device': the reply names {name!r}")
    status = row.get("status")
    if status not in DEVICE_STATUSES:
        raise InputError(f"{where}: field 'status': {str(status)[:80]!r} is not a device status")
    segs = row.get("segments")
    if isinstance(segs, list) and len(segs) > MAX_EVENTS:
        raise InputError(f"{where}: field 'segments': expected at most {MAX_EVENTS} entries")
    baselines = set(baseline_columns())  # the host's registry's: numbers or None
    try:  # every other key is the kernel's row field, within its bounds
        ReportRow.from_dict({k: v for k, v in row.items() if k not in baselines}, where)
    except RecordError as exc:
        raise InputError(str(exc)) from None
    for key in baselines:
        value = row.get(key)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < math.inf
        ):
            raise InputError(f"{where}: field '{key}': expected a number >= 0, got {value!r:.40}")
    if status in ("ok", "late"):  # a device that trained says how long and how much
        for key in ("time_s", "samples"):
            if row.get(key) is None:
                raise InputError(f"{where}: field '{key}': missing from a trained row")
    message = row.get("message")
    if message is not None and (not isinstance(message, str) or len(message) > MAX_MESSAGE):
        raise InputError(f"{where}: field 'message': expected text of at most {MAX_MESSAGE}")
    for key in _TEXTS:
        value = row.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_MESSAGE):
            raise InputError(f"{where}: field '{key}': expected text of at most {MAX_MESSAGE}")
    for key in ("guard_events", "efficiency_fits"):
        _events(row.get(key), f"{where}: field '{key}'")
    return row


def _events(value: object, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or len(value) > MAX_EVENTS:
        raise InputError(f"{where}: expected a list of at most {MAX_EVENTS} entries")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise InputError(f"{where}[{i}]: expected an object")
        for key, item in entry.items():
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                if not math.isfinite(item) or item < 0 or item > MAX_ENERGY_J:
                    raise InputError(f"{where}[{i}].{key}: {item!r} is not a plausible value")
            elif item is not None and not isinstance(item, str):
                raise InputError(f"{where}[{i}].{key}: expected a number or text")
