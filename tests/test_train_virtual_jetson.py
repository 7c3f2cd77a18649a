"""`powerfleet train --backend jetson` against the virtual Jetson: sysfs values over time.

The board emulator (simulations/virtual_jetson.py) runs its kernel stand-in in a separate
process; `powerfleet train` runs in another; this test polls the devfreq files meanwhile.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from simulations.virtual_jetson import build_board

ROOT = Path(__file__).resolve().parents[1]
MHZ = 1_000_000


def test_schedule_lowers_the_sysfs_clock_at_the_step_and_restores(tmp_path):
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(16)  # the emulator's power follows the batch it is told runs
    prof = tmp_path / "profile.csv"
    prof.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n"
        + "".join(
            f"16,{hz / MHZ:g},{0.05 * 921.6e6 / hz:.5f},"
            f"{board.model_power_w(hz, 16) * 1.02:.4f},{board.model_power_w(hz, 16):.4f}\n"
            for hz in board.freqs_hz
        )
    )
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,samples_to_accuracy\n16,4000\n")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (640, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 2, 640)
    data = tmp_path / "tiny.npz"
    np.savez(data, x_train=x[:512], y_train=y[:512], x_test=x[512:], y_test=y[512:])
    state = tmp_path / "state"
    cmd = [
        sys.executable, "-m", "fleet", "train", "--backend", "jetson",
        "--sysfs-root", str(board.root), "--state-dir", str(state), "--model", "small_cnn",
        "--dataset", str(data), "--efficiency", str(eff), "--profile", str(prof),
        "--budget-schedule", "0:5,2:3", "--max-samples", "24000", "--eval-every", "4000",
        "--target-accuracy", "1.0", "--lr-ref-batch", "16", "--json",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    seen = []  # (time, min_freq, max_freq)
    with board.kernel(process=True, lag_s=0.02):
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            while proc.poll() is None:
                c = board.clocks()
                seen.append((time.monotonic(), c["min_freq"], c["max_freq"]))
                time.sleep(0.02)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        after = board.bounds()
    assert proc.returncode == 0, err
    result = json.loads(out)
    pinned = [(t, mx) for t, mn, mx in seen if mn == mx]
    t0 = pinned[0][0]  # the first lock: the loop's 0 s
    assert pinned[0][1] == 921.6 * MHZ
    end = pinned[-1][0]
    assert end - t0 > 3.0, "the run ended before the schedule step could be observed"
    assert all(mx == 921.6 * MHZ for t, mx in pinned if t < t0 + 1.8)
    assert all(mx == 384.0 * MHZ for t, mx in pinned if t0 + 2.6 < t <= end)
    segs = result["segments"]
    assert (segs[0]["freq_mhz"], segs[0]["budget_w"]) == (921.6, 5.0)
    assert (segs[-1]["freq_mhz"], segs[-1]["budget_w"]) == (384.0, 3.0)
    assert 1.9 < segs[-1]["start_s"] < 2.6
    assert result["peak_power_w"] is not None and result["guard_events"] == []
    # Every exit path restores; the crash-safe state file is gone after a clean restore.
    assert after == original
    assert not state.exists() or not any(state.iterdir())
