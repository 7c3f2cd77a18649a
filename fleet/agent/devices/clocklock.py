"""The Jetson GPU clock lock: pin every GPU devfreq node, save the originals first, put them back.

Why a module of its own: locking is where a board is left wrong if anything is off, and the
rules differ per board and kernel, apart from how power is read (``power_rails.py``):

- Several nodes move together (Thor: ``gpu-gpc-0`` and ``gpu-nvd-0``). The primary (the first
  the board table names) is pinned at the requested clock and offers the frequencies; every
  other node at its own table's highest frequency not above that (its lowest if none). The
  state file holds every node's originals and the restore puts all of them back.
- Kernel rules (``boards.kernel_rules``). JetPack 4 (``einval``): a write that would leave
  min > max fails with EINVAL, so the pair is written in the order that never crosses
  (``_set_bounds``), and reads give back what was written. JetPack 5+ (``pmqos``): writes are
  PM-QoS requests, min > max is accepted and resolved by the kernel, and ``max_freq`` reads
  the *effective* bound, i.e. the user's request or a thermal/power-mode clamp, whichever is
  lower. Saving that read as the original would turn a passing clamp into a permanent user
  limit at the restore. So at the first lock, when ``max_freq`` reads below the table's top,
  the top is written and read back (``_original``): a read that rises shows the earlier value
  was the user's own limit (saved, then written back); one that stays shows the kernel clamps
  (the table top is saved, i.e. no user limit, and the clamp goes to the state file and to
  ``describe()`` as ``clamp_hz``). The same write order serves both kernels.

Crash safety: the originals are saved (``clockstate``) before the first pinning write and the
file is deleted after the restore; constructing the backend first restores from a file a killed
run left behind, so pinned values are never taken for originals. Each min/max pair is written
under the backend's lock and inside ``guard.deferred_signals()``, so a signal cannot split it.

``DevfreqClockLock`` is a mixin: the backend (``jetson.py``) sets ``sysfs_root`` and ``node``
(the primary) and calls ``_init_clocks``. Subclasses that hook the primary's writes override
``_write(attr, value)`` and ``_set_bounds(new_min, new_max)``: calls for the primary keep those
two-argument forms; only a companion node is passed as a third argument.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import logging
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 (type comments)

from fleet.agent.devices import boards, clockstate
from fleet.agent.devices.base import DeviceError
from fleet.agent.devices.board_identity import board_model
from fleet.agent.devices.devfreq import (
    DevfreqNode,
    available_hz,
    board_facts,
    find_gpu_devfreq,
    find_gpu_nodes,
)
from fleet.agent.devices.guard import deferred_signals
from fleet.agent.devices.sysfs import read_number, read_text, under
from fleet.method import liveness

log = logging.getLogger("fleet.agent")

#: Default bound on waiting for ``cur_freq`` to reach a locked target (devfreq switches in ms).
SETTLE_TIMEOUT_S = 1.0
#: How long the first lock's PM-QoS probe waits for a clamp to show in ``max_freq`` (once per run,
#: and only on a board whose ``max_freq`` read below its table's top).
PROBE_SETTLE_S = 0.2


def pin_hz(table: List[int], hz: int) -> int:
    """A companion node's clock for a primary pinned at ``hz``: its highest frequency not above
    ``hz``, or its lowest when all are above."""
    below = [f for f in table if f <= hz]
    return below[-1] if below else table[0]


class DevfreqClockLock(object):
    """The clock half of the Jetson backend (see the module docstring). Records every sysfs
    write in ``writes`` (path, value); ``recovered`` is the state record restored at start."""

    sysfs_root = "/"
    node: DevfreqNode  # the primary, set by the backend before _init_clocks

    def _init_clocks(
        self, gpu_node: Optional[str], state_dir: Optional[str], settle_timeout_s: float
    ) -> None:
        _, jetpack = board_facts(self.sysfs_root)
        self.jetpack = jetpack  # type: Optional[int]
        self.kernel_rules = boards.kernel_rules(jetpack)
        self.nodes = [self.node]  # type: List[DevfreqNode]
        if gpu_node is None:
            found = find_gpu_nodes(self.sysfs_root)
            if found[0].name == self.node.name:
                self.nodes = found
        self._tables = dict((n.name, available_hz(n)) for n in self.nodes)
        self._freqs_hz = self._tables[self.node.name]
        self.writes = []  # type: List[Tuple[str, str]]
        self._originals = None  # type: Optional[List[Dict[str, Any]]]
        self._pinned = {}  # type: Dict[str, Tuple[int, int]]
        self.clamps_hz = {}  # type: Dict[str, int]  # node -> clamp seen at a first lock
        self.state_dir = state_dir or clockstate.default_state_dir(self.sysfs_root)
        self.settle_timeout_s = float(settle_timeout_s)
        self._io = threading.RLock()  # one write pair at a time, whichever thread writes
        self._target_hz = None  # type: Optional[int]
        self._closed = False
        self.settle_s = None  # type: Optional[float]  # how long the last wait_settled took

    # -- paths and small I/O helpers ------------------------------------------------------------
    def _path(self, attr: str, node: Optional[DevfreqNode] = None) -> str:
        return os.path.join((node or self.node).path, attr)

    def _is_primary(self, node: Optional[DevfreqNode]) -> bool:
        return node is None or node.name == self.node.name

    def _read_hz(self, attr: str, node: Optional[DevfreqNode] = None) -> int:
        return int(read_number(self._path(attr, node)))

    def _write(self, attr: str, value: object, node: Optional[DevfreqNode] = None) -> None:
        path = self._path(attr, node)
        text = str(value)
        try:
            with open(path, "w") as fh:
                fh.write(text)
        except PermissionError:
            raise DeviceError(
                "cannot write {}: permission denied; run as root or grant write access "
                "(e.g. udev rule/chmod)".format(path)
            ) from None
        except OSError as exc:
            raise DeviceError("cannot write {}: {}".format(path, exc.strerror or exc)) from exc
        self.writes.append((path, text))

    def _write_to(self, node: DevfreqNode, attr: str, value: object) -> None:
        if self._is_primary(node):
            self._write(attr, value)
        else:
            self._write(attr, value, node)

    def _set_bounds(self, new_min: int, new_max: int, node: Optional[DevfreqNode] = None) -> None:
        """Write min/max in the order JetPack 4's kernel accepts (it rejects min > max at every
        step); a PM-QoS kernel accepts any order, so the same order serves it.

        Writing max first is valid when the new max is not below the current min (raising);
        otherwise (lowering below the current min) min must go first.
        """
        with self._io, deferred_signals():
            if new_max >= self._read_hz("min_freq", node):
                self._write_to(node or self.node, "max_freq", new_max)
                self._write_to(node or self.node, "min_freq", new_min)
            else:
                self._write_to(node or self.node, "min_freq", new_min)
                self._write_to(node or self.node, "max_freq", new_max)

    def _bounds_to(self, node: DevfreqNode, new_min: int, new_max: int) -> None:
        if self._is_primary(node):
            self._set_bounds(new_min, new_max)
        else:
            self._set_bounds(new_min, new_max, node)

    def _governor(self, node: Optional[DevfreqNode] = None) -> Optional[str]:
        try:
            return read_text(self._path("governor", node))
        except OSError:
            return None

    def _read_pair(self, node: DevfreqNode) -> Tuple[int, int]:
        return self._read_hz("min_freq", node), self._read_hz("max_freq", node)

    def _node_named(self, name: str, path: str) -> DevfreqNode:
        for node in self.nodes:
            if node.name == name:
                return node
        where = os.path.join(under(self.sysfs_root, "sys/class/devfreq"), name)
        if not os.path.isdir(where):
            raise DeviceError(
                "devfreq node {} named in clock state {} is missing ({} does not exist); wait "
                "for it (powerfleet restore --wait-s) or check the board".format(name, path, where)
            )
        return DevfreqNode(where, name, "")

    # -- what is offered, and what ties the state file to this board ------------------------
    def frequencies(self) -> List[float]:
        return [hz / 1e6 for hz in self._freqs_hz]

    def _match(self, freq_mhz: float) -> int:
        for hz in self._freqs_hz:
            if abs(hz - float(freq_mhz) * 1e6) < 10e3:  # profile CSVs round to 6 digits
                return hz
        raise DeviceError(
            "{} MHz is not in {}; valid MHz: {}".format(
                freq_mhz,
                self._path("available_frequencies"),
                ", ".join("{:g}".format(f) for f in self.frequencies()),
            )
        )

    def identity(self) -> Dict[str, Any]:
        """What ties a state file to this board: sysfs root, devfreq node(s), model, table."""
        return {
            "backend": getattr(self, "name", "jetson"),
            "sysfs_root": os.path.realpath(self.sysfs_root),
            "devfreq": self.node.name,
            "devfreq_path": os.path.realpath(self.node.path),
            "devfreq_nodes": [n.name for n in self.nodes],
            "board": board_model(self.sysfs_root) or "",
            "available_hz": list(self._freqs_hz),
        }

    def clock_description(self) -> Dict[str, object]:
        """For ``describe()``: the nodes locked together, the kernel's rules, and the clamp
        the first lock found on the primary (``clamp_hz``), if any."""
        info = {
            "gpu_nodes": ",".join(n.name for n in self.nodes),
            "kernel_rules": self.kernel_rules,
        }  # type: Dict[str, object]
        if self.node.name in self.clamps_hz:
            info["clamp_hz"] = self.clamps_hz[self.node.name]
        return info

    # -- the originals --------------------------------------------------------------------------
    def _original(self, node: DevfreqNode) -> Dict[str, Any]:
        """The node's user bounds and governor as they are before the first lock (see the
        module docstring for the probe on PM-QoS kernels). Leaves the user's requests as found."""
        table = self._tables[node.name]
        low, top = table[0], table[-1]
        mn, mx = self._read_pair(node)
        entry = {"devfreq": node.name, "min_freq": mn, "max_freq": mx}  # type: Dict[str, Any]
        entry["governor"] = self._governor(node)
        if self.kernel_rules != "pmqos" or mx >= top:
            return entry
        with self._io, deferred_signals():
            self._write_to(node, "max_freq", top)
            seen = self._read_resolved_max(node, top)
            if seen > mx:  # the read rose: mx was the user's own limit; put it back
                self._write_to(node, "max_freq", mx)
                if seen < top:
                    entry["clamp_hz"] = seen  # and a clamp above it
            else:  # the kernel clamps: no user limit (the top is requested now, as before)
                entry["max_freq"] = top
                entry["clamp_hz"] = mx
                if mn >= mx:  # min reads clipped to the clamp: the user's floor is unknown
                    entry["min_freq"] = low
        if "clamp_hz" in entry:
            self.clamps_hz[node.name] = entry["clamp_hz"]
            log.warning(
                "%s: the kernel clamps the GPU at %g MHz (thermal or power-mode limit); not "
                "saved as a user limit",
                node.name,
                entry["clamp_hz"] / 1e6,
            )
        return entry

    def _read_resolved_max(self, node: DevfreqNode, written: int) -> int:
        """``max_freq`` after writing ``written``, once the kernel has resolved it: a clamp
        shows as a read below what was written. The PM-QoS aggregate may be applied after the
        write returns (a notifier; a kernel stand-in polling files), so a read still equal to
        the write is re-read for up to ``PROBE_SETTLE_S`` before it is taken as unclamped."""
        deadline = time.monotonic() + PROBE_SETTLE_S
        seen = self._read_hz("max_freq", node)
        while seen >= written and time.monotonic() < deadline:
            time.sleep(0.01)
            seen = self._read_hz("max_freq", node)
        return seen

    def _record(self, originals: List[Dict[str, Any]]) -> Dict[str, Any]:
        first = originals[0]
        record = {
            "min_freq": first["min_freq"],
            "max_freq": first["max_freq"],
            "governor": first.get("governor"),
            "nodes": originals,
            "kernel_rules": self.kernel_rules,
        }  # type: Dict[str, Any]
        if "clamp_hz" in first:
            record["clamp_hz"] = first["clamp_hz"]
        return record

    def _apply(self, node: DevfreqNode, new_min: int, new_max: int, governor: Any) -> None:
        # Bounds already as saved are left unwritten: a lock that failed at its first write
        # left them so, and a node that refuses writes must not fail the restore of nothing.
        if self._read_pair(node) != (new_min, new_max):
            self._bounds_to(node, new_min, new_max)
        if governor and self._governor(node) != governor:
            self._write_to(node, "governor", governor)

    def _apply_all(self, entries: List[Dict[str, Any]], path: str) -> None:
        """Put every node's saved bounds back; a failing node does not stop the others (the
        first error is raised after all were tried, and the state file then stays)."""
        error = None  # type: Optional[DeviceError]
        for entry in entries:
            try:
                node = self._node_named(str(entry["devfreq"]), path)
                self._apply(
                    node, int(entry["min_freq"]), int(entry["max_freq"]), entry.get("governor")
                )
            except DeviceError as exc:
                error = error or exc
        if error is not None:
            raise error

    # -- lock and restore -----------------------------------------------------------------------
    def recover(self) -> Optional[Dict[str, Any]]:
        """Put back the clocks a killed run saved in the state file; None when there is none.

        A state file from another board raises DeviceError naming it and changes nothing, and
        so does one whose writer still runs (its clocks are in use, not abandoned). One written
        by this very process (a second backend on the same board) is adopted instead: its
        originals become this backend's, and the clocks are left as they are.
        """
        with self._io:
            record = clockstate.load(self.state_dir)
            if record is None:
                return None
            path = clockstate.state_path(self.state_dir)
            clockstate.check_identity(record, self.identity(), path)
            entries = [dict(e) for e in record["nodes"]]
            owner = liveness.holder(record)
            if owner == "self":
                self._originals = entries
                return None
            if owner == "alive":
                raise DeviceError(
                    "GPU clocks of {} are held by running process {} (state {}); stop it first, "
                    "or remove the file if that process is not powerfleet".format(
                        self.node.name, record.get("pid"), path
                    )
                )
            self._apply_all(entries, path)
            clockstate.remove(self.state_dir)
        for entry in entries:
            if entry.get("clamp_hz"):
                self.clamps_hz.setdefault(str(entry["devfreq"]), int(entry["clamp_hz"]))
        sys.stderr.write(
            "powerfleet: restored GPU clocks of {} from {} left by an interrupted run{}\n".format(
                clockstate.said(entries), path, clockstate.clamps_said(entries)
            )
        )
        return record

    def lock(self, freq_mhz: float, settle: bool = False) -> bool:
        """Pin the GPU at ``freq_mhz`` (every node: see the module docstring); with ``settle``,
        also ``wait_settled()``.

        Returns whether the clock is known to have settled (always True without ``settle``).
        Before the first write the original bounds go to the state file; a failed write pair
        is rolled back, so a refused lock leaves the clocks and the state as they were.
        """
        hz = self._match(freq_mhz)
        with self._io:
            if self._closed:
                raise DeviceError("device is being released: no new clock lock")
            fresh = self._originals is None
            before = None  # type: Optional[Dict[str, Tuple[int, int]]]
            try:
                before = dict((n.name, self._read_pair(n)) for n in self.nodes)
            except DeviceError:
                before = None  # unreadable: the write below fails and says why
            if fresh:
                originals = [self._original(n) for n in self.nodes]
                clockstate.save(self.state_dir, self.identity(), self._record(originals))
                self._originals = originals
            try:
                for node in self.nodes:
                    f = hz if self._is_primary(node) else pin_hz(self._tables[node.name], hz)
                    self._bounds_to(node, f, f)
                    self._pinned[node.name] = (f, f)
            except DeviceError:
                self._roll_back(before, fresh)
                raise
            self._target_hz = hz
        return self.wait_settled() if settle else True

    def _roll_back(self, before: Optional[Dict[str, Tuple[int, int]]], fresh: bool) -> None:
        """Undo a half-done lock; forget the saved originals if the first lock never took.

        A node whose reads changed gets its user requests back: the originals on a first lock
        (never the reads, which on a PM-QoS kernel may be a clamp), else the previous pin.
        """
        if before is None:
            return
        saved = dict((e["devfreq"], e) for e in self._originals or ())
        try:
            for node in self.nodes:
                if self._read_pair(node) == before[node.name]:
                    continue
                entry = saved.get(node.name) if fresh else None
                if entry is not None:
                    self._bounds_to(node, int(entry["min_freq"]), int(entry["max_freq"]))
                else:
                    self._bounds_to(node, *self._pinned.get(node.name, before[node.name]))
        except DeviceError:
            return  # could not even put it back: keep the state file for the next start
        if fresh:
            self._originals = None
            self._pinned = {}
            clockstate.remove(self.state_dir)

    def wait_settled(self, timeout_s: Optional[float] = None) -> bool:
        """Wait until the primary's ``cur_freq`` equals the locked target (at most
        ``timeout_s``).

        Returns True once settled (or when nothing is locked, or ``cur_freq`` is not exposed),
        False on timeout, with a warning: the caller then knows its first samples may be off.
        ``settle_s`` records how long it took.
        """
        target = self._target_hz
        start = time.monotonic()
        self.settle_s = 0.0
        if target is None:
            return True
        limit = self.settle_timeout_s if timeout_s is None else float(timeout_s)
        while True:
            try:
                cur = self._read_hz("cur_freq")
            except DeviceError:
                return True  # not exposed: nothing to wait for
            if abs(cur - target) < 1e6:  # the clock framework may round a few Hz off
                self.settle_s = time.monotonic() - start
                return True
            if time.monotonic() - start >= limit:
                self.settle_s = None
                log.warning(
                    "cur_freq is %g MHz, not the locked %g MHz, after %.2f s",
                    cur / 1e6,
                    target / 1e6,
                    limit,
                )
                return False
            time.sleep(0.005)

    def restore(self) -> None:
        with self._io:
            self._target_hz = None
            if self._originals is None:
                return
            self._apply_all(self._originals, clockstate.state_path(self.state_dir))
            self._originals = None
            self._pinned = {}
            clockstate.remove(self.state_dir)

    def bounds(self) -> Dict[str, Any]:
        """The primary's bounds in force now: ``min_freq``/``max_freq`` in Hz and the governor."""
        return self.node_bounds(self.node)

    def node_bounds(self, node: DevfreqNode) -> Dict[str, Any]:
        mn, mx = self._read_pair(node)
        return {"min_freq": mn, "max_freq": mx, "governor": self._governor(node)}

    def all_bounds(self) -> Dict[str, Dict[str, Any]]:
        """Every locked node's bounds now, by devfreq entry name."""
        return dict((n.name, self.node_bounds(n)) for n in self.nodes)

    def shutdown(self) -> None:
        """Restore and refuse any later lock: the process is on its way out."""
        with self._io:
            self._closed = True
            self.restore()

    def current_mhz(self) -> Optional[float]:
        """The frequency the GPU runs at now (``cur_freq``), or None where not exposed."""
        try:
            return self._read_hz("cur_freq") / 1e6
        except DeviceError:
            return None


class DevfreqClocks(DevfreqClockLock):
    """The clock lock alone, with no power sensor: what ``powerfleet restore`` and ``doctor``
    need (a board whose sensor is missing or broken must still get its clocks back).
    Constructing it restores from a state file a killed run left (``recovered``)."""

    name = "jetson"

    def __init__(
        self,
        sysfs_root: str = "/",
        gpu_node: Optional[str] = None,
        state_dir: Optional[str] = None,
        settle_timeout_s: float = SETTLE_TIMEOUT_S,
    ) -> None:
        self.sysfs_root = sysfs_root
        self.node = find_gpu_devfreq(sysfs_root, gpu_node)
        self._init_clocks(gpu_node, state_dir, settle_timeout_s)
        self.recovered = self.recover()
