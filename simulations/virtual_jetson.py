"""A virtual Jetson: the board's sysfs tree as real files, plus a kernel stand-in that drives it.

Why: the hardware path (devfreq locking, INA3221 sampling, crash-safe clocks, settling, the
closed loop) must be tested end to end without a board. Mocks would only confirm what the code
already believes; this emulator instead behaves like the kernel a board owner meets:

* :func:`build_board` writes the tree of a Nano (``57000000.gpu``, old iio ``ina3221x`` with
  ``rail_name_N`` + ``in_powerN_input``), a TX2 NX (``17000000.gp10b``, same iio layout) or an
  Orin (``17000000.ga10b``, mainline hwmon ``ina3221`` with ``inN_label`` + ``inN_input`` x
  ``currN_input``, ``VDD_IN``). It is the one tree builder the tests use.
* :class:`Kernel` (a thread, or a separate process that survives an agent's SIGKILL) polls the
  files every few ms as devfreq would react to them: a requested ``min_freq`` is snapped up and
  ``max_freq`` down to ``available_frequencies``; a request that would leave min > max is
  rejected (the file is put back, as ``write()`` failing with EINVAL leaves it); ``cur_freq``
  reaches the effective target after a configurable lag; the board-input rail reports
  ``simulations.devicemodel``'s mean power for the board + workload at the *current* clock and
  the running batch size, times ``drift_scale``, plus ``drift_add_w`` and Gaussian noise.

Control (load, drift, noise, lag) goes through one JSON file,
``<root>/.virtual_jetson/control.json``, so a test steers a kernel running in another process
exactly as one in a thread: ``board.set_load(64)``, ``board.set_load(None)`` (idle),
``board.set_drift(add_w=0.8)``, ``board.set_drift(scale=1.2)``, ``board.set_noise(0.05)``;
``load_while_pinned=True`` runs the load only while the clock is pinned, so the board idles at
its owner's clocks (where the profiler reads the idle rail before its sweep).

Target clock: with min == max the clock is pinned there; with a range, the governor is modeled
as "busy -> max, idle -> min" (nvhost_podgov under a training load sits at the top).

Limitation: min and max are files, not syscalls, so a write the kernel would refuse can only be
noticed if a poll lands between the two writes of a pair; ``rejected`` counts what was seen. The
exact rule is :func:`kernel_accepts`, which replays a write log.

Usage::

    board = build_board(tmp_path, "nano", workload="small_cnn")
    with board.kernel(process=True, lag_s=0.05):
        board.set_load(32)
        ...  # run powerfleet against --sysfs-root tmp_path
        board.clocks()  # {"min_freq": ..., "max_freq": ..., "cur_freq": ..., "governor": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulations.devicemodel.boards import JETSON_NANO, Device
from simulations.devicemodel.fitted import DEVICES, WORKLOADS
from simulations.devicemodel.physics import dvfs_factor, mean_power_w

CONTROL_DIR = ".virtual_jetson"
CONTROL_FILE = "control.json"
STATUS_FILE = "status.json"
RAIL_MV = 5000  # the board input is a 5 V rail on every layout emulated here

#: Orin is emulated only (the device model has no calibrated Orin): a plausible power curve so
#: that power follows the clock on the hwmon layout; nothing in a profile comes from it.
JETSON_ORIN = Device(
    key="orin",
    name="jetson-orin",
    gpu="ga10b",
    devfreq_node="17000000.ga10b",
    freqs_mhz=(306.0, 408.0, 510.0, 612.0, 714.0, 816.0, 918.0, 1020.0, 1122.0, 1300.5),
    vf_knots=((306.0, 0.60), (714.0, 0.60), (1300.5, 0.80)),
    idle_w=3.5,
    host_scale=1.5,
    dyn_scale=0.45,
    compute_speed=4.0,
    memory_speed=4.0,
    fixed_scale=0.5,
    occupancy_scale=4.0,
)


def _hz(mhz: float) -> int:
    return int(round(mhz * 1e6))


@dataclass(frozen=True)
class BoardSpec:
    """What one module exposes: devfreq node, frequency table, rails and sensor layout."""

    key: str
    device: Device  # power model
    devfreq_node: str
    of_node: str | None  # device/of_node/name ("gpu" on Nano/TX2); Orin has none
    layout: str  # "iio" (JetPack 4 ina3221x) or "hwmon" (JetPack 5+ ina3221)
    bus: str  # i2c bus-address directory of the monitor
    rails: tuple[tuple[str, int, int, int], ...]  # initial (name, mW, mV, mA); first = input
    model_string: str | None  # /proc/device-tree/model
    governor: str = "nvhost_podgov"
    other_devfreq: tuple[tuple[str, tuple[int, ...]], ...] = ()  # other engines to skip

    @property
    def freqs_hz(self) -> tuple[int, ...]:
        return tuple(_hz(f) for f in self.device.freqs_mhz)


BOARDS: dict[str, BoardSpec] = {
    "nano": BoardSpec(
        key="nano",
        device=JETSON_NANO,
        devfreq_node="57000000.gpu",
        of_node="gpu",
        layout="iio",
        bus="6-0040",
        rails=(
            ("POM_5V_IN", 4321, 5000, 864),
            ("POM_5V_GPU", 1000, 5000, 200),
            ("POM_5V_CPU", 750, 5000, 150),
        ),
        model_string="NVIDIA Jetson Nano Developer Kit",
    ),
    "tx2nx": BoardSpec(
        key="tx2nx",
        device=DEVICES["tx2nx"],
        devfreq_node="17000000.gp10b",
        of_node="gp10b",
        layout="iio",
        bus="7-0040",
        rails=(
            ("POM_5V_IN", 6123, 5000, 1224),
            ("POM_5V_GPU", 2100, 5000, 420),
            ("POM_5V_CPU", 900, 5000, 180),
        ),
        model_string=None,
    ),
    "orin": BoardSpec(
        key="orin",
        device=JETSON_ORIN,
        devfreq_node="17000000.ga10b",
        of_node=None,
        layout="hwmon",
        bus="1-0040",
        rails=(
            ("VDD_IN", 0, 5072, 1471),
            ("VDD_CPU_GPU_CV", 0, 5064, 392),
            ("VDD_SOC", 0, 5070, 300),
        ),
        model_string=None,
        other_devfreq=(("15340000.vic", (115200000, 729600000)),),
    ),
}


# --------------------------------------------------------------------------------------------
# The tree (plain files)


def put(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_devfreq(
    root: Path,
    entry: str,
    hz: Sequence[int],
    of_name: str | None = None,
    governor: str = "nvhost_podgov",
) -> Path:
    """One devfreq node at min..max = full table, running at the top (order in file shuffled)."""
    d = Path(root) / "sys/class/devfreq" / entry
    shuffled = list(hz)[1:] + list(hz)[:1]  # the order in the file must not matter to readers
    put(d / "available_frequencies", " ".join(str(h) for h in shuffled) + "\n")
    put(d / "min_freq", f"{hz[0]}\n")
    put(d / "max_freq", f"{hz[-1]}\n")
    put(d / "cur_freq", f"{hz[-1]}\n")
    put(d / "governor", governor + "\n")
    if of_name is not None:
        put(d / "device/of_node/name", of_name + "\x00")
    return d


def write_iio_rails(
    root: Path, bus: str, rails: Sequence[tuple[str, int, int, int]], power: bool = True
) -> Path:
    """Old-style ina3221x iio device; rails: [(name, mW, mV, mA)]."""
    d = Path(root) / "sys/bus/i2c/drivers/ina3221x" / bus / "iio:device0"
    for n, (name, mw, mv, ma) in enumerate(rails):
        put(d / f"rail_name_{n}", name + "\n")
        if power:
            put(d / f"in_power{n}_input", f"{mw}\n")
        put(d / f"in_voltage{n}_input", f"{mv}\n")
        put(d / f"in_current{n}_input", f"{ma}\n")
    return d


def write_hwmon_rails(
    root: Path, bus: str, rails: Sequence[tuple[str, int, int]], via_class: bool = False
) -> Path:
    """Mainline ina3221 hwmon device (channels 1..3); rails: [(label, mV, mA)]."""
    if via_class:
        d = Path(root) / "sys/class/hwmon/hwmon2"
    else:
        d = Path(root) / "sys/bus/i2c/drivers/ina3221" / bus / "hwmon/hwmon3"
    put(d / "name", "ina3221\n")
    for n, (label, mv, ma) in enumerate(rails, start=1):
        put(d / f"in{n}_label", label + "\n")
        put(d / f"in{n}_input", f"{mv}\n")
        put(d / f"curr{n}_input", f"{ma}\n")
    put(d / "in7_input", "5000\n")  # unlabelled sum channel: not a rail
    return d


def build_board(
    root: str | Path, board: str = "nano", workload: str = "small_cnn", **control: Any
) -> VirtualBoard:
    """Write ``board``'s sysfs tree under ``root`` and its control file; return the handle.

    ``workload`` names a :mod:`simulations.devicemodel` workload (the power model of what the
    board is told is running); extra keywords set initial control values (see ``DEFAULTS``).
    """
    if board not in BOARDS:
        raise ValueError(f"unknown board {board!r}; valid: {', '.join(sorted(BOARDS))}")
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; valid: {', '.join(sorted(WORKLOADS))}")
    spec = BOARDS[board]
    root = Path(root)
    for entry, hz in spec.other_devfreq:
        write_devfreq(root, entry, hz)
    node = write_devfreq(root, spec.devfreq_node, spec.freqs_hz, spec.of_node, spec.governor)
    if spec.layout == "iio":
        write_iio_rails(root, spec.bus, spec.rails)
    else:
        hw = write_hwmon_rails(root, spec.bus, [(n, mv, ma) for n, _, mv, ma in spec.rails])
        (root / "sys/class/hwmon").mkdir(parents=True, exist_ok=True)
        link = root / "sys/class/hwmon/hwmon3"
        if not link.exists():
            os.symlink(str(hw), str(link))  # the same device seen twice, as on a real board
    if spec.model_string is not None:
        put(root / "proc/device-tree/model", spec.model_string + "\x00")
    vb = VirtualBoard(root, spec, node)
    vb.configure(workload=workload, **control)
    return vb


# --------------------------------------------------------------------------------------------
# Control and state

DEFAULTS: dict[str, Any] = {
    "workload": "small_cnn",
    "load": None,  # batch size running now, or None for idle
    # True: ``load`` runs only while the GPU clock is pinned (min == max), as the profiler and
    # the trainer lock before they run; at the owner's clocks the board is idle (idle rail)
    "load_while_pinned": False,
    "drift_add_w": 0.0,  # added to the modeled power (W)
    "drift_scale": 1.0,  # multiplies the modeled power
    "noise_w": 0.0,  # standard deviation of Gaussian noise on each reading (W)
    "lag_s": 0.05,  # cur_freq reaches a new target this long after it changed
    "poll_s": 0.005,  # kernel poll period
    "seed": 0,
}


@dataclass
class VirtualBoard:
    """Handle on a built tree: paths, control setters and readers for assertions."""

    root: Path
    spec: BoardSpec
    node: Path  # the GPU's devfreq directory

    @property
    def control_path(self) -> Path:
        return self.root / CONTROL_DIR / CONTROL_FILE

    @property
    def status_path(self) -> Path:
        return self.root / CONTROL_DIR / STATUS_FILE

    @property
    def freqs_hz(self) -> tuple[int, ...]:
        return self.spec.freqs_hz

    def control(self) -> dict[str, Any]:
        try:
            return {**DEFAULTS, **json.loads(self.control_path.read_text())}
        except (OSError, ValueError):
            return dict(DEFAULTS)

    def configure(self, **values: Any) -> None:
        """Change control values (atomically; a running kernel picks them up at its next poll)."""
        unknown = sorted(set(values) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown control key(s) {unknown}; valid: {sorted(DEFAULTS)}")
        data = self.control()
        data.update(values)
        _atomic_write(self.control_path, json.dumps(data, sort_keys=True))

    def set_load(self, batch_size: int | None) -> None:
        """Which batch size is training now (power follows), or None for idle."""
        self.configure(load=None if batch_size is None else int(batch_size))

    def set_drift(self, add_w: float = 0.0, scale: float = 1.0) -> None:
        """Measured = modeled x ``scale`` + ``add_w`` from now on (0, 1 removes the drift)."""
        self.configure(drift_add_w=float(add_w), drift_scale=float(scale))

    def set_noise(self, sd_w: float) -> None:
        self.configure(noise_w=float(sd_w))

    def read(self, attr: str) -> str:
        """One devfreq attribute; an empty read (a writer between truncate and write) retries."""
        for _ in range(100):
            text = (self.node / attr).read_text().strip()
            if text:
                return text
            time.sleep(0.001)
        return text

    def clocks(self) -> dict[str, Any]:
        """min/max/cur in Hz and the governor, as the files hold them now."""
        out: dict[str, Any] = {k: int(self.read(k)) for k in ("min_freq", "max_freq", "cur_freq")}
        out["governor"] = self.read("governor")
        return out

    def bounds(self) -> dict[str, Any]:
        """What a restore must bring back: min, max and governor (not cur_freq)."""
        c = self.clocks()
        return {k: c[k] for k in ("min_freq", "max_freq", "governor")}

    def input_rail_files(self) -> list[Path]:
        """The files the kernel writes for the board input rail (mW, or mV and mA)."""
        name = self.spec.rails[0][0]
        if self.spec.layout == "iio":
            d = self.root / "sys/bus/i2c/drivers/ina3221x" / self.spec.bus / "iio:device0"
            return [d / "in_power0_input", d / "in_voltage0_input", d / "in_current0_input"]
        d = self.root / "sys/bus/i2c/drivers/ina3221" / self.spec.bus / "hwmon/hwmon3"
        assert (d / "in1_label").read_text().strip() == name
        return [d / "in1_input", d / "curr1_input"]

    def power_w(self) -> float:
        """The board input rail as a reader computes it (mW, or mV x mA)."""
        files = self.input_rail_files()
        if self.spec.layout == "iio":
            return float(files[0].read_text()) / 1000.0
        return float(files[0].read_text()) * float(files[1].read_text()) / 1e6

    def model_power_w(self, freq_hz: int, load: int | None = None) -> float:
        """Noise- and drift-free power the kernel reports at ``freq_hz`` for ``load``."""
        return modeled_power_w(self.spec, self.control()["workload"], load, freq_hz)

    def idle_power_w(self) -> float:
        """What the idle board reports at its owner's clocks (the governor idles at min):
        the device model's ``idle_w`` plus the clocked-but-idle GPU share."""
        return self.model_power_w(int(self.read("min_freq")), None)

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    @contextmanager
    def kernel(self, process: bool = True, **control: Any) -> Iterator[Kernel]:
        """Run the kernel stand-in for the duration of the block (process or thread)."""
        if control:
            self.configure(**control)
        k = Kernel(self.root, process=process)
        k.start()
        try:
            yield k
        finally:
            k.stop()


