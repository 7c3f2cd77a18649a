"""Real weights travel: the fleet's pre-trained weights are shipped and devices fine-tune them.

Covers ``[run] weights`` (resolved beside the fleet file), a fresh model shaped by the task's
data when the fleet names none, the simulated ClientApp's training path with the default
``ship_weights = true`` (Flower's ``to_torch_state_dict`` wants torch already imported), the
direct engine training ``learning = "train"`` devices for real, and prepared dataset names as
a device's ``data``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clients import client_app
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.rounds.virtual_clock import cached_efficiency
from fleet.training.pretrain import pretrain
from fleet.training.task import initial_weights, read_weights
from simulations.runner import simulate
from strategies import coordinator
from tests.test_estimate import tiny_idx
from tests.test_learning import HEADER

ROOT = Path(__file__).resolve().parents[1]

FLEET = """
[run]
name = "weights"
model = "small_cnn"
efficiency = "eff.csv"
target_accuracy = 0.9
lr_ref_batch = 32
lr_ref = 0.002
eval_every_samples = 64
max_samples = 4000
{weights}

[[devices]]
name = "trainer"
type = "jetson-nano"
budget_w = 5.0
profile = "p.csv"
data = "{data}"
learning = "train"
"""


def fleet_dir(tmp_path: Path, weights: str = "", data: str = "tiny") -> Path:
    """A fleet whose one device trains on tiny 1x12x12 two-class data (a fresh small_cnn
    learns it in a few hundred samples); returns the fleet file."""
    if data == "tiny" and not (tmp_path / "tiny").exists():
        tiny_idx(tmp_path / "tiny")
    (tmp_path / "p.csv").write_text(
        HEADER + "\n"
        "8,307.2,0.08,4.0,3.0,jetson-nano\n8,614.4,0.05,5.5,4.5,jetson-nano\n"
        "32,307.2,0.20,4.6,4.0,jetson-nano\n32,614.4,0.12,6.5,5.5,jetson-nano\n"
    )
    (tmp_path / "eff.csv").write_text("batch_size,samples_to_accuracy\n8,800\n32,1600\n")
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET.format(weights=weights, data=data))
    return path


def test_run_weights_resolve_beside_the_fleet_and_a_missing_file_is_one_line(tmp_path, monkeypatch):
    path = fleet_dir(tmp_path)
    meta = pretrain("small_cnn", str(tmp_path / "tiny"), str(tmp_path / "w.pt"), epochs=1)
    assert meta
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(
        tmp_path / "elsewhere"
    )  # relative to the fleet file, not the working directory
    path.write_text(path.read_text().replace("max_samples", 'weights = "w.pt"\nmax_samples'))
    state = initial_weights(load_fleet(path))
    saved = read_weights(str(tmp_path / "w.pt"))
    assert state.keys() == saved.keys()
    assert all((state[k] == saved[k]).all() for k in saved)
    path.write_text(path.read_text().replace('"w.pt"', '"nope.pt"'))
    with pytest.raises(InputError, match=r"\[run\] weights: file not found: nope.pt"):
        initial_weights(load_fleet(path))


def test_a_fresh_model_takes_the_input_shape_of_the_devices_data(tmp_path):
    state = initial_weights(load_fleet(fleet_dir(tmp_path)))
    first_conv = next(v for k, v in state.items() if v.dim() == 4)
    assert first_conv.shape[1] == 1  # 1x12x12 data, not the model's default 3 channels


def test_shipped_pretrained_weights_reach_the_training_device(tmp_path):
    """Through the simulated ClientApp's train path with the default ship_weights = true: the
    pre-trained model meets the target before any step; a fresh one must train to get there."""
    fresh_fleet = load_fleet(fleet_dir(tmp_path))
    pretrain("small_cnn", str(tmp_path / "tiny"), str(tmp_path / "w.pt"), epochs=3, lr=2e-3)
    (tmp_path / "pre").mkdir()
    pre_path = fleet_dir(tmp_path / "pre", 'weights = "../w.pt"', data="../tiny")
    rows = {}
    for name, fleet in (("fresh", fresh_fleet), ("pre", load_fleet(pre_path))):
        assert coordinator.ship_weights(fleet.run)  # the default
        shipped = cached_efficiency(fleet.run.efficiency)
        received = client_app.Received(
            coordinator.instruction_for(fleet, shipped), coordinator.fleet_arrays(fleet)
        )
        rows[name], trained = client_app.learn(fleet.devices[0], received)
        assert trained is not None and len(trained) > 0
    assert rows["pre"]["status"] == rows["fresh"]["status"] == "ok", rows
    assert rows["pre"]["samples"] == 0 and rows["pre"]["accuracy"] >= 0.9
    assert rows["fresh"]["samples"] > 0


def test_state_dict_of_works_before_torch_is_imported():
    """Flower's to_torch_state_dict fails unless torch is already in sys.modules."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from flwr.app import Array, ArrayRecord\n"
        "from clients.records import state_dict_of\n"
        "assert 'torch' not in sys.modules, 'torch already imported: nothing to check'\n"
        "sd = state_dict_of(ArrayRecord({'w': Array(np.ones(3, dtype=np.float32))}))\n"
        "print(type(sd['w']).__name__, float(sd['w'].sum()))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Tensor", "3.0"]


