"""NVIDIA Jetson backend: GPU frequency through devfreq sysfs, power from the INA3221 monitor.

Why sysfs and not jetson_clocks/nvpmodel: the profile needs every GPU frequency the board offers,
one at a time, and devfreq's ``min_freq``/``max_freq`` pin it exactly without touching CPU or EMC
clocks. The files live under different names on each module (Nano ``57000000.gpu``, TX2/TX2 NX
``17000000.gp10b``, Orin ``17000000.ga10b``) and the power monitor moved from an out-of-tree iio
driver (``ina3221x``, JetPack 4) to the mainline hwmon one (``ina3221``, JetPack 5+), so both are
discovered rather than hard-coded. Every path is prefixed by ``sysfs_root`` so tests and dry runs
work on a copied tree.

Crash safety (docs/architecture.md, device backends): the original bounds and governor are saved
to a state file (``clockstate``) before the first write and the file is deleted after the restore;
constructing the backend first restores from a file a killed run left behind (saying so on
stderr), so pinned values are never taken for originals. The min/max pair is written under the
backend's lock and inside ``guard.deferred_signals()``, so a signal cannot split it. After a lock,
``wait_settled()`` waits (bounded) until ``cur_freq`` reaches the target, so that measurements
start at the clock they are attributed to.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import glob
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import clockstate
from .base import Backend, BackendSpec, Capabilities, DeviceError, Option
from .guard import deferred_signals

log = logging.getLogger("fleet.agent")

#: Default bound on waiting for ``cur_freq`` to reach a locked target (devfreq switches in ms).
SETTLE_TIMEOUT_S = 1.0

# Substrings of devfreq entry names (or of_node names) that denote the integrated GPU.
GPU_NODE_TOKENS = ("gpu", "gp10b", "ga10b", "gv11b", "gm20b")
# Board input rails, in order of preference: old iio layout (Nano, TX2 NX), then newer boards.
DEFAULT_RAILS = ("POM_5V_IN", "VDD_IN")

Rail = NamedTuple(
    "Rail",
    [
        ("name", str),
        ("layout", str),  # "iio-ina3221x" or "hwmon-ina3221"
        ("power_path", Optional[str]),  # mW (iio only)
        ("voltage_path", Optional[str]),  # mV
        ("current_path", Optional[str]),  # mA
    ],
)

DevfreqNode = NamedTuple("DevfreqNode", [("path", str), ("name", str), ("of_node", str)])


def _under(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def _read_text(path: str) -> str:
    """Read a sysfs/device-tree attribute; device-tree strings end in NUL, sysfs in newline."""
    with open(path, "r") as fh:
        return fh.read().strip("\x00\n\r\t ")


def _read_number(path: str) -> float:
    try:
        text = _read_text(path)
    except OSError as exc:
        raise DeviceError("cannot read {}: {}".format(path, exc.strerror or exc)) from exc
    try:
        return float(text)
    except ValueError:
        raise DeviceError("{}: expected a number, got {!r}".format(path, text[:40])) from None


def _is_gpu_name(name: str) -> bool:
    low = name.lower()
    return any(tok in low for tok in GPU_NODE_TOKENS)


def find_gpu_devfreq(sysfs_root: str = "/", gpu_node: Optional[str] = None) -> DevfreqNode:
    """Locate the GPU's devfreq directory under ``<root>/sys/class/devfreq``.

    The device-tree ``of_node/name`` is checked first (it says "gpu" on Nano and TX2), then the
    entry name. ``gpu_node`` forces a particular entry.
    """
    base = _under(sysfs_root, "sys/class/devfreq")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    candidates = []  # type: List[Tuple[int, DevfreqNode]]
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            of_name = _read_text(os.path.join(path, "device", "of_node", "name"))
        except OSError:
            of_name = ""
        node = DevfreqNode(path, entry, of_name)
        if gpu_node is not None:
            if entry == gpu_node:
                return node
            continue
        if of_name and _is_gpu_name(of_name):
            candidates.append((0, node))
        elif _is_gpu_name(entry):
            candidates.append((1, node))
    if gpu_node is not None:
        raise DeviceError(
            "devfreq node {!r} not found in {}; entries there: {}".format(
                gpu_node, base, ", ".join(entries) or "none"
            )
        )
    if not candidates:
        raise DeviceError(
            "no GPU devfreq node in {}: expected an entry like 57000000.gpu, 17000000.gp10b or "
            "17000000.ga10b, or one whose device/of_node/name is 'gpu' (found: {})".format(
                base, ", ".join(entries) or "none"
            )
        )
    candidates.sort(key=lambda c: c[0])
    return candidates[0][1]


def _iio_rails(sysfs_root: str) -> List[Rail]:
    rails = []  # type: List[Rail]
    pattern = _under(sysfs_root, "sys/bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_*")
    for label_path in sorted(glob.glob(pattern)):
        directory, fname = os.path.split(label_path)
        chan = fname[len("rail_name_") :]
        if not chan.isdigit():
            continue
        try:
            name = _read_text(label_path)
        except OSError:
            continue
        power = os.path.join(directory, "in_power{}_input".format(chan))
        volt = os.path.join(directory, "in_voltage{}_input".format(chan))
        curr = os.path.join(directory, "in_current{}_input".format(chan))
        has_power = os.path.isfile(power)
        has_vi = os.path.isfile(volt) and os.path.isfile(curr)
        if not (has_power or has_vi):
            continue
        rails.append(
            Rail(
                name,
                "iio-ina3221x",
                power if has_power else None,
                volt if has_vi else None,
                curr if has_vi else None,
            )
        )
    return rails


def _hwmon_dirs(sysfs_root: str) -> List[str]:
    dirs = sorted(glob.glob(_under(sysfs_root, "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*")))
    for cand in sorted(glob.glob(_under(sysfs_root, "sys/class/hwmon/hwmon*"))):
        try:
            if _read_text(os.path.join(cand, "name")) == "ina3221":
                dirs.append(cand)
        except OSError:
            continue
    unique = []  # type: List[str]
    seen = set()
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            unique.append(d)
    return unique


def _hwmon_rails(sysfs_root: str) -> List[Rail]:
    rails = []  # type: List[Rail]
    for directory in _hwmon_dirs(sysfs_root):
        for label_path in sorted(glob.glob(os.path.join(directory, "in*_label"))):
            chan = os.path.basename(label_path)[2 : -len("_label")]
            if not chan.isdigit():
                continue
            volt = os.path.join(directory, "in{}_input".format(chan))
            curr = os.path.join(directory, "curr{}_input".format(chan))
            if not (os.path.isfile(volt) and os.path.isfile(curr)):
                continue
            try:
                name = _read_text(label_path)
            except OSError:
                continue
            rails.append(Rail(name, "hwmon-ina3221", None, volt, curr))
    return rails


def find_rails(sysfs_root: str = "/") -> List[Rail]:
    """All INA3221 rails on the board, old iio layout first; the first of each name wins."""
    rails = []  # type: List[Rail]
    names = set()
    for rail in _iio_rails(sysfs_root) + _hwmon_rails(sysfs_root):
        if rail.name not in names:
            names.add(rail.name)
            rails.append(rail)
    return rails


def choose_rail(rails: List[Rail], wanted: Optional[str], sysfs_root: str = "/") -> Rail:
    """Pick the named rail (case-insensitive) or the board input rail by default."""
    if not rails:
        raise DeviceError(
            "no INA3221 power rail under {}: expected iio ina3221x rail_name_N + in_powerN_input "
            "or hwmon ina3221 inN_label + inN_input + currN_input".format(
                _under(sysfs_root, "sys/bus/i2c/drivers")
            )
        )
    by_name = {r.name.upper(): r for r in rails}
    found = ", ".join(r.name for r in rails)
    if wanted is not None:
        rail = by_name.get(wanted.upper())
        if rail is None:
            raise DeviceError("rail {!r} not found; INA3221 rails found: {}".format(wanted, found))
        return rail
    for name in DEFAULT_RAILS:
        if name in by_name:
            return by_name[name]
    raise DeviceError(
        "no board input rail ({}) among INA3221 rails: {}; choose one by name".format(
            " or ".join(DEFAULT_RAILS), found
        )
    )


def read_rail_w(rail: Rail) -> float:
    """Instantaneous rail power in watts (iio in_power is mW; otherwise mV x mA = uW)."""
    if rail.power_path is not None:
        return _read_number(rail.power_path) / 1000.0
    assert rail.voltage_path is not None and rail.current_path is not None
    return _read_number(rail.voltage_path) * _read_number(rail.current_path) / 1e6


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
        self.rail = choose_rail(find_rails(sysfs_root), rail, sysfs_root)
        self.writes = []  # type: List[Tuple[str, str]]
        self._originals = None  # type: Optional[Tuple[int, int, Optional[str]]]
        self._freqs_hz = self._available_hz()
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

    def _available_hz(self) -> List[int]:
        path = self._path("available_frequencies")
        try:
            text = _read_text(path)
        except OSError as exc:
            raise DeviceError("cannot read {}: {}".format(path, exc.strerror or exc)) from exc
        try:
            values = sorted(set(int(float(tok)) for tok in text.split()))
        except ValueError:
            raise DeviceError(
                "{}: expected space-separated Hz values, got {!r}".format(path, text[:60])
            ) from None
        if not values:
            raise DeviceError("{}: empty, expected space-separated Hz values".format(path))
        return values

    def _read_hz(self, attr: str) -> int:
        return int(_read_number(self._path(attr)))

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
            return _read_text(self._path("governor"))
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
        try:
            board = _read_text(_under(self.sysfs_root, "proc/device-tree/model"))
        except OSError:
            board = ""
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
        return read_rail_w(self.rail)

    def describe(self) -> Dict[str, object]:
        info = {
            "backend": self.name,
            "devfreq": self.node.name,
            "of_node": self.node.of_node,
            "rail": self.rail.name,
            "sensor": self.rail.layout,
        }  # type: Dict[str, object]
        board = ""
        try:
            board = _read_text(_under(self.sysfs_root, "proc/device-tree/model"))
            info["board"] = board
        except OSError:
            pass
        kind = device_type(self.node.name, self.node.of_node, board)
        if kind:
            info["device"] = kind
        # Provenance for the coordinator's profile store: empty where the board does not say.
        info["l4t"] = l4t_release(self.sysfs_root)
        try:
            info["serial"] = _read_text(_under(self.sysfs_root, "proc/device-tree/serial-number"))
        except (OSError, UnicodeDecodeError):
            info["serial"] = ""
        return info


def l4t_release(root: str) -> str:
    """The L4T version from ``etc/nv_tegra_release`` under ``root`` ("32.7.1"), or ''.

    The file's first line reads ``# R32 (release), REVISION: 7.1, GCID: ...``.
    """
    try:
        with open(_under(root, "etc/nv_tegra_release"), "r") as fh:
            line = fh.readline()
    except (OSError, UnicodeDecodeError):
        return ""
    major = re.search(r"R(\d+)", line)
    rev = re.search(r"REVISION:\s*([0-9.]+)", line)
    if not major:
        return ""
    return major.group(1) + ("." + rev.group(1).rstrip(".") if rev else "")


def device_type(node_name: str, of_node: str, board: str = "") -> str:
    """The fleet's device-type name for this GPU ('jetson-nano', ...), or '' if unknown.

    Profiles record it in their ``device`` column so that a profile measured on a board and a
    fleet entry of that type recognise each other (and a mismatch is caught).
    """
    text = " ".join((node_name, of_node, board)).lower()
    b = board.lower()
    if "ga10b" in text or "orin" in b:  # first: an "Orin Nano" is not a Nano
        return "jetson-orin"
    if "gp10b" in text or "tx2" in b:
        return "jetson-tx2" if "tx2" in b and "nx" not in b else "jetson-tx2nx"
    if "gm20b" in text or "57000000.gpu" in text or "nano" in b:
        return "jetson-nano"
    return ""


# What this backend offers every surface (CLI flags, agent argv, node config): see
# docs/architecture.md, "Adding a device backend".
SPEC = BackendSpec(
    name="jetson",
    factory=JetsonBackend,
    options=(
        Option("sysfs_root", str, "prefix for sysfs paths (copied trees, dry runs)", "/"),
        Option("rail", str, "power rail name, e.g. POM_5V_IN or VDD_IN (default: the board's)"),
        Option("gpu_node", str, "devfreq entry of the GPU, e.g. 57000000.gpu (default: found)"),
        Option("state_dir", str, "where original clocks are saved (see powerfleet restore)"),
        Option("settle_timeout_s", float, "longest wait for cur_freq to reach a lock (s)"),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cuda"),
    summary="NVIDIA Jetson: devfreq clocks, INA3221 power rail",
)
