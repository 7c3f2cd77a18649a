"""Checking a round state (``state.json``, ``fleet.reports.roundstate``) field by field.

Why its own module: the reader (``read_state``) checks a whole document, the writer
(``roundstate.Writer``) checks the document's head every write but a device entry only
when it changed since its last write; both use these rules, so a document the writer lets
through is one the reader accepts. Every refusal is one line naming the file and the field.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from fleet.common.errors import InputError
from fleet.rounds import statuses
from fleet.rounds.progress import read_progress

FORMAT = "powerfleet-round-state"
VERSION = 1


class Check:
    """Field readers that name the file and the field's path in every refusal."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> InputError:
        return InputError(f"{self.path}: {where}: {what}")

    def get(self, obj: dict[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise self.fail(f"{where}{key}", "missing")
        return obj[key]

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_kind(value)}")
        return value

    def integer(self, value: Any, where: str, lo: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected a whole number, got {_kind(value)}")
        if value < lo:
            raise self.fail(where, f"{value} is below {lo}")
        return value

    def number(self, value: Any, where: str, optional: bool = False) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {_kind(value)}")
        if not math.isfinite(value) or value < 0:
            raise self.fail(where, f"{value!r} is not a finite number >= 0")
        return float(value)

    def stamp(self, value: Any, where: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        text = self.text(value, where)
        try:
            datetime.fromisoformat(text)
        except ValueError:
            raise self.fail(where, f"{text!r} is not an ISO 8601 time") from None
        return text


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_state(state: Any, path: str) -> None:
    """Raise InputError (file, field) unless ``state`` is a version-1 round state."""
    c = Check(path)
    for name, entry in check_head(c, state).items():
        check_device(c, name, entry)


def check_head(c: Check, state: Any) -> dict[str, Any]:
    """Everything in ``state`` but the device entries (each is ``check_device``'s): the
    incremental writer checks the head every write and only the entries that changed.
    Returns the devices object."""
    top = c.obj(state, "top level")
    fmt = top.get("format")
    if fmt != FORMAT:
        raise c.fail("format", f"expected {FORMAT!r}, got {fmt!r} (not a powerfleet round state)")
    version = top.get("version")
    if version != VERSION or isinstance(version, bool):
        raise c.fail("version", f"expected {VERSION}, got {version!r} (written by another release)")
    for key in ("run", "fleet_file", "fleet_sha256", "engine", "run_token"):
        c.text(c.get(top, key, ""), key)
    for key in ("started_utc", "updated_utc"):
        c.stamp(c.get(top, key, ""), key)
    if not isinstance(c.get(top, "finished", ""), bool):
        raise c.fail("finished", f"expected true or false, got {_kind(top['finished'])}")
    rounds = c.integer(c.get(top, "rounds", ""), "rounds", 1)
    rnd = c.integer(c.get(top, "round", ""), "round", 0)
    if rnd > rounds:
        raise c.fail("round", f"{rnd} is beyond rounds ({rounds})")
    c.number(c.get(top, "segment_s", ""), "segment_s")
    _check_plan(c, c.obj(c.get(top, "plan", ""), "plan"))
    devices = c.obj(c.get(top, "devices", ""), "devices")
    writer = top.get("writer")
    if writer is not None:
        writer = c.obj(writer, "writer")
        c.integer(c.get(writer, "pid", "writer."), "writer.pid", 1)
    stop = top.get("interrupted")
    if stop is not None:
        stop = c.obj(stop, "interrupted")
        c.stamp(c.get(stop, "at_utc", "interrupted."), "interrupted.at_utc")
        c.text(c.get(stop, "reason", "interrupted."), "interrupted.reason")
        for key in ("devices_done", "devices"):
            c.integer(c.get(stop, key, "interrupted."), f"interrupted.{key}", 0)
        c.number(c.get(stop, "samples", "interrupted."), "interrupted.samples")
    done = c.get(top, "completed_rounds", "")
    if not isinstance(done, list):
        raise c.fail("completed_rounds", f"expected a list, got {_kind(done)}")
    for k, item in enumerate(done):
        where = f"completed_rounds[{k}]"
        item = c.obj(item, where)
        c.integer(c.get(item, "round", f"{where}."), f"{where}.round", 1)
        c.obj(c.get(item, "totals", f"{where}."), f"{where}.totals")
    return devices


def _check_plan(c: Check, plan: dict[str, Any]) -> None:
    c.number(c.get(plan, "deadline_s", "plan."), "plan.deadline_s", optional=True)
    revisions = c.get(plan, "revisions", "plan.")
    if not isinstance(revisions, list):
        raise c.fail("plan.revisions", f"expected a list, got {_kind(revisions)}")
    for k, rev in enumerate(revisions):
        where = f"plan.revisions[{k}]"
        rev = c.obj(rev, where)
        c.stamp(c.get(rev, "at_utc", f"{where}."), f"{where}.at_utc")
        c.number(c.get(rev, "round_time_s", f"{where}."), f"{where}.round_time_s")
        for key in ("deadline_s", "previous_s"):
            c.number(c.get(rev, key, f"{where}."), f"{where}.{key}", optional=True)
        c.text(c.get(rev, "reason", f"{where}."), f"{where}.reason")


def check_device(c: Check, name: str, entry: Any) -> None:
    where = f"devices.{name}"
    entry = c.obj(entry, where)
    p = f"{where}."
    if c.get(entry, "device", p) != name:
        raise c.fail(f"{p}device", f"{entry['device']!r} differs from its key {name!r}")
    c.text(c.get(entry, "device_type", p), f"{p}device_type")
    status = c.get(entry, "status", p)
    if status not in statuses.ALL:
        raise c.fail(f"{p}status", f"{status!r} is not one of {', '.join(statuses.ALL)}")
    node = c.get(entry, "node_id", p)
    if node is not None:
        c.integer(node, f"{p}node_id", 0)
    c.number(c.get(entry, "budget_w", p), f"{p}budget_w", optional=True)
    try:
        read_progress(c.get(entry, "progress", p), where=f"{p}progress")
    except InputError as exc:
        raise InputError(f"{c.path}: {exc}") from None
    for key in ("last_seen_utc", "lost_at_utc"):
        c.stamp(c.get(entry, key, p), f"{p}{key}", optional=True)
    c.text(c.get(entry, "message", p), f"{p}message")
    row = c.get(entry, "row", p)
    if row is not None:
        c.obj(row, f"{p}row")
