"""`powerfleet train` end to end: a real process, the replay backend, tiny generated images."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleet.cli import main
from tests.closedloop_helpers import lut_rows

ROOT = Path(__file__).resolve().parents[1]
EFF = {8: 4000, 16: 4000, 32: 4400}


@pytest.fixture()
def inputs(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 640)
    x = rng.integers(0, 256, (640, 8, 8)).astype(np.uint8)
    x[y == 1, :, :4] = 255  # a learnable pattern
    data = tmp_path / "tiny.npz"
    np.savez(data, x_train=x[:512], y_train=y[:512], x_test=x[512:], y_test=y[512:])
    prof = tmp_path / "profile.csv"
    with open(prof, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["batch_size", "freq_mhz", "time_per_batch_s", "peak_power_w",
                                "mean_power_w"])  # fmt: skip
        w.writeheader()
        w.writerows(lut_rows())
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,samples_to_accuracy\n" + "".join(
        f"{b},{n}\n" for b, n in EFF.items()))  # fmt: skip
    return {"data": str(data), "profile": str(prof), "eff": str(eff), "tmp": tmp_path}


def base_args(inp):
    return [
        "train", "--backend", "replay", "--replay-profile", inp["profile"],
        "--model", "small_cnn", "--dataset", inp["data"], "--efficiency", inp["eff"],
    ]  # fmt: skip


def schedule_args(inp, schedule, out_dir):
    """A closed-loop run of 1,536 samples under ``schedule``, the LUT as its profile, JSON out.
    Paced: 48 steps of >= 14.8 ms at b=32, so a step at 0.5 s (or 1 ms) falls inside on any
    host. The drift watch is off: it times steps on the host's clock, and a loaded CI core would
    make a replayed step "slower than its profile" (tests/test_drift.py covers drift)."""
    return [
        "--profile", inp["profile"], "--budget-schedule", schedule, "--max-samples", "1536",
        "--eval-every", "512", "--target-accuracy", "1.0", "--lr-ref-batch", "16",
        "--out", str(out_dir), "--json", "--pace-to-profile", "--no-drift",
    ]  # fmt: skip


def run_cli(args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], capture_output=True, text=True, env=env,
        timeout=timeout, cwd=str(ROOT),
    )  # fmt: skip


@pytest.mark.slow
def test_train_json_contract_and_consistent_numbers(inputs):
    out_dir = inputs["tmp"] / "run"
    proc = run_cli(base_args(inputs) + schedule_args(inputs, "0:6,0.5:4.2", out_dir))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("status", "samples", "accuracy", "time_s", "energy_j", "peak_power_w",
                "segments", "guard_events", "drift_events"):  # fmt: skip
        assert key in out, key
    assert out["status"] in ("reached", "not reached")
    assert out["samples"] >= 1536 or out["status"] == "reached"
    # the budget statistic of a replay is its reading (one sampling period); a budget that
    # falls is not an excursion: the stretch before the change ran under the budget then
    assert out["power_window_s"] == pytest.approx(0.05)
    assert (out["over_budget_s"], out["over_budget_j"], out["over_budget_excursions"]) == (0, 0, 0)
    assert out["drift_events"] == [] and out["guard_events"] == []
    segs = out["segments"]
    assert segs[0]["start_s"] == 0 and segs[0]["reason"] == "start"
    for a, b in zip(segs, segs[1:], strict=False):
        assert b["start_s"] == pytest.approx(a["end_s"])
    assert segs[-1]["end_s"] == pytest.approx(out["time_s"])
    for s in segs:
        assert set(s) >= {"start_s", "end_s", "batch_size", "freq_mhz", "budget_w", "reason"}
    assert out["energy_j"] == pytest.approx(sum(s["energy_j"] for s in segs), rel=1e-9)
    # Replay power is the profiled mean at the running point: energy ~ mean power x time.
    assert 1.0 * out["time_s"] * 0.5 < out["energy_j"] <= out["peak_power_w"] * out["time_s"]
    assert out["peak_power_w"] <= max(r["mean_power_w"] for r in lut_rows()) + 1e-9
    assert segs[0]["budget_w"] == 6.0 and (segs[0]["batch_size"], segs[0]["freq_mhz"]) == (32, 800)
    assert segs[-1]["budget_w"] == 4.2 and segs[-1]["freq_mhz"] == 600.0  # the clock came down
    assert segs[-1]["start_s"] >= 0.5  # never before the schedule says
    # one meaning per name: the start point, the end point (the segments hold the rest)
    assert (out["batch_size"], out["freq_mhz"]) == (32, 800)
    assert (out["end_batch_size"], out["end_freq_mhz"]) == (segs[-1]["batch_size"], 600.0)
    saved = json.loads((out_dir / "run.json").read_text())
    assert saved["segments"] == segs
    assert (out_dir / "checkpoint.pt").is_file() and (out_dir / "weights.pt").is_file()


@pytest.mark.slow
def test_train_profiles_first_without_a_profile(inputs):
    proc = run_cli(
        base_args(inputs)
        + [
            "--budget-w",
            "4.2",
            "--max-samples",
            "256",
            "--eval-every",
            "256",
            "--batch-sizes",
            "8,16,32",
            "--out",
            str(inputs["tmp"] / "r2"),
            "--json",
        ]  # fmt: skip
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "profiling first (staircase under 4.2 W)" in proc.stderr
    assert (inputs["tmp"] / "r2" / "profile.csv").is_file()
    assert (out["batch_size"], out["freq_mhz"]) == (16, 600.0)
    assert out["peak_power_w"] <= 4.2


@pytest.mark.parametrize("budget_w, said", [("6", True), ("7", False)])
def test_train_says_when_a_point_it_ran_is_expected_above_the_budget_over_a_longer_run(
    inputs, capsys, budget_w, said
):
    """The profile records each point's peak over a 10x longer run (``peak_forecast_w``). The
    fastest point, b=32 at 800 MHz, peaks at 5.85 W (fits a 6 W budget) but is expected at
    6.30 W over a longer run: train runs it and says so once; under 7 W it says nothing."""
    rows = [{**r, "peak_forecast_w": round(r["peak_power_w"] + 0.45, 4)} for r in lut_rows()]
    prof = inputs["tmp"] / "forecast.csv"
    with open(prof, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    args = base_args(inputs) + ["--profile", str(prof), "--budget-w", budget_w, "--json"]
    code = main(args + ["--max-samples", "256", "--eval-every", "256", "--no-drift"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)
    assert (run["batch_size"], run["freq_mhz"]) == (32, 800)
    lines = [line for line in err.splitlines() if "peak_forecast_w" in line]
    if said:
        assert len(lines) == 1, err
        assert "batch 32 at freq_mhz 800 ran under the 6 W budget" in lines[0]
        assert "expected at 6.3 W" in lines[0]
    else:
        assert lines == [], err


@pytest.mark.parametrize(
    "budget, words",
    [
        (
            ["--budget-schedule", "0:7,600:4.5,300:3"],
            "times must strictly increase, but 300 s follows 600 s",
        ),
        (["--budget-schedule", "0:7,-5:3"], "time '-5' is not a number of seconds >= 0"),
        (["--budget-schedule", "0:seven"], "not a budget"),
        (["--budget-w", "-2"], "not a budget"),
        (["--budget-file", "/nonexistent/budget"], "--budget-file: /nonexistent/budget not found"),
    ],
)
def test_bad_budgets_are_one_line_exit_2(inputs, capsys, budget, words):
    code = main(base_args(inputs) + budget)
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_nothing_fits_is_one_line_exit_2(inputs, capsys):
    code = main(base_args(inputs) + ["--profile", inputs["profile"], "--budget-w", "1.5"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no profiled point fits the 1.5 W budget" in err and "1.95 W" in err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--objective", "deadline"], "--objective deadline needs --deadline-s"),
        (["--objective", "deadline", "--deadline-s", "0"], "--deadline-s must be a positive"),
        (["--objective", "deadline", "--deadline-s", "-5"], "--deadline-s must be a positive"),
        (["--objective", "deadline", "--deadline-s", "nan"], "--deadline-s must be a positive"),
        (["--deadline-s", "30"], "--deadline-s is only for --objective deadline"),
    ],
)
def test_bad_deadlines_are_one_line_exit_2(inputs, capsys, extra, words):
    code = main(base_args(inputs) + ["--profile", inputs["profile"], "--budget-w", "5", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_deadline_on_a_time_only_profile_is_one_line_exit_2(inputs, capsys):
    prof = inputs["tmp"] / "time-only.csv"
    prof.write_text(
        "batch_size,freq_mhz,time_per_batch_s\n"
        + "".join(
            f"{r['batch_size']},{r['freq_mhz']},{r['time_per_batch_s']}\n" for r in lut_rows()
        )
    )
    code = main(
        base_args(inputs)
        + ["--profile", str(prof), "--budget-w", "none", "--objective", "deadline",
           "--deadline-s", "30"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "time-only" in err and str(prof) in err


@pytest.mark.slow
def test_a_clock_the_board_refuses_mid_run_is_one_line_exit_2_and_the_run_written(inputs):
    """The replayed board's own table has no 400 MHz, which the LUT has. When the budget falls
    to 4.2 W, b=32's fastest point there (400 MHz) bridges to the batch switch, and the board
    refuses the lock: the run stops at its next step, exit 2, one line naming the clock and
    the file, status ``error`` (never over its budget), and what ran is written."""
    board = inputs["tmp"] / "board.csv"
    with open(board, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["batch_size", "freq_mhz", "time_per_batch_s", "peak_power_w",
                                "mean_power_w"])  # fmt: skip
        w.writeheader()
        w.writerows(r for r in lut_rows() if r["freq_mhz"] != 400.0)
    out_dir = inputs["tmp"] / "run"
    args = base_args(inputs)
    args[args.index("--replay-profile") + 1] = str(board)
    proc = run_cli(args + schedule_args(inputs, "0:6,0.001:4.2", out_dir))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    why = f"could not change the clock: 400.0 MHz is not in {board}; valid MHz: 200, 600, 800"
    assert proc.stderr.splitlines()[-1] == "powerfleet train: " + why
    out = json.loads(proc.stdout)
    assert (out["status"], out["stop_reason"]) == ("error", why)
    assert out["samples"] < 1536
    # the clock never left 800 MHz (the refused lock changed nothing): whatever time 5.85 W
    # then ran on under 4.2 W before the stop (readings the host's pace decides) is counted,
    # and the status stays the error that caused it (tests/test_loop_parts.py)
    assert [(s["batch_size"], s["freq_mhz"]) for s in out["segments"]] == [(32, 800.0)]
    assert out["guard_events"] == []
    over = [n for n in out["notes"] if n.startswith("over budget: ")]
    assert over == [] if out["over_budget_s"] == 0 else over[0].endswith("ended: error")
    saved = json.loads((out_dir / "run.json").read_text())
    assert (saved["status"], saved["stop_reason"]) == ("error", why)