def modeled_power_w(spec: BoardSpec, workload: str, load: int | None, freq_hz: int) -> float:
    """Board input power from the device model: training at ``load`` or idle (None).

    Idle is the board's idle power plus the clocked-but-idle GPU share (5 % of the workload's
    dynamic coefficient at that clock), so even an idle board draws a little more at high clocks.
    """
    w = WORKLOADS[workload]
    mhz = freq_hz / 1e6
    if load is None:
        return spec.device.idle_w + 0.05 * w.dyn_w * spec.device.dyn_scale * dvfs_factor(
            spec.device, mhz
        )
    return mean_power_w(spec.device, w, int(load), mhz)


def kernel_accepts(writes: Sequence[tuple[str, str]], start_min: int, start_max: int) -> bool:
    """Replay a write log as devfreq would: a write that makes min > max is rejected (EINVAL)."""
    cur = {"min_freq": start_min, "max_freq": start_max}
    for path, value in writes:
        attr = os.path.basename(path)
        if attr not in cur:
            continue
        trial = dict(cur)
        trial[attr] = int(value)
        if trial["min_freq"] > trial["max_freq"]:
            return False
        cur = trial
    return True


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# The kernel stand-in


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return int(float(text)) if text else None
    except (OSError, ValueError):
        return None  # mid-write (truncated) or unreadable: look again at the next poll


