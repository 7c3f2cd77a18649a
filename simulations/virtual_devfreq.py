"""devfreq's rules for ``min_freq``/``max_freq`` per kernel generation, over one node's files.

Why a module of its own: what a write to a GPU node's bounds *means* changed between kernels,
and code that is right on one is wrong on the other (``/work/notes/boards-facts.md`` 2.1):

* ``einval`` (JetPack 4, kernel 4.9): a write that would leave min > max fails with EINVAL
  (here: the file is put back, as a failed ``write()`` leaves it); an accepted value is snapped
  to the table (min up, max down) and reads back as stored. A thermal or power-mode clamp limits
  the clock but does not show in ``max_freq``.
* ``pmqos`` (JetPack 5+, kernels 5.10 and later): a write is a PM-QoS request, min rounded down
  and max up to kHz, ``0`` to ``max_freq`` lifts the limit; nothing is refused. Reads are the
  *effective* bounds, computed on every read: ``max_freq`` = min(table top, the user's request,
  every other limit such as a thermal/power-mode clamp), ``min_freq`` = max(table bottom, the
  user's request), and where min > max, min reads as max. The user's own requests are kept
  apart (:class:`NodeState` ``req_min``/``req_max``, shown in the kernel's status file), so a
  test can see what was written, not only what is in force.

A write to a file is noticed at the next poll: by its content (einval, as before) or by the
file's identity and time stamp changing (pmqos, where rewriting the value already shown is a
real request). Under pmqos the clock follows a request at once and the files are rewritten
with the effective bounds in the same poll. :func:`kernel_accepts` replays a write log by the
same rules, node by node.

A real kernel takes a write in one syscall; here the writer (a test, powerfleet) and the stand-in
share plain files, so two races are closed however slowly either side runs (a loaded machine
holds a process or a thread between any two file operations for as long as it likes):

* a *torn read*: the pair is read file by file, so a writer's ``min_freq`` + ``max_freq`` pair
  landing between the two reads would combine the old min with the new max (and on JetPack 4 be
  "rejected", undoing a valid lock). The pair is read between two looks at both files' stamps
  and taken only when neither changed (:meth:`NodeState._read_pair`); else the next poll.
* a *lost write*: when the stand-in puts its answer in a file (the effective bound, a put-back,
  a snapped OPP), a write that arrived since it last looked must not be overwritten, nor taken
  as seen. :meth:`NodeState._show` replaces a file only when it is as last seen, and keeps the
  replaced file open: a writer that had opened it just before the replace wrote into it, and
  that write is forwarded to the new file at the next poll (:meth:`NodeState._forward`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BOUNDS = ("min_freq", "max_freq")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


def read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return int(float(text)) if text else None
    except (OSError, ValueError):
        return None  # mid-write (truncated) or unreadable: look again at the next poll


Stamp = tuple[int, int, int]


def _of(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _stamp(path: Path) -> Stamp | None:
    try:
        return _of(os.stat(path))
    except OSError:
        return None


def _replace(path: Path, text: str) -> Stamp:
    """``atomic_write`` returning the stamp the new file has (a rename keeps it)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(text)
    stamp = _of(os.stat(tmp))
    os.replace(tmp, path)
    return stamp


def snap(table: Sequence[int], value: int, up: bool) -> int:
    """devfreq's OPP rounding: a floor request rounds up, a ceiling request rounds down."""
    if up:
        return next((h for h in table if h >= value), table[-1])
    return next((h for h in reversed(table) if h <= value), table[0])


def kernel_accepts(
    writes: Sequence[tuple[str, str]], start_min: int, start_max: int, rules: str = "einval"
) -> bool:
    """Replay a write log (path, value) as devfreq would, each node (directory) on its own
    bounds from ``start_min``/``start_max``: under ``einval`` a write that makes min > max is
    rejected; under ``pmqos`` every numeric write is accepted (the kernel resolves min > max)."""
    cur: dict[str, dict[str, int]] = {}
    for path, value in writes:
        node, attr = os.path.split(path)
        if attr not in BOUNDS:
            continue
        try:
            number = int(value)
        except ValueError:
            return False
        if rules == "pmqos":
            continue
        bounds = cur.setdefault(node, {"min_freq": start_min, "max_freq": start_max})
        trial = dict(bounds, **{attr: number})
        if trial["min_freq"] > trial["max_freq"]:
            return False
        cur[node] = trial
    return True


