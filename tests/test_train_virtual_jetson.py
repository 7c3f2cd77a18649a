"""`powerfleet train --backend jetson` against the virtual Jetson: sysfs values over time.

The board emulator (simulations/virtual_jetson.py) runs its kernel stand-in in a separate
process; `powerfleet train` runs in another; this test polls the devfreq files meanwhile. The
budget comes as a schedule, as a power trace (its schedule), or as a live file that
`powerfleet budget-feed` writes from a trace while the run goes on.
"""

import os
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
    check_clocks_follow,
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


@pytest.mark.slow
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
    # paced (train_cmd): ~100 steps at 921.6 MHz until 2 s, then 75 at 384 MHz (~3.6 s)
    seen, result, err, rc = run_watching_clocks(board, cmd + ["--max-samples", "2800"])
    after = board.bounds()
    assert rc == 0, err
    pinned = [(t, mx) for t, mn, mx in seen if mn == mx]
    assert pinned[0][1] == 921.6 * MHZ and pinned[-1][1] == 384.0 * MHZ
    segs = result["segments"]
    assert [(s["freq_mhz"], s["budget_w"]) for s in segs] == [(921.6, 5.0), (384.0, 3.0)]
    # never before the schedule's 2 s (the loop's own clock); it then ran on for the rest
    assert 2.0 <= segs[-1]["start_s"] < segs[-1]["end_s"]
    # the sysfs clock over time follows the loop's record of what it ran
    assert check_clocks_follow(pinned, segs) >= 2
    assert result["peak_power_w"] is not None and result["guard_events"] == []
    # Every exit path restores; the crash-safe state file is gone after a clean restore.
    assert after == original
    assert not state.exists() or not any(state.iterdir())


@pytest.mark.slow
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
    dropped = []  # when the feeder wrote 3 W into the file (monotonic)

    def start_feeder(seen):
        if feeder and not dropped and live.read_text() == "3\n":
            # the write's own time (the file's mtime on the monotonic scale), not when this
            # poll, which a loaded machine can delay, happened to notice it
            dropped.append(os.stat(live).st_mtime - (time.time() - time.monotonic()))
        if not feeder and any(mn == mx for _t, mn, mx in seen):
            feeder.append(time.monotonic())
            feeder.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "fleet",
                        "budget-feed",
                        "--budget-trace",
                        str(trace),
                        "--budget-file",
                        str(live),
                        "--budget-dwell-s",
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
        # paced: 300 steps, 0.02 s at 921.6 MHz, 0.048 s at 384 MHz: the run outlasts the drop
        # by > 2 s for any drop within 5 s of the first lock (the feeder's start-up + 2 s)
        seen, result, err, rc = run_watching_clocks(
            board, cmd + ["--budget-file", str(live), "--max-samples", "4800"], start_feeder
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
    (drop,) = dropped
    pinned = [(t, mx) for t, mn, mx in seen if mn == mx]
    assert pinned[-1][0] > drop, "the run ended before the drop could be followed"
    # 921.6 MHz until the file said 3 W (never earlier), then 384 MHz to the end (how soon after
    # the write is the loop's 1 s re-read plus a step, on its clock; this poller's is the host's)
    assert all(mx == 921.6 * MHZ for t, mx in pinned if t < drop)
    first_384 = next(i for i, (_t, mx) in enumerate(pinned) if mx == 384.0 * MHZ)
    assert all(mx == 384.0 * MHZ for _t, mx in pinned[first_384:])
    segs = result["segments"]
    assert [(s["budget_w"], s["freq_mhz"]) for s in segs] == [(5.0, 921.6), (3.0, 384.0)]
    assert check_clocks_follow(pinned, segs) >= 2
    assert result["guard_events"] == []
    assert after == original