@dataclass
class _KernelState:
    eff_min: int
    eff_max: int
    seen_min: int
    seen_max: int
    cur: int
    target: int
    target_since: float
    rejected: int = 0
    snapped: int = 0
    ticks: int = 0
    last_power: dict[str, str] = field(default_factory=dict)


def run_kernel(root: str | Path, stop: threading.Event | None = None) -> None:
    """Poll ``root``'s board until ``stop`` is set (or forever in a kernel process)."""
    root = Path(root)
    ctl_path = root / CONTROL_DIR / CONTROL_FILE
    data = json.loads(ctl_path.read_text())
    board = _board_from_tree(root)
    spec = board.spec
    table = sorted(spec.freqs_hz)
    node = board.node
    rail_files = board.input_rail_files()
    ctl = {**DEFAULTS, **data}
    ctl_mtime = 0.0
    rng = random.Random(ctl["seed"])
    mn = _read_int(node / "min_freq") or table[0]
    mx = _read_int(node / "max_freq") or table[-1]
    cur = _read_int(node / "cur_freq") or table[-1]
    st = _KernelState(mn, mx, mn, mx, cur, cur, time.monotonic())
    last_status = 0.0
    stop = stop or threading.Event()
    while not stop.is_set():
        now = time.monotonic()
        try:
            m = ctl_path.stat().st_mtime
            if m != ctl_mtime:
                ctl = {**DEFAULTS, **json.loads(ctl_path.read_text())}
                ctl_mtime = m
        except (OSError, ValueError):
            pass
        _tick_bounds(node, table, st)
        load = ctl["load"]
        if ctl["load_while_pinned"] and st.eff_min != st.eff_max:
            load = None  # nothing runs at the owner's clocks: the board idles
        target = st.eff_max if load is not None else st.eff_min
        if target != st.target:
            st.target, st.target_since = target, now
        switch = st.cur != st.target and now - st.target_since >= float(ctl["lag_s"])
        if switch:
            st.cur = st.target
        watts = modeled_power_w(spec, ctl["workload"], load, st.cur)
        watts = watts * float(ctl["drift_scale"]) + float(ctl["drift_add_w"])
        if ctl["noise_w"]:
            watts += rng.gauss(0.0, float(ctl["noise_w"]))
        # Power first: once a reader sees cur_freq at the target, the rail already shows it.
        _write_power(spec, rail_files, max(watts, 0.0), st)
        if switch:
            _atomic_write(node / "cur_freq", f"{st.cur}\n")
        st.ticks += 1
        if now - last_status > 0.2:
            _write_status(root, st)
            last_status = now
        stop.wait(float(ctl["poll_s"]))
    _write_status(root, st)


