"""The virtual Jetson's kernel stand-in: devfreq's write rules and the power rails, over files.

Why a module of its own: what the kernel does with a board's files (the rules a devfreq write
meets, how ``cur_freq`` follows, what the power monitors report, a GPU node that appears only
some time into boot) is behaviour, apart from the layouts it runs on (``virtual_boards.py``),
the per-generation devfreq rules (``virtual_devfreq.py``) and the handle tests hold
(``virtual_jetson.py``); it also runs on its own, as ``python -m simulations.virtual_kernel
ROOT``, in a process that survives an agent's SIGKILL.

:func:`run_kernel` polls the files every few ms as the kernel would react to them. Each GPU
devfreq node (Thor has two, each with its own bounds) follows its JetPack's rules: ``einval``
on JetPack 4 (a request that would leave min > max is rejected, the file put back), ``pmqos``
on 5+ (accepted and resolved; ``max_freq`` reads the effective bound, under ``clamp_hz``, the
stand-in for a thermal or power-mode clamp; the user's requests are in the status file).
``cur_freq`` reaches the governor's target after a configurable lag; the target is the pinned
clock when min == max, else "busy -> max, idle -> min" (nvhost_podgov under a training load sits
at the top). The board's power is ``simulations.devicemodel``'s mean power for the board +
workload at the primary node's *current* clock and the running batch size
(:func:`modeled_power_w`), times ``drift_scale``, plus ``drift_add_w`` and Gaussian noise,
spread over the board's rails by ``virtual_boards.reading_files`` (the total rails sum to it).
With ``node_delay_s`` > 0 the GPU node(s) are created that long after the kernel starts (a
JetPack 7 boot, where the GPU driver loads late).

It obeys one JSON file, ``<root>/.virtual_jetson/control.json`` (keys and defaults in
``DEFAULTS``; ``board``/``jetpack`` name the layout, written by ``build_board``), and reports
in ``status.json`` next to it, so a kernel in another process is steered exactly as one in a
thread.

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
from pathlib import Path
from typing import Any

from simulations.virtual_boards import (
    CONTROL_DIR,
    LATE_DIR,
    BoardSpec,
    board_spec,
    find_board,
    reading_files,
)
from simulations.virtual_devfreq import NodeState, atomic_write, kernel_accepts
from simulations.virtual_devices import modeled_power_w

CONTROL_FILE = "control.json"
STATUS_FILE = "status.json"

DEFAULTS: dict[str, Any] = {
    "board": None,  # the layout's key (a row of the board table or a short alias)
    "jetpack": None,  # its JetPack major (None: the layout's default)
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
    "clamp_hz": None,  # a thermal / power-mode cap on every GPU node (None: none)
    "node_delay_s": 0.0,  # the GPU node(s) appear this long after the kernel starts
}

__all__ = [
    "CONTROL_DIR", "CONTROL_FILE", "DEFAULTS", "STATUS_FILE", "Kernel", "atomic_write",
    "kernel_accepts", "modeled_power_w", "run_kernel", "serve",
]  # fmt: skip


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def _spec_of(root: Path, ctl: dict[str, Any]) -> BoardSpec:
    if ctl.get("board"):
        return board_spec(str(ctl["board"]), ctl.get("jetpack"))
    return find_board(root)[0]


def _place_late_nodes(root: Path, spec: BoardSpec) -> None:
    """Move staged GPU nodes into sys/class/devfreq (a rename: each appears whole)."""
    for name in spec.nodes:
        staged = root / CONTROL_DIR / LATE_DIR / name
        if staged.is_dir() and not (root / "sys/class/devfreq" / name).exists():
            (root / "sys/class/devfreq").mkdir(parents=True, exist_ok=True)
            os.rename(staged, root / "sys/class/devfreq" / name)


def run_kernel(root: str | Path, stop: threading.Event | None = None) -> None:
    """Poll ``root``'s board until ``stop`` is set (or forever in a kernel process)."""
    root = Path(root)
    ctl_path = root / CONTROL_DIR / CONTROL_FILE
    ctl = {**DEFAULTS, **json.loads(ctl_path.read_text())}
    ctl_stamp = _stamp(ctl_path)
    spec = _spec_of(root, ctl)
    table = sorted(spec.freqs_hz)
    rng = random.Random(ctl["seed"])
    started = time.monotonic()
    nodes: dict[str, NodeState] = {}
    written: dict[Path, str] = {}
    st: dict[str, Any] = {"ticks": 0, "created_at_s": None}
    last_status = 0.0
    stop = stop or threading.Event()
    while not stop.is_set():
        now = time.monotonic()
        stamp = _stamp(ctl_path)
        if stamp != ctl_stamp:
            try:
                ctl = {**DEFAULTS, **json.loads(ctl_path.read_text())}
                ctl_stamp = stamp
            except (OSError, ValueError):
                pass  # mid-replace: next poll
        if len(nodes) < len(spec.nodes):
            if now - started >= float(ctl["node_delay_s"] or 0.0):
                _place_late_nodes(root, spec)
            for name in spec.nodes:
                path = root / "sys/class/devfreq" / name
                if name not in nodes and path.is_dir():
                    nodes[name] = NodeState(path, table, spec.rules)
                    if st["created_at_s"] is None:
                        st["created_at_s"] = now - started
        clamp = ctl["clamp_hz"]
        for node in nodes.values():
            node.tick(clamp)
        primary = nodes.get(spec.nodes[0])
        load = ctl["load"]
        if ctl["load_while_pinned"] and (primary is None or not primary.pinned):
            load = None  # nothing runs at the owner's clocks: the board idles
        busy, lag_s = load is not None, float(ctl["lag_s"])
        switched = [n for n in nodes.values() if n.step(busy, clamp, lag_s, now)]
        cur = primary.cur if primary is not None else table[-1]  # booting: the top clock
        watts = modeled_power_w(spec, ctl["workload"], load, cur)
        watts = watts * float(ctl["drift_scale"]) + float(ctl["drift_add_w"])
        if ctl["noise_w"]:
            watts += rng.gauss(0.0, float(ctl["noise_w"]))
        # Power first: once a reader sees cur_freq at the target, the rails already show it.
        for path, text in reading_files(root, spec, max(watts, 0.0)):
            if written.get(path) != text:
                atomic_write(path, text + "\n")
                written[path] = text
        for node in switched:
            atomic_write(node.path / "cur_freq", f"{node.cur}\n")
        st["ticks"] += 1
        if now - last_status > 0.2:
            _write_status(root, spec, nodes, st, ctl)
            last_status = now
        stop.wait(float(ctl["poll_s"]))
    _write_status(root, spec, nodes, st, ctl)


