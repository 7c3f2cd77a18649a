"""The on-device profiler: real CPU training steps, staircase on a replayed device, OOM, restore.

Backends here are small real ``Backend`` subclasses (no mock library): one time-only, one GPU-like
with a frequency knob and a constant power rail that records every lock and restore.
"""

import argparse
import json
import threading

import pytest
import torch

from fleet.agent.devices.base import Backend, DeviceError
from fleet.agent.devices.replay import ReplayBackend
from fleet.agent.measure.measurers import is_oom
from fleet.agent.measure.profile_writer import write_profile
from fleet.agent.models.registry import build_model
from fleet.method.profile_io import read_rows, write_rows
from tests.hardware_helpers import sweep

NANO_FREQS = [76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2, 768.0, 844.8, 921.6]
BATCHES = [4, 8, 16, 32, 64, 128]


class TimeOnlyBackend(Backend):
    """A CPU-like device: no frequency knob, no power rail."""

    name = "timeonly"

    def frequencies(self):
        return []

    def lock(self, freq_mhz):
        raise DeviceError("no frequency control")

    def restore(self):
        pass

    def read_power_w(self):
        return None


class FakeGpu(Backend):
    """A GPU-like device: lockable frequencies, a constant rail, a log of what was done to it."""

    name = "fakegpu"

    def __init__(self, freqs=(100.0, 200.0, 300.0), watts=5.0):
        self.freqs = list(freqs)
        self.original = self.freqs[-1]
        self.current = self.original
        self.watts = watts
        self.locks = []
        self.restores = 0

    def frequencies(self):
        return list(self.freqs)

    def lock(self, freq_mhz):
        if freq_mhz not in self.freqs:
            raise DeviceError(f"{freq_mhz} not offered")
        self.locks.append(freq_mhz)
        self.current = freq_mhz

    def restore(self):
        self.restores += 1
        self.current = self.original

    def read_power_w(self):
        return self.watts

    def describe(self):
        return {"backend": self.name, "board": "Fake Board"}


class Raising(torch.nn.Module):
    """small_cnn that raises a given exception when it sees one particular batch size."""

    def __init__(self, batch_size, exc):
        super().__init__()
        self.inner = build_model("small_cnn", 10, "3x32x32", seed=0)
        self.batch_size = batch_size
        self.exc = exc

    def forward(self, x):
        if x.shape[0] == self.batch_size:
            raise self.exc
        return self.inner(x)


def no_sampler_threads():
    return not any(t.name == "power-sampler" and t.is_alive() for t in threading.enumerate())


def synthetic_profile(path, oom_batch=None):
    """A Nano-like grid: power rises with batch and frequency, time falls with frequency."""
    rows = []
    for b in BATCHES:
        for f in NANO_FREQS:
            if b == oom_batch:
                rows.append({"batch_size": b, "freq_mhz": f, "status": "oom"})
                continue
            peak = 1.5 + 0.0045 * f * (1.0 + 0.12 * BATCHES.index(b))
            rows.append(
                {
                    "batch_size": b,
                    "freq_mhz": f,
                    "time_per_batch_s": 0.002 * b * 921.6 / f + 0.01,
                    "peak_power_w": peak,
                    "mean_power_w": 0.85 * peak,
                    "samples": 5,
                    "status": "ok",
                    "device": "jetson-nano-synthetic",
                }
            )
    write_rows(str(path), rows, ["synthetic Nano-like profile"])
    return str(path)


def frontier(rows, budget):
    """batch -> highest frequency whose peak is within the budget (paper eq. 4)."""
    best = {}
    for r in rows:
        if r["status"] == "ok" and r["peak_power_w"] <= budget:
            best[r["batch_size"]] = max(best.get(r["batch_size"], 0.0), r["freq_mhz"])
    return best


@pytest.mark.slow
def test_cpu_profile_time_only_writes_valid_csv(tmp_path):
    calls = []
    result = sweep(
        TimeOnlyBackend(),
        "small_cnn",
        "3x32x32",
        [8, 4],
        steps=2,
        warmup=1,
        progress=lambda done, total, row: calls.append((done, total)),
    )
    assert [r["batch_size"] for r in result.rows] == [4, 8]
    assert (result.probes, result.grid_size) == (2, 2)
    assert calls == [(1, 2), (2, 2)]
    for r in result.rows:
        assert r["status"] == "ok" and r["freq_mhz"] == 0 and r["samples"] == 2
        assert r["time_per_batch_s"] > 0
        assert r["peak_power_w"] is None and r["mean_power_w"] is None
    out = tmp_path / "sub" / "cpu.csv"
    write_profile(str(out), result.rows, result.metadata)
    header, rows, comments = read_rows(str(out))
    assert header[:4] == ["batch_size", "freq_mhz", "time_per_batch_s", "peak_power_w"]
    assert "idle_power_w" not in header  # no rail: no idle power to report
    assert [row["batch_size"] for _, row in rows] == ["4", "8"]
    for _, row in rows:
        assert row["peak_power_w"] == "" and row["mean_power_w"] == ""
        assert float(row["time_per_batch_s"]) > 0
        assert (row["device"], row["model"], row["input_shape"]) == (
            "timeonly",
            "small_cnn",
            "3x32x32",
        )
        assert row["status"] == "ok" and row["samples"] == "2"
    keys = dict(c.split("=", 1) for c in comments if "=" in c)
    assert keys["backend"] == "timeonly" and keys["source"] == "measured"
    assert keys["steps"] == "2" and keys["warmup"] == "1" and keys["torch"] == torch.__version__
    assert keys["date"].endswith("Z") and "host" in keys and keys["plan"] == "grid"
    assert no_sampler_threads()


