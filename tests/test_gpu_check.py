"""benchmarks/gpu_check.py runs its whole path against the fake NVML card, and says in one line
that there is no GPU where NVML does not start. Real subprocesses; the figures checked are the
fake card's (simulations/fake_nvml.py), so the assertions are about what the check reports and
that it changed nothing, not about a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", *args],
        capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=600,
    )  # fmt: skip


def test_gpu_check_with_the_fake_card_writes_every_section(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FAKE_NVML_STATE", None)
    done = _run(["--fake", "--quick", "--out", str(tmp_path / "out")], env)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert report["fake"] is True and report["settings_unchanged"] is True
    # the dev install has nvidia-ml-py: the check ran through NVIDIA's own bindings, the card
    # behind them a stand-in for the driver library (simulations/fake_nvml_lib.py)
    if importlib.util.find_spec("pynvml") is not None:
        assert report["bindings"].startswith("nvidia-ml-py ")
        assert report["bindings"].endswith("on a fake driver library")
    else:
        assert report["bindings"].startswith("the fake pynvml module")
    assert (
        report["device"]["mode"] == "current" and report["settings_before"]["power_limit_w"] == 700
    )
    loads = {(r["load"], r["hz"]) for r in report["energy"]}
    assert loads == {
        (n, hz) for n in ("idle", "steady", "bursty", "small-kernels") for hz in (20, 50)
    }
    for r in report["energy"]:
        assert r["sampled_over_counter"] > 0 and r["n_samples"] >= 3
        if r["load"] in ("idle", "steady"):  # constant power: the sample's timing cannot
            assert 0.95 < r["sampled_over_counter"] < 1.05  # matter (bursts' phase can)
    idle = [r for r in report["energy"] if r["load"] == "idle"]
    assert all(r["sm_clock_mhz_min_max"] == [345, 345] for r in idle)  # the fake's idle clock
    clocks = report["clocks"]
    assert clocks["clock_at_open_mhz"] == 345 and clocks["knob"] == "sm_clock_measured"
    for row in clocks["rows"]:  # each row names the clock it ran at, not the one at open
        assert row["freq_mhz"] != 345
        assert row["sm_clock_min_mhz"] <= row["freq_mhz"] <= row["sm_clock_max_mhz"]
    window = report["peak_vs_window"]
    assert window["samples"] > 50 and window["windows"][0]["window_s"] == 0.25
    assert window["peak_w"] >= window["windows"][0]["median_peak_w"]
    run = report["budgeted_run"]
    for key in (
        "budget_w",
        "status",
        "loop_over_budget_samples",
        "guard_events",
        "side_seconds_above_budget",
        "side_longest_excursion_s",
        "counter_energy_j",
    ):
        assert key in run, key
    # the closed loop's run carries the hardware counter's energy beside its sampled energy
    # (how close the two are is the card's figure, measured by gpu_check on a real card; here
    # the fake's power moves with wall time, so only that both measure the same run is asserted)
    assert run["loop_counter_energy_j"] > 0
    assert 0.5 < run["loop_counter_energy_j"] / run["loop_energy_j"] < 2.0
    text = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "fake NVML (simulated card), not a measurement" in text
    assert "## Energy: sampled vs the hardware counter" in text


def test_gpu_check_without_a_gpu_says_so_in_one_line(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        "def nvmlInit():\n    raise RuntimeError('NVML Shared Library Not Found')\n"
    )  # a machine without the driver
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]))
    done = _run(["--out", str(tmp_path / "out")], env)
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("gpu_check: no NVIDIA GPU here: NVML did not start")
    assert not (tmp_path / "out").exists()


def test_point_vs_window_scores_the_profile_peak_against_a_ten_times_longer_run():
    """gpu_check's section 3 on readings whose answer is known: at a constant 300 W every point's
    peak is the longer run's (ratio 1); with one 1 s burst to 400 W late in the recording, the
    points before it that can see it in their 10x run under-state it (the statistic's peak
    there is 400 W), and the forecast from a flat point cannot know a burst it never saw."""
    from benchmarks.gpu_check import point_vs_window

    times = [i / 20.0 for i in range(20 * 40)]
    flat = point_vs_window(times, [300.0] * len(times), 2.0)
    assert flat["points"] == 10  # starts 0, 2, ..., 18 s
    assert flat["peak_within_1pct"] == flat["forecast_within_1pct"] == 10
    assert flat["forecast_over_10x"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    burst = [400.0 if 30.0 <= t < 31.0 else 300.0 for t in times]
    got = point_vs_window(times, burst, 2.0)
    # points starting at 12-18 s hold the whole burst in their 20 s; the others do not
    assert got["peak_within_1pct"] == got["forecast_within_1pct"] == 10 - 4
    assert got["peak_over_10x"]["min"] == got["forecast_over_10x"]["min"] == 0.75