class NodeState:
    """One GPU devfreq node as the kernel stand-in holds it: bounds in force, the user's
    requests (pmqos), the clock and the counters the status file reports."""

    def __init__(self, path: Path, table: Sequence[int], rules: str) -> None:
        self.path = Path(path)
        self.table = sorted(table)
        self.rules = rules
        mn = read_int(self.path / "min_freq") or self.table[0]
        mx = read_int(self.path / "max_freq") or self.table[-1]
        self.eff_min, self.eff_max = mn, mx  # the OPP range in force
        self.seen_min, self.seen_max = mn, mx  # einval: what the files held at the last poll
        self.req_min: int | None = None  # pmqos: the user's requests (None: no request)
        self.req_max: int | None = None
        self.shown = {"min_freq": mn, "max_freq": mx}
        self.stamps = {a: _stamp(self.path / a) for a in BOUNDS}
        self.cur = read_int(self.path / "cur_freq") or self.table[-1]
        self.target = self.cur
        self.target_since = time.monotonic()
        self.rejected = 0
        self.snapped = 0
        self.requests = 0
        # files this stand-in replaced while a writer may have held them open: (attr, fd,
        # stamp of the file that replaced it); see _show and _forward
        self._replaced: list[tuple[str, int, Stamp]] = []

    # -- the files, shared with writers --------------------------------------------------------
    def _read_pair(self) -> tuple[dict[str, Stamp | None], int | None, int | None] | None:
        """Both bounds as one consistent snapshot (stamps, min, max), or None when a write
        landed while they were read (the next poll reads again)."""
        paths = [self.path / a for a in BOUNDS]
        before = {a: _stamp(p) for a, p in zip(BOUNDS, paths, strict=True)}
        raw_min, raw_max = (read_int(p) for p in paths)
        after = {a: _stamp(p) for a, p in zip(BOUNDS, paths, strict=True)}
        return (after, raw_min, raw_max) if after == before else None

    def _show(self, attr: str, value: int, seen: Stamp | None) -> Stamp | None:
        """Put ``value`` in ``attr`` as the kernel's answer, unless the file changed since the
        poll that saw it as ``seen`` (a write this poll has not taken in: the next one does).
        Returns the stamp of the file now there (ours), or None when nothing was written."""
        path = self.path / attr
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        keep = False
        try:
            before = _of(os.fstat(fd))
            if before != seen:
                return None
            if os.pread(fd, 64, 0).decode(errors="replace").strip() == str(value):
                return before  # already says it: nothing to replace
            ours = _replace(path, f"{value}\n")
            if _of(os.fstat(fd)) != before:  # a writer opened it before the rename
                self._replaced.append((attr, fd, ours))
                keep = True
            return ours
        finally:
            if not keep:
                os.close(fd)

    def _forward(self) -> None:
        """A write that went into a file this stand-in had just replaced is copied to the file
        there now, where the next look sees it as the writer's (unless a newer write is there
        already). A writer still between its truncate and its write is waited for."""
        pending, self._replaced = self._replaced, []
        for attr, fd, ours in pending:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            path = self.path / attr
            if not text and _stamp(path) == ours:
                self._replaced.append((attr, fd, ours))  # truncated, not yet written
                continue
            os.close(fd)
            if text and _stamp(path) == ours:
                self.stamps[attr] = None  # the forwarded write is a new one, whatever it says
                _replace(path, text + "\n")

    # -- the bounds -------------------------------------------------------------------------
    def tick(self, clamp_hz: int | None) -> None:
        self._forward()
        if self.rules == "pmqos":
            self._tick_pmqos(clamp_hz)
        else:
            self._tick_einval()

    def _tick_einval(self) -> None:
        pair = self._read_pair()
        if pair is None:
            return
        stamps, raw_min, raw_max = pair
        raw_min = self.seen_min if raw_min is None else raw_min
        raw_max = self.seen_max if raw_max is None else raw_max
        if raw_min == self.seen_min and raw_max == self.seen_max:
            return
        new_min = snap(self.table, raw_min, up=True)
        new_max = snap(self.table, raw_max, up=False)
        if new_min > new_max:
            # EINVAL: the write that made min > max never took effect; show the old values.
            self.rejected += 1
            for attr, value in (("min_freq", self.eff_min), ("max_freq", self.eff_max)):
                self._show(attr, value, stamps[attr])
            self.seen_min, self.seen_max = self.eff_min, self.eff_max
            return
        for attr, raw, new in (("min_freq", raw_min, new_min), ("max_freq", raw_max, new_max)):
            if raw != new:
                self.snapped += 1
                self._show(attr, new, stamps[attr])  # show the OPP actually in force
        self.eff_min, self.eff_max = new_min, new_max
        self.seen_min, self.seen_max = new_min, new_max

    def _tick_pmqos(self, clamp_hz: int | None) -> None:
        for attr in BOUNDS:
            path = self.path / attr
            stamp = _stamp(path)
            if stamp == self.stamps[attr]:
                continue
            value = read_int(path)
            if value is None:
                continue  # truncated by a writer that has not written yet: next poll
            if attr == "min_freq":
                self.req_min = value // 1000 * 1000  # rounded down to kHz
            else:
                self.req_max = None if value == 0 else -(-value // 1000) * 1000  # up to kHz
            self.requests += 1
            self.stamps[attr] = stamp
            self.shown[attr] = -1  # what the writer left there may not be what reads give
        top = self.table[-1]
        for limit in (self.req_max, clamp_hz):
            if limit:
                top = min(top, int(limit))
        bottom = min(max(self.table[0], self.req_min or 0), top)  # min > max: min reads as max
        hi = snap(self.table, top, up=False)
        self.eff_min, self.eff_max = min(snap(self.table, bottom, up=True), hi), hi
        for attr, value in (("min_freq", bottom), ("max_freq", top)):
            if self.shown[attr] == value:
                continue
            ours = self._show(attr, value, self.stamps[attr])
            if ours is not None:  # else a write arrived since the look above: the next poll
                self.shown[attr] = value
                self.stamps[attr] = ours

    def clock_range(self, clamp_hz: int | None) -> tuple[int, int]:
        """The OPPs the governor may pick from: the bounds in force, under the clamp (which on
        einval kernels limits the clock without showing in ``max_freq``)."""
        lo, hi = self.eff_min, self.eff_max
        if clamp_hz:
            hi = min(hi, snap(self.table, int(clamp_hz), up=False))
            lo = min(lo, hi)
        return lo, hi

    # -- the clock --------------------------------------------------------------------------
    def step(self, busy: bool, clamp_hz: int | None, lag_s: float, now: float) -> bool:
        """Move ``cur`` towards the governor's target (busy -> top of range, idle -> bottom)
        once it has been the target for ``lag_s``; True when ``cur`` changed."""
        lo, hi = self.clock_range(clamp_hz)
        target = hi if busy else lo
        if target != self.target:
            self.target, self.target_since = target, now
        if self.cur != self.target and now - self.target_since >= lag_s:
            self.cur = self.target
            return True
        return False

    @property
    def pinned(self) -> bool:
        return self.eff_min == self.eff_max

    def status(self) -> dict[str, Any]:
        return {
            "rules": self.rules,
            "min_freq": self.shown["min_freq"] if self.rules == "pmqos" else self.eff_min,
            "max_freq": self.shown["max_freq"] if self.rules == "pmqos" else self.eff_max,
            "request_min": self.req_min,
            "request_max": self.req_max,
            "eff_min": self.eff_min,
            "eff_max": self.eff_max,
            "cur": self.cur,
            "rejected": self.rejected,
            "snapped": self.snapped,
            "requests": self.requests,
        }