def test_direct_engine_trains_learning_train_devices(tmp_path):
    path = fleet_dir(tmp_path)
    report = simulate(path, engine="direct", run_dir=tmp_path / "run")
    (row,) = report["devices"]
    assert (row["learning"], row["status"]) == ("train", "ok"), row["message"]
    assert row["accuracy"] >= 0.9 and row["samples"] > 0
    # 5 W: b=8 at 307.2 MHz (0.08 s per batch of 8): the device's clock, not this CPU's
    assert (row["batch_size"], row["freq_mhz"]) == (8, 307.2)
    assert row["time_s"] == pytest.approx(row["samples"] * 0.08 / 8)


def test_a_prepared_dataset_name_is_a_name_not_a_path(tmp_path):
    fleet = load_fleet(fleet_dir(tmp_path, data="mnist-5k"))
    assert fleet.devices[0].data == "mnist-5k"
    empty = tmp_path / "no-data"
    empty.mkdir()
    text = (tmp_path / "fleet.toml").read_text()
    (tmp_path / "fleet.toml").write_text(
        text.replace("[[devices]]", f'data_dir = "{empty}"\n\n[[devices]]')
    )
    # looked up in the prepared-data cache, which says how to fill it (the coordinator reads
    # the data for the model's input shape before the round: one line, no round)
    with pytest.raises(InputError, match="dataset 'mnist-5k' is not prepared") as err:
        simulate(tmp_path / "fleet.toml", engine="direct", run_dir=tmp_path / "run")
    assert "powerfleet data prepare mnist-5k" in str(err.value)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_flower_simulation_ships_pretrained_weights_to_a_training_device(tmp_path):
    """Flower's simulation engine (a ClientApp in another process, torch not yet imported
    there): the default ship_weights = true sends the fleet's pre-trained weights, which the
    device fine-tunes from (it meets the target at once)."""
    from simulations.flower_engine import run_flower

    tiny_idx(tmp_path / "tiny")
    pretrain("small_cnn", str(tmp_path / "tiny"), str(tmp_path / "w.pt"), epochs=3, lr=2e-3)
    path = fleet_dir(tmp_path, 'weights = "w.pt"')
    report = run_flower(path, tmp_path / "run")
    (row,) = report["devices"]
    assert (row["status"], row["learning"]) == ("ok", "train"), row["message"]
    assert row["samples"] == 0 and row["accuracy"] >= 0.9
    assert report["ship_weights"] is True