def _write_status(
    root: Path,
    spec: BoardSpec,
    nodes: dict[str, NodeState],
    st: dict[str, Any],
    ctl: dict[str, Any],
) -> None:
    """Status: the primary node's counters and bounds at the top level (as before), every
    node under ``nodes``, the clamp in force and when the nodes appeared."""
    primary = nodes.get(spec.nodes[0])
    status: dict[str, Any] = {
        "pid": os.getpid(),
        "ticks": st["ticks"],
        "board": spec.key,
        "jetpack": spec.jetpack,
        "rules": spec.rules,
        "clamp_hz": ctl["clamp_hz"],
        "nodes_present": sorted(nodes),
        "node_created_at_s": st["created_at_s"],
        "nodes": {name: n.status() for name, n in nodes.items()},
        "time": time.time(),
    }
    if primary is not None:
        p = primary.status()
        for key in ("rejected", "snapped", "eff_min", "eff_max", "cur", "request_min",
                    "request_max", "requests"):  # fmt: skip
            status[key] = p[key]
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

    def start(self, timeout_s: float = 60.0) -> Kernel:  # a hang guard: a loaded host
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
    """Run the kernel on ``root`` in this process until SIGTERM/SIGINT or its parent is gone.

    The signal handlers only note the signal; a watch thread sets ``stop``. Why: a handler runs
    in the main thread at any bytecode, also inside ``stop.wait()`` while it holds the Event's
    own lock, and ``stop.set()`` there waits for that lock forever: a kernel stand-in hung
    that way on ``kill $KERNEL`` under load (seen in the README rehearsal, gdb showed the main
    thread blocked in its own handler), and a caller waiting for its output hung with it."""
    stop = threading.Event()
    signalled: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: signalled.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: signalled.append(signum))
    parent = os.getppid()

    def watch() -> None:  # a signal noted, or a test that died without stopping us: stop
        while not stop.wait(0.05):
            if signalled or os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, daemon=True).start()
    run_kernel(root, stop)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m simulations.virtual_kernel ROOT")
    serve(sys.argv[1])
