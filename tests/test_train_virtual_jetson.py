"""`powerfleet train --backend jetson` against the virtual Jetson: sysfs values over time.

The board emulator (simulations/virtual_jetson.py) runs its kernel stand-in in a separate
process; `powerfleet train` runs in another; this test polls the devfreq files meanwhile. The
budget comes as a schedule, as a power trace (its schedule), or as a live file that
`powerfleet budget-feed` writes from a trace while the run goes on.
"""

import subprocess
import sys
import time

import pytest

from simulations.virtual_jetson import build_board
from tests.hardware_helpers import (
    BATCH,
    MHZ,
    TRAIN_ENV,
    board_profile,
    run_watching_clocks,
    tiny_npz,
    train_cmd,
)

ENV = TRAIN_ENV


def _setup(tmp_path):
    """A virtual Nano, its profile (the emulator's own power at b=16), efficiency, a tiny
    dataset; the train command's start."""
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    board.set_load(BATCH)  # the emulator's power follows the batch it is told runs
    prof = board_profile(board, tmp_path / "profile.csv")
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,samples_to_accuracy\n16,4000\n")
    state = tmp_path / "state"
    cmd = train_cmd(board, state, tiny_npz(tmp_path / "tiny.npz"), eff, prof)
    return board, state, cmd + ["--eval-every", "4000"]


@pytest.mark.parametrize("source", ["schedule", "trace"])
def test_schedule_lowers_the_sysfs_clock_at_the_step_and_restores(tmp_path, source):
    board, state, cmd = _setup(tmp_path)
    original = board.bounds()
    if source == "schedule":
        cmd += ["--budget-schedule", "0:5,2:3"]
    else:  # 5 W available until 2 s, 3 W after: with no dwell, the same schedule
        trace = tmp_path / "panel.csv"
        trace.write_text("time_s,available_w\n0,5\n2,5\n2.5,3\n")
        cmd += ["--budget-trace", str(trace), "--budget-dwell-s", "0"]
    seen, result, err, rc = run_watching_clocks(board, cmd + ["--max-samples", "24000"])
    after = board.bounds()
    assert rc == 0, err
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


def test_budget_feed_drives_the_live_file_of_a_running_board(tmp_path):
    """The feeder plays a trace into the budget file once the run has locked its first clock;
    the loop re-reads the file (every second) and follows: 921.6 MHz under 5 W, then 384 MHz
    under 3 W, and the clocks come back at the end."""
    board, state, cmd = _setup(tmp_path)
    original = board.bounds()
    live = tmp_path / "budget"
    live.write_text("5\n")
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w\n0,5\n20,5\n21,3\n")  # played 10x: drop at 2 s
    feeder = []

    def start_feeder(seen):
        if not feeder and any(mn == mx for _t, mn, mx in seen):
            feeder.append(time.monotonic())
            feeder.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "fleet",
                        "budget-feed",
                        "--trace",
                        str(trace),
                        "--file",
                        str(live),
                        "--dwell-s",
                        "0",
                        "--speed",
                        "10",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=ENV,
                )  # fmt: skip
            )

    try:
        seen, result, err, rc = run_watching_clocks(
            board, cmd + ["--budget-file", str(live), "--max-samples", "48000"], start_feeder
        )
    finally:
        if len(feeder) == 2 and feeder[1].poll() is None:
            feeder[1].kill()
        if len(feeder) == 2:
            feeder[1].wait()
    after = board.bounds()
    assert rc == 0, err
    out, ferr = feeder[1].communicate()
    assert feeder[1].returncode == 0, ferr
    assert [ln.split()[-1] for ln in out.splitlines()] == ["5", "3"]
    assert live.read_text() == "3\n"
    started = feeder[0]
    pinned = [(t, mx) for t, mn, mx in seen if mn == mx]
    assert pinned[-1][0] - started > 4.0, "the run ended before the drop could be followed"
    assert all(mx == 921.6 * MHZ for t, mx in pinned if t < started + 1.8)
    # the file changes at ~2 s; the loop sees it within its 1 s re-read (plus a step)
    assert all(mx == 384.0 * MHZ for t, mx in pinned if started + 4.0 < t)
    budgets = [s["budget_w"] for s in result["segments"]]
    assert budgets[0] == 5.0 and budgets[-1] == 3.0
    assert result["guard_events"] == []
    assert after == original