@pytest.mark.slow
def test_power_is_sampled_over_the_timed_window_and_frequencies_restored():
    gpu = FakeGpu(watts=6.5)
    result = sweep(
        gpu, "small_cnn", "3x32x32", [4], freqs=[100.0, 300.0], steps=2, warmup=0, sampler_hz=100
    )
    assert [r["freq_mhz"] for r in result.rows] == [100, 300]
    for r in result.rows:
        assert r["peak_power_w"] == pytest.approx(6.5)
        assert r["mean_power_w"] == pytest.approx(6.5)
        assert r["power_samples"] >= 1
    assert gpu.locks == [100.0, 300.0]
    assert gpu.current == gpu.original and gpu.restores >= 1
    assert result.metadata["device"] == "Fake Board"
    assert result.metadata["idle_power_w"] == 6.5  # the rail read before the sweep
    assert no_sampler_threads()


@pytest.mark.parametrize("budget", [3.0, 4.2, 5.5, 9.0])
def test_staircase_on_replay_probes_less_and_finds_the_grid_frontier(tmp_path, budget):
    csv = synthetic_profile(tmp_path / "nano.csv")
    grid = sweep(ReplayBackend(csv), "resnet18", "3x32x32", BATCHES)
    assert grid.probes == grid.grid_size == len(BATCHES) * len(NANO_FREQS)
    replay = ReplayBackend(csv)
    stair = sweep(replay, "resnet18", "3x32x32", BATCHES, budget_w=budget)
    assert stair.probes < grid.probes
    assert stair.grid_size == grid.grid_size
    assert frontier(stair.rows, budget) == frontier(grid.rows, budget)
    assert frontier(grid.rows, budget)  # the budgets chosen leave something feasible
    assert stair.metadata["source"] == "replayed" and stair.metadata["plan"] == "staircase"
    assert replay.locked_mhz is None  # restored


def test_replayed_profile_rewrites_to_the_same_numbers(tmp_path):
    csv = synthetic_profile(tmp_path / "nano.csv", oom_batch=128)
    result = sweep(ReplayBackend(csv), "resnet18", None, BATCHES)
    out = tmp_path / "again.csv"
    write_profile(str(out), result.rows, result.metadata)
    _, original, _ = read_rows(csv)
    _, again, comments = read_rows(str(out))
    assert len(again) == len(original)
    for (_, a), (_, b) in zip(original, again, strict=True):
        for key in ("batch_size", "time_per_batch_s", "peak_power_w", "mean_power_w"):
            assert a.get(key, "") == b.get(key, "")
        assert float(a["freq_mhz"]) == float(b["freq_mhz"])
    assert {b["status"] for _, b in again if b["batch_size"] == "128"} == {"unavailable"}
    assert "source=replayed" in comments


def test_replay_passes_on_the_recorded_idle_power(tmp_path):
    from tests.conftest import ROOT

    modeled = str(ROOT / "simulations/profiles/nano_small_cnn.csv")  # idle_power_w = 1.25
    result = sweep(ReplayBackend(modeled), "small_cnn", None, [4, 8])
    out = tmp_path / "replayed.csv"
    write_profile(str(out), result.rows, result.metadata)
    _, rows, comments = read_rows(str(out))
    assert {row["idle_power_w"] for _, row in rows} == {"1.25"}
    assert not any(c.startswith("idle_window_s") for c in comments)  # nothing was measured
    bare = synthetic_profile(tmp_path / "nano.csv")
    assert "idle_power_w" not in sweep(ReplayBackend(bare), "resnet18", None, [4]).metadata
    # a tiny recorded value keeps its digits (rounding to 4 places made it 0: unloadable), a
    # non-positive one is not passed on
    from fleet.core.profile import load_profile

    text = open(modeled).read()
    for recorded, want in (("0.00001", 1e-05), ("0", None), ("-2", None)):
        rec = tmp_path / f"rec{recorded}.csv"
        rec.write_text(text.replace(",1.25", "," + recorded))
        got = sweep(ReplayBackend(str(rec)), "small_cnn", None, [4, 8])
        assert got.metadata.get("idle_power_w") == want
        write_profile(str(out), got.rows, got.metadata)
        assert load_profile(str(out)).idle_power_w == want


