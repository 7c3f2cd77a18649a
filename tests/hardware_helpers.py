"""Shared pieces of the hardware-client tests on the virtual Jetson (simulations/virtual_jetson).

A Nano whose profile CSV is the emulator's own power model at one batch size (so the board's
closed loop sees the rail it was told about), a tiny ``.pt`` data file of the kind a hardware
node's ``data`` names, and a recorder that samples the devfreq files over time.

Every run on a virtual board is paced (``--pace-to-profile``, node config ``pace-to-profile``):
a step lasts at least the profile's step time at its point, so a run lasts what the device's
clock says (samples / batch x step time), however fast this CPU trains small_cnn. A test that
needs a run to outlast a schedule step sizes it in samples from ``STEP_TOP_S``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from fleet.agent.data import tensorfile

MHZ = 1_000_000
BATCH = 16
STEP_TOP_S = 0.02  # board_profile's step at the top clock (b=16); ~1/f below it
# The agent's wait for ``cur_freq`` to reach a lock, as a hang guard: the kernel stand-in is a
# process a loaded machine may hold for seconds, and a wait that gave up first would let the
# closed loop's guard read the old clock's power on the rail and step a clock down.
SETTLE_GUARD_S = 60.0
ROOT = Path(__file__).resolve().parents[1]
# `python -m fleet ...` from this checkout (one torch thread: tests/conftest.py sets it for all)
TRAIN_ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def board_profile(board, path: Path, device_type: str = "") -> Path:
    """One row per clock at b=16: step time ~ 1/f (``STEP_TOP_S`` at the top clock), power =
    the emulator's model (+2 % peak)."""
    top = max(board.freqs_hz)
    rows = [
        f"{BATCH},{hz / MHZ:g},{STEP_TOP_S * top / hz:.5f},"
        f"{board.model_power_w(hz, BATCH) * 1.02:.4f},{board.model_power_w(hz, BATCH):.4f}"
        + (f",{device_type}" if device_type else "")
        for hz in board.freqs_hz
    ]
    header = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"
    header += ",device" if device_type else ""
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def deadline_profile(board, path: Path) -> Path:
    """Like ``board_profile`` but with steps ~ f^-0.3 (a memory-bound workload): energy per
    sample is then least at a middle clock, so the deadline objective has a real trade-off
    (the least-energy point is slow, the fastest costs more). The LUT's scale (4 ms a step at
    the top clock) keeps a 24,000-sample target within seconds of prediction."""
    top = max(board.freqs_hz)
    rows = [
        f"{BATCH},{hz / MHZ:g},{0.004 * (top / hz) ** 0.3:.6f},"
        f"{board.model_power_w(hz, BATCH) * 1.02:.4f},{board.model_power_w(hz, BATCH):.4f}"
        for hz in board.freqs_hz
    ]
    header = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def check_clocks_follow(pinned: list[tuple[float, int]], segments: list[dict]) -> int:
    """The clocks the board showed locked (samples of (monotonic time, Hz), in the order seen)
    are the loop's segments' clocks in the segments' order: the first is the first segment's,
    and the sequence of distinct clocks seen is a subsequence of theirs (a short segment may
    pass between two polls). Nothing lines the poller's clock up with the loop's: a loaded host
    delays either by any amount. Returns how many distinct clocks were seen."""
    want = [round(s["freq_mhz"] * MHZ) for s in segments]
    seen = [round(hz) for _, hz in pinned]
    runs = [hz for i, hz in enumerate(seen) if i == 0 or hz != seen[i - 1]]
    assert runs and runs[0] == want[0], (runs, want)
    i = 0
    for hz in runs:
        while i < len(want) and want[i] != hz:
            i += 1
        assert i < len(want), f"clock {hz} Hz seen out of the segments' order: {runs} vs {want}"
    return len(runs)


def tiny_pt_data(path: Path, n: int = 640, seed: int = 0) -> Path:
    """{"train": (x, y), "test": (x, y)}: 1x8x8 noise, 2 classes (nothing to learn: runs long)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    cut = n * 4 // 5
    tensorfile.save({"train": (x[:cut], y[:cut]), "test": (x[cut:], y[cut:])}, str(path), "data")
    return path


class ClockLog:
    """Samples (monotonic time, min_freq, max_freq) of a board every ``period_s`` in a thread."""

    def __init__(self, board, period_s: float = 0.02) -> None:
        self.board, self.period_s = board, period_s
        self.seen: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                c = self.board.clocks()
                self.seen.append((time.monotonic(), c["min_freq"], c["max_freq"]))
            except (OSError, ValueError, KeyError):
                pass  # a file caught mid-write: the next sample reads it
            time.sleep(self.period_s)

    def __enter__(self) -> ClockLog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def pinned(self) -> list[tuple[float, int]]:
        """(time, clock) of every sample where the clock was locked (min == max)."""
        return [(t, mx) for t, mn, mx in self.seen if mn == mx]


def tiny_npz(path: Path, seed: int = 0) -> Path:
    """A prepared-dataset file for ``powerfleet train --dataset``: 8x8 noise, 2 classes."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (640, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 2, 640)
    np.savez(path, x_train=x[:512], y_train=y[:512], x_test=x[512:], y_test=y[512:])
    return path


def train_cmd(board, state: Path, data: Path, eff: Path, prof: Path) -> list[str]:
    """The start of a ``powerfleet train --backend jetson`` command on the virtual board (the
    budget, objective and sample counts are the test's)."""
    return [
        sys.executable, "-m", "fleet", "train", "--backend", "jetson",
        "--sysfs-root", str(board.root), "--state-dir", str(state), "--model", "small_cnn",
        "--dataset", str(data), "--efficiency", str(eff), "--profile", str(prof),
        "--target-accuracy", "1.0", "--lr-ref-batch", str(BATCH), "--json", "--pace-to-profile",
        "--settle-timeout-s", str(SETTLE_GUARD_S),  # the kernel stand-in answers when it runs
    ]  # fmt: skip


def run_watching_clocks(board, cmd: list[str], during=None):
    """Run ``cmd`` under the board's kernel stand-in while sampling its clocks every 20 ms.

    Returns (seen [(monotonic t, min_freq, max_freq)], the JSON result or None, stderr, exit
    code). ``during(seen)`` is called at every sample (a test may start something once the run
    has locked a clock). The process is killed if the test fails meanwhile.
    """
    seen: list[tuple[float, int, int]] = []
    with board.kernel(process=True, lag_s=0.02):
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=TRAIN_ENV
        )
        try:
            while proc.poll() is None:
                c = board.clocks()
                seen.append((time.monotonic(), c["min_freq"], c["max_freq"]))
                if during:
                    during(seen)
                time.sleep(0.02)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return seen, (json.loads(out) if proc.returncode == 0 else None), err, proc.returncode


def sweep(backend, *args, **kw):
    """``profile_grid`` with the tests' arguments split into its records: ``SweepPlan``'s
    fields (positional from ``model_name`` on), ``PredictPlan``'s with ``predict=True``, and
    the call's own (device, progress, model)."""
    from fleet.agent.measure.profiler import profile_grid
    from fleet.agent.measure.sweep_plan import PredictPlan, SweepPlan

    call = {k: kw.pop(k) for k in ("device", "progress", "model") if k in kw}
    predict = kw.pop("predict", False)
    guess = {k: kw.pop(k) for k in list(kw) if k in PredictPlan._fields}
    plan = SweepPlan(*args, **kw)
    return profile_grid(backend, plan, PredictPlan(**guess) if predict else None, **call)
