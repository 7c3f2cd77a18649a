"""A device's reply row checked before it may touch the fleet's aggregate or report.

Why: replies come from other machines. A broken or hostile device may send NaN or negative
energy, a sample count as text, a status nobody knows, a megabyte of message, or another
device's name. ``records.decode_reply`` turns records into a row as they are; this module
refuses a row that is not a plausible report, with one line naming the device and the field,
so the coordinator can report that device as ``error`` and keep every other number clean.
Bounds are generous (what no real board can produce), not tight guesses.
"""

from __future__ import annotations

import math

from fleet.common.errors import InputError
from fleet.common.names import is_safe
from fleet.rounds.progress import MAX_BATCH, MAX_ENERGY_J, MAX_FREQ, MAX_POWER_W, MAX_SECONDS

# Every status a device may report (a segment reply's "running" included); "lost" is the
# coordinator's to give, never a device's.
DEVICE_STATUSES = frozenset(
    ("ok", "late", "infeasible", "not reached", "error", "selected", "over-budget", "running")
)
MAX_MESSAGE = 4096
MAX_EVENTS = 10_000  # segments or guard events in one row

_NUMBERS: dict[str, tuple[float, float]] = {  # field -> [lowest, highest]
    "budget_w": (0.0, MAX_POWER_W),
    "freq_mhz": (0.0, MAX_FREQ),
    "predicted_time_s": (0.0, MAX_SECONDS),
    "time_s": (0.0, MAX_SECONDS),
    "energy_j": (0.0, MAX_ENERGY_J),
    "peak_power_w": (0.0, MAX_POWER_W),
    "mean_power_w": (0.0, MAX_POWER_W),
    "accuracy": (0.0, 1.0),
    "samples": (0.0, 1e15),
    "idle_power_w": (0.0, MAX_POWER_W),
    "batch_size": (1.0, float(MAX_BATCH)),
    "learned_batch_size": (1.0, float(MAX_BATCH)),
    "learned_samples": (0.0, 1e15),
    "learned_log_sd": (0.0, 100.0),
}
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
    for key, (lo, hi) in _NUMBERS.items():
        _number(row.get(key), f"{where}: field '{key}'", lo, hi)
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
    for key in ("segments", "guard_events", "efficiency_fits"):
        _events(row.get(key), f"{where}: field '{key}'")
    return row


def _number(value: object, where: str, lo: float, hi: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InputError(f"{where}: {value!r} is outside [{lo:g}, {hi:g}]")


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
