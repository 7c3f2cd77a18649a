"""A virtual Jetson for tests: build a board's sysfs tree and hold it while a kernel stand-in runs.

Why: the hardware path (devfreq locking, power sampling, crash-safe clocks, settling, the
closed loop) must be tested end to end without a board, on every board users own. Mocks would
only confirm what the code already believes; this emulator instead behaves like the kernel a
board owner meets. The modules, one job each: the layouts, generated from the board table
(``virtual_boards.py``), the drivers' files (``virtual_sysfs.py``), the power curves
(``virtual_devices.py``), devfreq's rules per kernel generation (``virtual_devfreq.py``), the
kernel stand-in (``virtual_kernel.py``: a thread or a separate process that survives an agent's
SIGKILL), and this one, what tests hold:

* :func:`build_board` writes a board's tree and its control file and returns a
  :class:`VirtualBoard`: any row of ``fleet.agent.devices.boards`` (``jetson-agx-orin``,
  ``jetson-thor``, ...; ``jetpack=`` picks the release) or a short key of the earlier tests
  (``nano``, ``tx2nx``, ``orin``). It is the one tree builder the tests use.
* :class:`VirtualBoard` steers the kernel and reads the files for assertions. Control (load,
  drift, noise, lag, clamp, a late GPU node) goes through one JSON file,
  ``<root>/.virtual_jetson/control.json``, so a test steers a kernel running in another
  process exactly as one in a thread: ``board.set_load(64)``, ``board.set_load(None)`` (idle),
  ``board.set_drift(add_w=0.8)``, ``board.set_drift(scale=1.2)``, ``board.set_noise(0.05)``,
  ``board.set_clamp(hz)``; ``load_while_pinned=True`` runs the load only while the clock is
  pinned, so the board idles at its owner's clocks (where the profiler reads the idle rail
  before its sweep). ``power_w()`` is the board total (the row's total rails summed),
  ``rails()`` every rail, ``requests()`` what was last written to a node (pmqos).
* :class:`ClockRecorder` and :func:`wait_for` assert over time.

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
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulations.devicemodel.fitted import WORKLOADS
from simulations.virtual_boards import (
    ALIASES,
    CONTROL_DIR,
    LATE_DIR,
    ROW_KEYS,
    BoardSpec,
    board_spec,
    input_rail_files,
    read_rail_w,
    write_devfreq,
    write_tree,
)
from simulations.virtual_kernel import (
    CONTROL_FILE,
    DEFAULTS,
    STATUS_FILE,
    Kernel,
    atomic_write,
    modeled_power_w,
    serve,
)

#: Every key build_board takes: the board table's rows, then the earlier tests' short keys.
BOARD_KEYS: tuple[str, ...] = ROW_KEYS + tuple(ALIASES)


def build_board(
    root: str | Path,
    board: str = "nano",
    workload: str = "small_cnn",
    jetpack: int | None = None,
    **control: Any,
) -> VirtualBoard:
    """Write ``board``'s sysfs tree under ``root`` and its control file; return the handle.

    ``board`` is a row key of ``fleet.agent.devices.boards`` (``jetson-agx-orin``, ...) or a
    short key of the earlier tests (``nano``, ``tx2nx``, ``orin``); ``jetpack`` picks the
    JetPack major (default: the newest the row runs; the short keys have their own).
    ``workload`` names a :mod:`simulations.devicemodel` workload (the power model of what the
    board is told is running); extra keywords set initial control values (see ``DEFAULTS``):
    ``node_delay_s`` > 0 leaves the GPU node(s) out of the tree until the kernel stand-in has
    run that long, ``clamp_hz`` caps the clock as a thermal or power-mode limit would.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; valid: {', '.join(sorted(WORKLOADS))}")
    spec = board_spec(board, jetpack)
    root = Path(root)
    late = float(control.get("node_delay_s") or 0.0) > 0
    watts = modeled_power_w(spec, workload, None, max(spec.freqs_hz))
    node = write_tree(root, spec, watts=watts, late=late)
    vb = VirtualBoard(root, spec, node)
    vb.configure(board=board, jetpack=spec.jetpack, workload=workload, **control)
    return vb


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

    @property
    def nodes(self) -> list[Path]:
        """Every GPU devfreq directory, primary first (Thor has two)."""
        return [self.root / "sys/class/devfreq" / n for n in self.spec.nodes]

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
        atomic_write(self.control_path, json.dumps(data, sort_keys=True))

    def set_load(self, batch_size: int | None) -> None:
        """Which batch size is training now (power follows), or None for idle."""
        self.configure(load=None if batch_size is None else int(batch_size))

    def set_drift(self, add_w: float = 0.0, scale: float = 1.0) -> None:
        """Measured = modeled x ``scale`` + ``add_w`` from now on (0, 1 removes the drift)."""
        self.configure(drift_add_w=float(add_w), drift_scale=float(scale))

    def set_noise(self, sd_w: float) -> None:
        self.configure(noise_w=float(sd_w))

    def read(self, attr: str, node: Path | None = None) -> str:
        """One devfreq attribute; an empty read (a writer between truncate and write) retries.

        A real sysfs node is never empty; a file here is, for as long as the writer is held
        between its truncate and its write, which on a loaded core can be far longer than a
        few milliseconds: the wait is a hang guard (10 s), not a timing assumption."""
        give_up = time.monotonic() + 10.0
        while True:
            text = ((node or self.node) / attr).read_text().strip()
            if text or time.monotonic() > give_up:
                return text
            time.sleep(0.001)

    def clocks(self, node: Path | None = None) -> dict[str, Any]:
        """min/max/cur in Hz and the governor, as the files hold them now (primary node)."""
        out: dict[str, Any] = {
            k: int(self.read(k, node)) for k in ("min_freq", "max_freq", "cur_freq")
        }
        out["governor"] = self.read("governor", node)
        return out

    def bounds(self, node: Path | None = None) -> dict[str, Any]:
        """What a restore must bring back: min, max and governor (not cur_freq)."""
        c = self.clocks(node)
        return {k: c[k] for k in ("min_freq", "max_freq", "governor")}

    def all_bounds(self) -> dict[str, dict[str, Any]]:
        """``bounds()`` of every GPU node, by node name."""
        return {n.name: self.bounds(n) for n in self.nodes}

    def requests(self, node: str | None = None) -> dict[str, Any]:
        """What was last *written* to a node (pmqos kernels keep the user's requests apart from
        the bounds that reads give): ``{"request_min", "request_max"}`` from the status file
        (None: no request since the kernel started)."""
        info = self.status().get("nodes", {}).get(node or self.spec.nodes[0], {})
        return {k: info.get(k) for k in ("request_min", "request_max")}

    def set_clamp(self, hz: int | None) -> None:
        """Cap every GPU node's clock as a thermal or power-mode limit would (None lifts it)."""
        self.configure(clamp_hz=None if hz is None else int(hz))

    def reboot(self, node_delay_s: float = 0.0) -> None:
        """A fresh boot (call with the kernel stopped): every GPU node back at its full table,
        and, with ``node_delay_s`` > 0, absent until the next kernel has run that long."""
        late = self.root / CONTROL_DIR / LATE_DIR
        for path in self.nodes:
            for where in (path, late / path.name):
                if where.is_dir():
                    shutil.rmtree(where)
            write_devfreq(
                self.root, path.name, self.freqs_hz, self.spec.of_node, self.spec.governor,
                base=late if node_delay_s > 0 else None,
            )  # fmt: skip
        self.configure(node_delay_s=float(node_delay_s), clamp_hz=None)

    def input_rail_files(self) -> list[Path]:
        """The files the kernel writes for the board's first total rail (mW, mV, mA, uW)."""
        return input_rail_files(self.root, self.spec)

    def rails(self) -> dict[str, float]:
        """Every connected rail's watts, as its driver's files say now."""
        return {lab: read_rail_w(self.root, self.spec, lab) for _, _, lab in self.spec.connected()}

    def power_w(self) -> float:
        """The board's power as a correct reader computes it: the sum of the row's total rails
        (mW; mV x mA; uW). A board without a sensor raises (it has nothing to read)."""
        if not self.spec.sensors:
            raise ValueError(f"{self.spec.key}: the board has no power sensor")
        return sum(read_rail_w(self.root, self.spec, lab) for lab in self.spec.total)

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
                row["power_w"] = self.board.power_w() if self.board.spec.sensors else None
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


HANG_GUARD_S = 60.0  # the least any wait_for waits before it gives up


def wait_for(predicate: Any, timeout_s: float = 5.0, period_s: float = 0.01) -> bool:
    """Poll ``predicate()`` until true; False only after ``timeout_s`` and at least
    ``HANG_GUARD_S``. Tests use it to assert that something happens, never how soon: on a
    loaded CI core the kernel stand-in may take seconds to answer, and a verdict must not
    depend on that (a wait returns as soon as its condition holds, so passing costs nothing)."""
    deadline = time.monotonic() + max(timeout_s, HANG_GUARD_S)
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
    b.add_argument("--board", choices=BOARD_KEYS, default="nano")
    b.add_argument("--jetpack", type=int, default=None)
    b.add_argument("--workload", choices=sorted(WORKLOADS), default="small_cnn")
    k = sub.add_parser("kernel", help="run the kernel stand-in on ROOT until SIGTERM")
    k.add_argument("root")
    args = p.parse_args(argv)
    if args.cmd == "build":
        build_board(args.root, args.board, args.workload, jetpack=args.jetpack)
        return 0
    serve(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["BOARD_KEYS", "ClockRecorder", "VirtualBoard", "build_board", "wait_for"]
