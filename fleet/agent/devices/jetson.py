"""NVIDIA Jetson backend: lock the GPU clock through devfreq, save and restore the originals.

Why sysfs and not jetson_clocks/nvpmodel: the profile needs every GPU frequency the board offers,
one at a time, and devfreq's ``min_freq``/``max_freq`` pin it exactly without touching CPU or EMC
clocks. What this module holds is the clock lock and its safety; the pieces it stands on live
apart: which devfreq node is the GPU and its frequency table (``devfreq.py``), the INA3221 rails
and their watts (``power_rails.py``), which board this is (``board_identity.py``), the sysfs
readers under ``sysfs_root`` (``sysfs.py``) and the state file (``clockstate.py``).

Crash safety (docs/architecture.md, device backends): the original bounds and governor are saved
to a state file (``clockstate``) before the first write and the file is deleted after the restore;
constructing the backend first restores from a file a killed run left behind (saying so on
stderr), so pinned values are never taken for originals. The min/max pair is written under the
backend's lock and inside ``guard.deferred_signals()``, so a signal cannot split it. After a lock,
``wait_settled()`` waits (bounded) until ``cur_freq`` reaches the target, so that measurements
start at the clock they are attributed to.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import logging
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import clockstate
from .base import Backend, BackendSpec, Capabilities, DeviceError, Option
from .board_identity import board_model, board_serial, device_type, l4t_release
from .board_power import open_power
from .devfreq import available_hz, find_gpu_devfreq
from .guard import deferred_signals
from .sysfs import read_number, read_text

log = logging.getLogger("fleet.agent")

#: Default bound on waiting for ``cur_freq`` to reach a locked target (devfreq switches in ms).
SETTLE_TIMEOUT_S = 1.0


class JetsonBackend(Backend):
    """Jetson GPU via devfreq + INA3221. Records every sysfs write in ``writes`` (path, value).

    The original ``min_freq``/``max_freq``/``governor`` are captured at the first lock, saved
    to ``state_dir`` and put back by ``restore()``; process-level exit paths are covered by
    ``guard``, a SIGKILL by the state file (the next construction restores from it; the record
    it restored from is in ``recovered``). ``settle_timeout_s`` bounds ``wait_settled()``.
    """

    name = "jetson"

    def __init__(
        self,
        sysfs_root: str = "/",
        rail: Optional[str] = None,
        gpu_node: Optional[str] = None,
        state_dir: Optional[str] = None,
        settle_timeout_s: float = SETTLE_TIMEOUT_S,
    ) -> None:
        self.sysfs_root = sysfs_root
        self.node = find_gpu_devfreq(sysfs_root, gpu_node)
        # The rails whose sum is the board's power; none on a board without a sensor (Nano
        # 2GB): the clocks still lock, and ``power_unavailable`` says why there is no reading.
        self.power = open_power(sysfs_root, rail, self.node.name)
        self.rail = self.power if self.power.rails else None
        self.power_unavailable = self.power.unavailable  # type: Optional[str]
        self.sensor_period_s = self.power.period_s  # type: Optional[float]
        self.writes = []  # type: List[Tuple[str, str]]
        self._originals = None  # type: Optional[Tuple[int, int, Optional[str]]]
        self._freqs_hz = available_hz(self.node)
        self.state_dir = state_dir or clockstate.default_state_dir(sysfs_root)
        self.settle_timeout_s = float(settle_timeout_s)
        self._io = threading.RLock()  # one write pair at a time, whichever thread writes
        self._target_hz = None  # type: Optional[int]
        self._closed = False
        self.settle_s = None  # type: Optional[float]  # how long the last wait_settled took
        self.recovered = self.recover()

    # -- paths and small I/O helpers ------------------------------------------------------------
    def _path(self, attr: str) -> str:
        return os.path.join(self.node.path, attr)

    def _read_hz(self, attr: str) -> int:
        return int(read_number(self._path(attr)))

    def _write(self, attr: str, value: object) -> None:
        path = self._path(attr)
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

    def _set_bounds(self, new_min: int, new_max: int) -> None:
        """Write min/max in the order the kernel accepts (it rejects min > max at every step).

        Writing max first is valid when the new max is not below the current min (raising);
        otherwise (lowering below the current min) min must go first.
        """
        with self._io, deferred_signals():
            if new_max >= self._read_hz("min_freq"):
                self._write("max_freq", new_max)
                self._write("min_freq", new_min)
            else:
                self._write("min_freq", new_min)
                self._write("max_freq", new_max)

    def _governor(self) -> Optional[str]:
        try:
            return read_text(self._path("governor"))
        except OSError:
            return None

    # -- Backend interface ----------------------------------------------------------------------
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
        """What ties a state file to this board: sysfs root, devfreq node, model, table."""
        board = board_model(self.sysfs_root) or ""
        return {
            "backend": self.name,
            "sysfs_root": os.path.realpath(self.sysfs_root),
            "devfreq": self.node.name,
            "devfreq_path": os.path.realpath(self.node.path),
            "board": board,
            "available_hz": list(self._freqs_hz),
        }

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
            owner = clockstate.holder(record)
            if owner == "self":
                self._originals = (
                    int(record["min_freq"]),
                    int(record["max_freq"]),
                    record.get("governor"),
                )
                return None
            if owner == "alive":
                raise DeviceError(
                    "GPU clocks of {} are held by running process {} (state {}); stop it first, "
                    "or remove the file if that process is not powerfleet".format(
                        self.node.name, record.get("pid"), path
                    )
                )
            governor = record.get("governor")
            self._apply(int(record["min_freq"]), int(record["max_freq"]), governor)
            clockstate.remove(self.state_dir)
        sys.stderr.write(
            "powerfleet: restored GPU clocks of {} from {} (min {:g} MHz, max {:g} MHz{}) left "
            "by an interrupted run\n".format(
                self.node.name,
                path,
                record["min_freq"] / 1e6,
                record["max_freq"] / 1e6,
                ", governor {}".format(governor) if governor else "",
            )
        )
        return record

    def _apply(self, new_min: int, new_max: int, governor: Optional[str]) -> None:
        self._set_bounds(new_min, new_max)
        if governor is not None and self._governor() != governor:
            self._write("governor", governor)

    def lock(self, freq_mhz: float, settle: bool = False) -> bool:
        """Pin the GPU at ``freq_mhz``; with ``settle``, also ``wait_settled()``.

        Returns whether the clock is known to have settled (always True without ``settle``).
        Before the first write the original bounds go to the state file; a failed write pair
        is rolled back, so a refused lock leaves the clocks and the state as they were.
        """
        hz = self._match(freq_mhz)
        with self._io:
            if self._closed:
                raise DeviceError("device is being released: no new clock lock")
            fresh = self._originals is None
            if fresh:
                originals = (
                    self._read_hz("min_freq"),
                    self._read_hz("max_freq"),
                    self._governor(),
                )
                clockstate.save(
                    self.state_dir,
                    self.identity(),
                    {"min_freq": originals[0], "max_freq": originals[1], "governor": originals[2]},
                )
                self._originals = originals
            try:
                before = (
                    self._read_hz("min_freq"),
                    self._read_hz("max_freq"),
                )  # type: Optional[Tuple[int, int]]
            except DeviceError:
                before = None  # unreadable: the write below fails and says why
            try:
                self._set_bounds(hz, hz)
            except DeviceError:
                self._roll_back(before, fresh)
                raise
            self._target_hz = hz
        return self.wait_settled() if settle else True

    def _roll_back(self, before: Optional[Tuple[int, int]], fresh: bool) -> None:
        """Undo a half-written pair; forget the saved originals if the first lock never took."""
        if before is None:
            return
        try:
            now = (self._read_hz("min_freq"), self._read_hz("max_freq"))
            if now != before:
                self._set_bounds(before[0], before[1])
                now = before
        except DeviceError:
            return  # could not even put it back: keep the state file for the next start
        if fresh and now == before:
            self._originals = None
            clockstate.remove(self.state_dir)

    def wait_settled(self, timeout_s: Optional[float] = None) -> bool:
        """Wait until ``cur_freq`` equals the locked target (at most ``timeout_s``).

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
            orig_min, orig_max, governor = self._originals
            self._apply(orig_min, orig_max, governor)
            self._originals = None
            clockstate.remove(self.state_dir)

    def bounds(self) -> Dict[str, Any]:
        """The bounds in force now: ``min_freq``/``max_freq`` in Hz and the governor."""
        return {
            "min_freq": self._read_hz("min_freq"),
            "max_freq": self._read_hz("max_freq"),
            "governor": self._governor(),
        }

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

    def read_power_w(self) -> Optional[float]:
        """The board's power now (the sum of its total's rails); None without a sensor."""
        return self.power.read_w()

    def describe(self) -> Dict[str, object]:
        info = {
            "backend": self.name,
            "devfreq": self.node.name,
            "of_node": self.node.of_node,
        }  # type: Dict[str, object]
        info.update(self.power.describe())
        model = board_model(self.sysfs_root)
        if model is not None:
            info["board"] = model
        board = model or ""
        kind = device_type(self.node.name, self.node.of_node, board)
        if kind:
            info["device"] = kind
        # Provenance for the coordinator's profile store: empty where the board does not say.
        info["l4t"] = l4t_release(self.sysfs_root)
        info["serial"] = board_serial(self.sysfs_root)
        return info


# What this backend offers every surface (CLI flags, agent argv, node config): see
# docs/architecture.md, "Adding a device backend".
SPEC = BackendSpec(
    name="jetson",
    factory=JetsonBackend,
    options=(
        Option("sysfs_root", str, "prefix for sysfs paths (copied trees, dry runs)", "/"),
        Option(
            "rail",
            str,
            "power rail, e.g. VDD_IN, or a sum GPU+CPU+SOC (default: the board's total)",
        ),  # fmt: skip
        Option("gpu_node", str, "devfreq entry of the GPU, e.g. 57000000.gpu (default: found)"),
        Option("state_dir", str, "where original clocks are saved (see powerfleet restore)"),
        Option("settle_timeout_s", float, "longest wait for cur_freq to reach a lock (s)"),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cuda"),
    summary="NVIDIA Jetson: devfreq clocks, INA3221/INA238 power rails",
)