def _snap(table: Sequence[int], value: int, up: bool) -> int:
    """devfreq's OPP rounding: a floor request rounds up, a ceiling request rounds down."""
    if up:
        return next((h for h in table if h >= value), table[-1])
    return next((h for h in reversed(table) if h <= value), table[0])


def _tick_bounds(node: Path, table: Sequence[int], st: _KernelState) -> None:
    raw_min = _read_int(node / "min_freq")
    raw_max = _read_int(node / "max_freq")
    if raw_min is None:
        raw_min = st.seen_min
    if raw_max is None:
        raw_max = st.seen_max
    if raw_min == st.seen_min and raw_max == st.seen_max:
        return
    new_min = _snap(table, raw_min, up=True)
    new_max = _snap(table, raw_max, up=False)
    if new_min > new_max:
        # EINVAL: the write that made min > max never took effect; show the old values again.
        st.rejected += 1
        for attr, value in (("min_freq", st.eff_min), ("max_freq", st.eff_max)):
            _atomic_write(node / attr, f"{value}\n")
        st.seen_min, st.seen_max = st.eff_min, st.eff_max
        return
    for attr, raw, new in (("min_freq", raw_min, new_min), ("max_freq", raw_max, new_max)):
        if raw != new:
            st.snapped += 1
            _atomic_write(node / attr, f"{new}\n")  # show the OPP actually in force
    st.eff_min, st.eff_max = new_min, new_max
    st.seen_min, st.seen_max = new_min, new_max


