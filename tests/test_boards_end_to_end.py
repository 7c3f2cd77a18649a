"""Every board row, end to end on its virtual tree: profile, then train under a schedule with
the guard at work, and the clocks back where they were.

Per row (its newest JetPack): ``powerfleet profile`` measures two clocks at b=16 and every
point's peak is the modeled board total there (the sum of the row's total rails: one rail, six,
or an INA238 in µW); ``powerfleet train --pace-to-profile`` runs under a budget schedule A -> B
on a rail that reads hotter than its profile (a drift sized to the row's power curve): A fits
the top clock, B fits a middle clock by the profile but not on the rail, so the loop drops to
the middle clock at the schedule step and the guard then steps it down until the rail fits B.
The Nano 2GB (no sensor) refuses to profile in one line and trains from a recorded profile,
flagged unguarded. Runs are paced (each step lasts the profile's step time), so their length is
the device's, not this CPU's; commands run in-process against a kernel stand-in thread.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from fleet.cli import main
from fleet.core.profile import load_profile
from simulations.virtual_boards import ROW_KEYS
from simulations.virtual_jetson import build_board, wait_for

BATCH = 16
DEFAULT_SIZED = "jetson-agx-orin"  # the row whose profile points keep the default sizes
STEP_TOP_S = 0.02  # the recorded profile's step at the top clock (~1/f below it)


def tiny_npz(path: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (320, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 2, 320)
    np.savez(path, x_train=x[:256], y_train=y[:256], x_test=x[256:], y_test=y[256:])
    return path


def recorded_profile(board, path: Path) -> Path:
    """The board's modeled power at b=16 on every clock (+2 % peak), steps ~ 1/f."""
    top = max(board.freqs_hz)
    lines = ["batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"]
    for hz in board.freqs_hz:
        w = board.model_power_w(hz, BATCH)
        lines.append(f"{BATCH},{hz / 1e6:g},{STEP_TOP_S * top / hz:.6f},{w * 1.02:.4f},{w:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and out.strip() else None), err


@pytest.mark.slow
@pytest.mark.parametrize("key", ROW_KEYS)
def test_profile_measures_the_board_total_at_each_clock(tmp_path, capsys, key):
    board = build_board(tmp_path / "root", key)
    before = board.all_bounds()
    low, top = board.freqs_hz[0], board.freqs_hz[-1]
    out = tmp_path / "profile.csv"
    # one row sizes its points by the defaults (2 s and 40 samples each); the others by a
    # fraction of that: the rail is steady here, and a full-length point is CPU time spent
    # training without a verdict that depends on it
    sizing = [] if key == DEFAULT_SIZED else ["--min-point-s", "0.3", "--min-power-samples", "6"]
    with board.kernel(process=False, load=BATCH, lag_s=0.0):
        rc, summary, err = cli(
            capsys, "profile", "--backend", "jetson", "--sysfs-root", str(board.root),
            "--state-dir", str(tmp_path / "state"), "--model", "small_cnn", "--input-shape",
            "1x8x8", "--batch-sizes", str(BATCH), "--freqs", f"{low / 1e6:g},{top / 1e6:g}",
            "--steps", "2", "--warmup", "0", "--out", str(out), "--json", *sizing,
        )  # fmt: skip
        assert wait_for(lambda: board.all_bounds() == before, 3)
    if not board.spec.sensors:
        assert rc == 2 and len(err.strip().splitlines()) == 1
        assert "no power sensor" in err and "recorded profile" in err
        assert not out.exists()
        return
    assert rc == 0, err
    prof = load_profile(out)
    assert [p.freq_mhz for p in prof.points] == [low / 1e6, top / 1e6]
    for p in prof.points:
        want = board.model_power_w(round(p.freq_mhz * 1e6), BATCH)
        assert p.peak_power_w == pytest.approx(want, abs=0.01), (key, p)
    if key == DEFAULT_SIZED:  # its points ran for their default evidence
        rows = list(csv.DictReader(line for line in out.open() if not line.startswith("#")))
        assert all(float(r["point_s"]) >= 2.0 and int(r["power_samples"]) >= 40 for r in rows)
    assert prof.metadata.get("device") == key


@pytest.mark.slow
@pytest.mark.parametrize("key", ROW_KEYS)
def test_train_follows_the_schedule_and_the_guard_on_every_board(tmp_path, capsys, key):
    board = build_board(tmp_path / "root", key)
    before = board.all_bounds()
    hz = board.freqs_hz
    prof = recorded_profile(board, tmp_path / "profile.csv")
    rows = load_profile(prof).points
    peak = {round(p.freq_mhz * 1e6): p.peak_power_w for p in rows}
    mid = hz[len(hz) // 2]
    b = peak[mid] + 0.01  # the middle clock fits B on the profile...
    margin = b - board.model_power_w(mid, BATCH)
    # ...but the rail reads hotter than the profile by more than B's margin there, and by less
    # than the way down to the lowest clock: the guard has somewhere to step to
    drift = margin + 0.45 * (board.model_power_w(mid, BATCH) - board.model_power_w(hz[0], BATCH))
    a = peak[hz[-1]] + drift + 0.05  # the top clock fits A on the profile and on the rail
    eff = tmp_path / "eff.csv"
    eff.write_text(f"batch_size,samples_to_accuracy\n{BATCH},4000\n")
    cmd = [
        "train", "--backend", "jetson", "--sysfs-root", str(board.root), "--state-dir",
        str(tmp_path / "state"), "--model", "small_cnn", "--dataset",
        str(tiny_npz(tmp_path / "d.npz")), "--efficiency", str(eff), "--profile", str(prof),
        "--budget-schedule", f"0:{a:.4f},1:{b:.4f}", "--target-accuracy", "1.0",
        "--lr-ref-batch", str(BATCH), "--max-samples", "1600", "--eval-every", "1600",
        "--no-drift", "--pace-to-profile", "--json",
    ]  # fmt: skip
    with board.kernel(process=False, load=BATCH, lag_s=0.0):
        board.set_drift(add_w=drift)
        rc, out, err = cli(capsys, *cmd)
        assert wait_for(lambda: board.all_bounds() == before, 3)
    assert rc == 0, err
    segs = [(s["budget_w"], s["freq_mhz"], s["reason"]) for s in out["segments"]]
    assert segs[0] == (round(a, 4), hz[-1] / 1e6, "start")
    assert segs[1] == (round(b, 4), mid / 1e6, "budget-change")
    if not board.spec.sensors:  # no rail to watch: the recorded profile is all there is
        assert out["power_measured"] is False and out["guard_events"] == []
        assert len(segs) == 2
        return
    events = out["guard_events"]
    assert events, "the rail read over B at the middle clock: the guard must step down"
    for e in events:
        assert e["budget_w"] == round(b, 4) and e["measured_w"] > e["budget_w"]
        assert e["to_mhz"] is not None and e["to_mhz"] < e["from_mhz"]
    assert events[0]["from_mhz"] == mid / 1e6
    final = round(events[-1]["to_mhz"] * 1e6)
    # where it stopped, the rail fits (to the sensor's resolution)
    assert board.model_power_w(final, BATCH) + drift <= b + 1e-3
    assert all(r == "guard" for _b, _f, r in segs[2:]) and segs[-1][1] == final / 1e6