@pytest.mark.slow
def test_out_of_memory_is_recorded_and_profiling_continues(tmp_path):
    gpu = FakeGpu()
    model = Raising(8, RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    result = sweep(
        gpu,
        "small_cnn",
        "3x32x32",
        [4, 8, 16],
        freqs=[100.0, 200.0],
        steps=1,
        warmup=1,
        model=model,
        min_window_s=0.0,
    )
    statuses = [(r["batch_size"], r["freq_mhz"], r["status"]) for r in result.rows]
    # OOM does not depend on frequency: batch 8 is tried once, then the next batch size runs.
    assert statuses == [(4, 100, "ok"), (4, 200, "ok"), (8, 100, "oom"), (16, 100, "ok"),
                        (16, 200, "ok")]  # fmt: skip
    oom = result.rows[2]
    assert oom["time_per_batch_s"] is None and oom["peak_power_w"] is None
    assert gpu.current == gpu.original
    out = tmp_path / "oom.csv"
    write_profile(str(out), result.rows, result.metadata)
    _, rows, _ = read_rows(str(out))
    row = [r for _, r in rows if r["status"] == "oom"][0]
    assert (row["batch_size"], row["time_per_batch_s"], row["peak_power_w"]) == ("8", "", "")


@pytest.mark.slow
def test_out_of_memory_under_a_budget_skips_the_batch_size():
    gpu = FakeGpu(watts=4.0)
    model = Raising(16, MemoryError())
    result = sweep(
        gpu, "small_cnn", "3x32x32", [4, 16], steps=1, warmup=0, budget_w=5.0, model=model,
        min_window_s=0.0,
    )  # fmt: skip
    # Staircase: b=16 first (one probe, oom), then b=4 climbs all three frequencies.
    assert [(r["batch_size"], r["status"]) for r in result.rows] == [
        (4, "ok"), (4, "ok"), (4, "ok"), (16, "oom"),
    ]  # fmt: skip
    assert result.probes == 4 and result.grid_size == 6


@pytest.mark.slow
def test_frequency_restored_after_an_exception_mid_profile():
    gpu = FakeGpu()
    model = Raising(8, ValueError("boom in forward"))
    with pytest.raises(ValueError, match="boom"):
        sweep(gpu, "small_cnn", "3x32x32", [4, 8], steps=1, warmup=0, model=model, min_window_s=0.0)
    assert gpu.locks and gpu.current == gpu.original and gpu.restores >= 1
    assert no_sampler_threads()


def test_bad_requests_fail_early_with_one_line():
    with pytest.raises(DeviceError, match="needs power readings"):
        sweep(TimeOnlyBackend(), "small_cnn", None, [4], budget_w=5.0)
    with pytest.raises(DeviceError, match="cannot lock"):
        sweep(TimeOnlyBackend(), "small_cnn", None, [4], freqs=[100.0])
    with pytest.raises(DeviceError, match="does not offer 150"):
        sweep(FakeGpu(), "small_cnn", None, [4], freqs=[150.0])
    with pytest.raises(ValueError, match="batch sizes"):
        sweep(FakeGpu(), "small_cnn", None, [0])
    with pytest.raises(ValueError, match="steps"):
        sweep(FakeGpu(), "small_cnn", None, [4], steps=0)


def test_is_oom_recognises_gpu_and_cpu_allocators():
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert is_oom(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"))
    assert is_oom(MemoryError())
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(ValueError("out of memory"))


def test_cli_profile_on_replay_prints_json_and_writes_csv(tmp_path, capsys):
    from fleet.cli import cmd_profile

    csv = synthetic_profile(tmp_path / "nano.csv")
    parser = argparse.ArgumentParser()
    cmd_profile.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "prof.csv"
    args = parser.parse_args(
        ["profile", "--backend", "replay", "--replay-profile", csv, "--model", "resnet18",
         "--batch-sizes", "4,16,64", "--budget-w", "5", "--out", str(out), "--json"]
    )  # fmt: skip
    assert args.func(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["path"] == str(out) and summary["backend"] == "replay"
    assert summary["probes"] == summary["rows"] < summary["grid_size"] == 3 * len(NANO_FREQS)
    assert summary["saved"] == summary["grid_size"] - summary["probes"]
    _, rows, _ = read_rows(str(out))
    assert len(rows) == summary["rows"]

    from fleet.common.errors import InputError

    bad = parser.parse_args(
        ["profile", "--backend", "replay", "--model", "resnet18", "--out", str(out)]
    )
    with pytest.raises(InputError, match="--replay-profile"):
        bad.func(bad)
    bad = parser.parse_args(
        ["profile", "--backend", "replay", "--replay-profile", csv, "--model", "vgg",
         "--out", str(out)]
    )  # fmt: skip
    with pytest.raises(InputError, match="unknown model"):
        bad.func(bad)
