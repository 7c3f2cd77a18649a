"""Real learning on a simulated device: CPU training, device clock."""

import pytest

from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.rounds.host_training import train_device
from tests.test_estimate import tiny_idx

HEADER = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,device"


def setup(tmp_path):
    data = tiny_idx(tmp_path / "tiny")
    prof = tmp_path / "p.csv"
    prof.write_text(
        HEADER + "\n"
        "8,307.2,0.08,4.0,3.0,jetson-nano\n8,614.4,0.05,5.5,4.5,jetson-nano\n"
        "32,307.2,0.20,4.6,4.0,jetson-nano\n32,614.4,0.12,6.5,5.5,jetson-nano\n"
    )
    shipped = Efficiency({8: 800.0, 32: 1600.0}, source="proxy.csv")
    run = RunSettings(
        "t",
        "small_cnn",
        "proxy.csv",
        0.9,
        lr_ref_batch=32,
        lr_ref=2e-3,
        eval_every_samples=64,
        max_samples=4000,
    )
    return data, prof, shipped, run


def test_training_device_reaches_target_on_the_device_clock(tmp_path):
    data, prof, shipped, run = setup(tmp_path)
    spec = DeviceSpec("n1", "jetson-nano", 5.0, str(prof), str(data), learning="train")
    row, weights = train_device(spec, shipped, run)
    # 5 W: b=8@307.2 (0.01 s/sample * 800 = 8 s) vs b=32@307.2 (0.00625 * 1600 = 10 s) -> b=8
    assert (row.status, row.batch_size, row.freq_mhz) == ("ok", 8, 307.2)
    assert row.accuracy >= 0.9 and row.learning == "train"
    assert row.samples % 64 == 0 or row.samples % 8 == 0
    # the clock is the profile's, not this CPU's
    assert row.time_s == pytest.approx(row.samples * 0.08 / 8)
    assert row.energy_j == pytest.approx(row.time_s * 3.0)
    assert row.peak_power_w <= 5.0 and row.to_dict()["speedup_vs_b1"] is None
    assert weights and all(hasattr(v, "shape") for v in weights.values())


def test_same_seed_same_samples(tmp_path):
    data, prof, shipped, run = setup(tmp_path)
    spec = DeviceSpec("n1", "jetson-nano", None, str(prof), str(data), learning="train")
    a, _ = train_device(spec, shipped, run)
    b, _ = train_device(spec, shipped, run)
    assert a.samples == b.samples and a.time_s == b.time_s


def test_infeasible_and_missing_data(tmp_path):
    data, prof, shipped, run = setup(tmp_path)
    row, w = train_device(
        DeviceSpec("n1", "jetson-nano", 2.0, str(prof), str(data), learning="train"), shipped, run
    )
    assert row.status == "infeasible" and w is None and "lowest measured peak" in row.message
    row, _ = train_device(
        DeviceSpec("n1", "jetson-nano", 5.0, str(prof), str(tmp_path / "no"), learning="train"),
        shipped,
        run,
    )
    assert row.status == "error" and "no such file" in row.message