def _write_power(spec: BoardSpec, files: list[Path], watts: float, st: _KernelState) -> None:
    ma = watts * 1000.0 / (RAIL_MV / 1000.0)
    if spec.layout == "iio":
        values = [f"{int(round(watts * 1000))}", f"{RAIL_MV}", f"{int(round(ma))}"]
    else:
        values = [f"{RAIL_MV}", f"{int(round(ma))}"]
    for path, text in zip(files, values, strict=True):
        if st.last_power.get(path.name) != text:
            _atomic_write(path, text + "\n")
            st.last_power[path.name] = text


def _write_status(root: Path, st: _KernelState) -> None:
    status = {
        "pid": os.getpid(),
        "ticks": st.ticks,
        "rejected": st.rejected,
        "snapped": st.snapped,
        "eff_min": st.eff_min,
        "eff_max": st.eff_max,
        "cur": st.cur,
        "time": time.time(),
    }
    _atomic_write(root / CONTROL_DIR / STATUS_FILE, json.dumps(status))


def _board_from_tree(root: Path) -> VirtualBoard:
    for spec in BOARDS.values():
        node = root / "sys/class/devfreq" / spec.devfreq_node
        if (
            node.is_dir()
            and (spec.layout == "iio") == (root / "sys/bus/i2c/drivers/ina3221x").is_dir()
        ):
            return VirtualBoard(root, spec, node)
    raise ValueError(f"{root}: not a tree written by build_board")


