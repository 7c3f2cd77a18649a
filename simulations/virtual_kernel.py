"""The virtual Jetson's kernel stand-in: devfreq's write rules and the power rail, over files.

Why a module of its own: what the kernel does with a board's files (the rules a devfreq write
meets, how ``cur_freq`` follows, what the power monitor reports) is behaviour, apart from the
layouts it runs on (``virtual_boards.py``) and the handle tests hold (``virtual_jetson.py``);
it also runs on its own, as ``python -m simulations.virtual_kernel ROOT``, in a process that
survives an agent's SIGKILL.

:func:`run_kernel` polls the files every few ms as devfreq would react to them: a requested
``min_freq`` is snapped up and ``max_freq`` down to ``available_frequencies``; a request that
would leave min > max is rejected (the file is put back, as ``write()`` failing with EINVAL
leaves it); ``cur_freq`` reaches the effective target after a configurable lag; the board-input
rail reports ``simulations.devicemodel``'s mean power for the board + workload at the *current*
clock and the running batch size (:func:`modeled_power_w`), times ``drift_scale``, plus
``drift_add_w`` and Gaussian noise. Target clock: with min == max the clock is pinned there;
with a range, the governor is modeled as "busy -> max, idle -> min" (nvhost_podgov under a
training load sits at the top).

It obeys one JSON file, ``<root>/.virtual_jetson/control.json`` (keys and defaults in
``DEFAULTS``), and reports in ``status.json`` next to it, so a kernel in another process is
steered exactly as one in a thread.

Limitation: min and max are files, not syscalls, so a write the kernel would refuse can only be
noticed if a poll lands between the two writes of a pair; ``rejected`` counts what was seen. The
exact rule is :func:`kernel_accepts`, which replays a write log.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulations.devicemodel.fitted import WORKLOADS
from simulations.devicemodel.physics import dvfs_factor, mean_power_w
from simulations.virtual_boards import RAIL_MV, BoardSpec, find_board, input_rail_files

CONTROL_DIR = ".virtual_jetson"
CONTROL_FILE = "control.json"
STATUS_FILE = "status.json"

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


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


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
    spec, node = find_board(root)
    table = sorted(spec.freqs_hz)
    rail_files = input_rail_files(root, spec)
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
            atomic_write(node / "cur_freq", f"{st.cur}\n")
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
            atomic_write(node / attr, f"{value}\n")
        st.seen_min, st.seen_max = st.eff_min, st.eff_max
        return
    for attr, raw, new in (("min_freq", raw_min, new_min), ("max_freq", raw_max, new_max)):
        if raw != new:
            st.snapped += 1
            atomic_write(node / attr, f"{new}\n")  # show the OPP actually in force
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
            atomic_write(path, text + "\n")
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
    atomic_write(root / CONTROL_DIR / STATUS_FILE, json.dumps(status))


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
                [sys.executable, "-m", "simulations.virtual_kernel", str(self.root)],
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


def serve(root: str | Path) -> None:
    """Run the kernel on ``root`` in this process until SIGTERM/SIGINT or its parent is gone."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()

    def orphan_watch() -> None:  # a test that died without stopping us: do not linger
        while not stop.wait(0.5):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=orphan_watch, daemon=True).start()
    run_kernel(root, stop)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m simulations.virtual_kernel ROOT")
    serve(sys.argv[1])
