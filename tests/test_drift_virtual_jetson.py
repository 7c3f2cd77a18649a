"""`powerfleet train --backend jetson` on the virtual Jetson whose rail drifts +12 %.

The profile says what the board drew when it was measured; the board now draws 12 % more
(``board.set_drift(scale=1.12)``), still under the budget at the chosen point, so the guard
stays quiet. The loop must report one drift event and write a refreshed profile whose rows
moved toward what the board draws.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.virtual_jetson import build_board
from tests.hardware_helpers import tiny_npz

ROOT = Path(__file__).resolve().parents[1]
MHZ = 1_000_000
FREQS = (614.4, 768.0, 921.6)  # at 4.6 W the choice is 768 MHz; 921.6 is over the budget
SCALE = 1.12


@pytest.mark.slow
def test_power_drift_gives_one_event_and_a_refreshed_profile(tmp_path):
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    board.set_load(16)
    lut = {f: board.model_power_w(int(round(f * MHZ)), 16) * 1.02 for f in FREQS}
    prof = tmp_path / "profile.csv"
    prof.write_text(
        "# device=nano\nbatch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n"
        + "".join(
            f"16,{f:g},{0.02 * 921.6 / f:.5f},{lut[f]:.4f},{lut[f] / 1.02:.4f}\n" for f in FREQS
        )  # fmt: skip
    )
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,samples_to_accuracy\n16,4000\n")
    data = tiny_npz(tmp_path / "tiny.npz")
    refreshed = tmp_path / "refreshed.csv"
    cmd = [
        sys.executable, "-m", "fleet", "train", "--backend", "jetson",
        "--sysfs-root", str(board.root), "--state-dir", str(tmp_path / "state"),
        "--model", "small_cnn", "--dataset", str(data), "--efficiency", str(eff),
        "--profile", str(prof), "--budget-w", "4.6", "--max-samples", "3200",
        "--pace-to-profile",  # 200 steps of >= 24 ms: the rail is watched for >= 4.8 s
        "--eval-every", "4000", "--target-accuracy", "1.0", "--lr-ref-batch", "16",
        "--drift-time-tol", "100",  # the LUT's times are synthetic; the drift is in power
        "--refreshed-profile", str(refreshed), "--json",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with board.kernel(process=True, lag_s=0.02):
        board.set_drift(scale=SCALE)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["guard_events"] == [] and out["over_budget_samples"] == 0
    (ev,) = out["drift_events"]
    assert (ev["batch_size"], ev["freq_mhz"], ev["kind"]) == (16, 768, "power")
    assert ev["expected_peak_w"] == pytest.approx(lut[768.0], rel=1e-3)
    assert ev["measured_peak_w"] == pytest.approx(lut[768.0] / 1.02 * SCALE, rel=0.02)
    assert out["refreshed_profile"] == str(refreshed)
    header = refreshed.read_text().splitlines()
    assert any(h.startswith("# refreshed=") for h in header)
    cols = next(h for h in header if h.startswith("batch_size")).split(",")
    rows = [dict(zip(cols, ln.split(","), strict=True)) for ln in header if ln[:1].isdigit()]
    assert len(rows) == len(FREQS)
    for r in rows:
        f = float(r["freq_mhz"])
        board_w = lut[f] / 1.02 * SCALE
        assert abs(float(r["peak_power_w"]) - board_w) < abs(lut[f] - board_w) / 2, r
    # The final point fits the budget on the board as it draws now.
    assert lut[float(out["freq_mhz"])] / 1.02 * SCALE <= 4.6


@pytest.mark.slow
def test_bad_drift_tolerance_is_one_line_and_exit_2(tmp_path):
    from tests.conftest import run_cli

    # the files exist (paths are checked as the command line is read): the tolerance is the
    # one thing wrong, and it is refused before any work
    (tmp_path / "d.npz").write_bytes(b"")
    (tmp_path / "e.csv").write_text("batch_size,samples_to_accuracy\n8,1000\n")
    r = run_cli(
        "train", "--backend", "cpu", "--model", "small_cnn", "--dataset",
        str(tmp_path / "d.npz"), "--efficiency", str(tmp_path / "e.csv"), "--budget-w", "5",
        "--drift-power-tol", "0",
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--drift-power-tol must be > 0, got 0.0" in lines[0]