class Kernel:
    """The stand-in as a thread (``process=False``) or a child process (default).

    A process is the realistic choice: it keeps running when the agent under test is
    SIGKILLed, and it competes for the CPU as a kernel would not, so its poll is light.
    """

    def __init__(self, root: str | Path, process: bool = True) -> None:
        self.root = Path(root)
        self.process = process
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, timeout_s: float = 10.0) -> Kernel:
        status = self.root / CONTROL_DIR / STATUS_FILE
        if status.exists():
            status.unlink()
        if self.process:
            repo = str(Path(__file__).resolve().parents[1])
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "simulations.virtual_jetson", "kernel", str(self.root)],
                env=env,
            )
        else:
            self._stop.clear()
            self._thread = threading.Thread(
                target=run_kernel, args=(self.root, self._stop), name="virtual-jetson-kernel"
            )
            self._thread.daemon = True
            self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not status.exists():  # ready once it has polled the tree at least once
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"virtual kernel exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("virtual kernel did not start")
            time.sleep(0.01)
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Kernel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClockRecorder:
    """Samples a board's clocks (and rail power) every ``period_s`` while a block runs.

    ``seen`` holds ``{"t": seconds since start, "min_freq", "max_freq", "cur_freq",
    "governor", "power_w"}`` dicts: tests assert the sysfs values over time with it (a clock
    pinned at the right moment, never a capped state left behind).
    """

    def __init__(self, board: VirtualBoard, period_s: float = 0.003) -> None:
        self.board = board
        self.period_s = float(period_s)
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clock-recorder", daemon=True)
        self._t0 = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                row: dict[str, Any] = self.board.clocks()
                row["power_w"] = self.board.power_w()
            except (OSError, ValueError):
                row = {}
            if row:
                row["t"] = time.monotonic() - self._t0
                self.seen.append(row)
            self._stop.wait(self.period_s)

    def __enter__(self) -> ClockRecorder:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def wait_for(predicate: Any, timeout_s: float = 5.0, period_s: float = 0.01) -> bool:
    """Poll ``predicate()`` until true or ``timeout_s``; tests use it to assert over time."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(period_s)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations.virtual_jetson")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write a board's sysfs tree under ROOT")
    b.add_argument("root")
    b.add_argument("--board", choices=sorted(BOARDS), default="nano")
    b.add_argument("--workload", choices=sorted(WORKLOADS), default="small_cnn")
    k = sub.add_parser("kernel", help="run the kernel stand-in on ROOT until SIGTERM")
    k.add_argument("root")
    args = p.parse_args(argv)
    if args.cmd == "build":
        build_board(args.root, args.board, args.workload)
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()

    def orphan_watch() -> None:  # a test that died without stopping us: do not linger
        while not stop.wait(0.5):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=orphan_watch, daemon=True).start()
    run_kernel(args.root, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "BOARDS",
    "DEFAULTS",
    "BoardSpec",
    "ClockRecorder",
    "Kernel",
    "VirtualBoard",
    "build_board",
    "kernel_accepts",
    "modeled_power_w",
    "put",
    "wait_for",
    "write_devfreq",
    "write_hwmon_rails",
    "write_iio_rails",
]
