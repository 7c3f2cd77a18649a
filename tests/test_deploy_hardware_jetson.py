"""A deployment round with the hardware ClientApp against two virtual Jetsons (Nano, TX2 NX).

A real SuperLink and two SuperNodes on 127.0.0.1, each ``client = "hardware"`` with
``backend = "jetson"`` and ``sysfs-root`` = its own virtual board whose kernel stand-in runs
during the test. The fleet names pre-trained weights (``[run] weights``), which the coordinator
ships and both boards fine-tune from; the Nano has a budget schedule 5 W -> 3 W. The test
samples the Nano's devfreq files while the round runs: the clock was lowered at the step, the
originals are back after the round, and both rows are ``not reached`` runs (target 1.0, a few
thousand samples) that trained on the board, with their segments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from deployment import daemons, deploy
from fleet.agent.models.registry import build_model
from fleet.config.fleetfile import load_fleet
from fleet.training.task import read_weights, write_weights
from simulations.virtual_jetson import build_board
from tests.deploy_helpers import run_loopback_round, stopped_at_exit
from tests.hardware_helpers import (
    BATCH,
    MHZ,
    ClockLog,
    board_profile,
    check_clocks_follow,
    tiny_pt_data,
)

FLEET = """
[run]
name = "deploy-jetson"
model = "small_cnn"
efficiency = "eff.csv"
weights = "w.pt"
target_accuracy = 1.0
lr_ref_batch = 16
lr_ref = 0.001
max_samples = {max_samples}
eval_every_samples = 2000

[[devices]]
name = "nano-1"
type = "jetson-nano"
budget_schedule = "0:5,2:3"
profile = "nano.csv"
data = "work/nano-1/nano.pt"  # on the board, inside the agent's work dir

[[devices]]
name = "tx2-1"
type = "jetson-tx2nx"
budget_w = "none"
profile = "tx2.csv"
data = "work/tx2-1/tx2.pt"
"""


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_virtual_jetsons_one_deployment_round(tmp_path: Path) -> None:
    boards = {
        "nano-1": build_board(tmp_path / "nano", "nano", workload="small_cnn"),
        "tx2-1": build_board(tmp_path / "tx2", "tx2nx", workload="small_cnn"),
    }
    originals = {name: b.bounds() for name, b in boards.items()}
    for board in boards.values():
        board.set_load(BATCH)
    board_profile(boards["nano-1"], tmp_path / "nano.csv")
    board_profile(boards["tx2-1"], tmp_path / "tx2.csv")
    for name, file, seed in (("nano-1", "nano.pt", 1), ("tx2-1", "tx2.pt", 2)):
        (tmp_path / "work" / name).mkdir(parents=True, mode=0o700)  # as the agent wants it
        tiny_pt_data(tmp_path / "work" / name / file, seed=seed)
    (tmp_path / "eff.csv").write_text(f"batch_size,samples_to_accuracy\n{BATCH},4000\n")
    pretrained = build_model("small_cnn", input_shape="1x8x8", seed=7).state_dict()
    write_weights(pretrained, str(tmp_path / "w.pt"))
    fleet_file = tmp_path / "fleet.toml"
    # paced boards: the Nano's 175 steps last ~2 s at 921.6 MHz, then ~3.6 s at 384 MHz
    fleet_file.write_text(FLEET.format(max_samples=2800))
    fleet = load_fleet(fleet_file)
    run_dir = tmp_path / "run"
    configs = {}
    for spec in fleet.devices:
        configs[spec.name] = daemons.device_node_config(spec.to_node_config(), "hardware")
        configs[spec.name].update(
            {
                "backend": "jetson",
                "sysfs-root": str(boards[spec.name].root),
                "state-dir": str(tmp_path / "state" / spec.name),
                "work-dir": str(tmp_path / "work" / spec.name),
                "agent-timeout-s": 120.0,
                "pace-to-profile": "true",  # steps last the profile's time, not this CPU's
            }
        )
    run_config = {"fleet-path": str(fleet_file), "run-dir": str(run_dir), "run-token": "j"}
    with (
        boards["nano-1"].kernel(process=True, lag_s=0.02),
        boards["tx2-1"].kernel(process=True, lag_s=0.02),
        ClockLog(boards["nano-1"]) as log,
    ):
        with stopped_at_exit() as procs:
            status, details = run_loopback_round(
                procs, tmp_path, configs, run_config, timeout_s=120
            )
        after = {name: b.bounds() for name, b in boards.items()}
    assert status == "finished:completed", details
    report = deploy.read_report(run_dir, "j")
    assert report is not None
    rows = {r["device"]: r for r in report["devices"]}
    for name in ("nano-1", "tx2-1"):
        row = rows[name]
        assert row["status"] == "not reached", row["message"]  # trained on the board
        assert row["samples"] == 2800 and row["peak_power_w"] is not None
        assert row["segments"] and row["segments"][0]["reason"] == "start"
    # the Nano followed its schedule: 921.6 MHz under 5 W, 384 MHz after the 3 W step
    nano = rows["nano-1"]["segments"]
    assert [(s["budget_w"], s["freq_mhz"]) for s in nano] == [(5.0, 921.6), (3.0, 384.0)]
    pinned = log.pinned()
    assert pinned[0][1] == 921.6 * MHZ and pinned[-1][1] == 384.0 * MHZ
    assert 2.0 <= nano[1]["start_s"]  # the loop's own clock: never before the step
    assert check_clocks_follow(pinned, nano) >= 2
    # the pre-trained weights travelled: each board got the fleet's file as its input weights
    # (and loaded them: a shape mismatch would be an error row)
    for name in ("nano-1", "tx2-1"):
        (shipped,) = (tmp_path / "work" / name).glob("*_in.pt")
        got = read_weights(str(shipped))
        assert all(torch.equal(got[k], v) for k, v in pretrained.items())
    # both boards' clocks are their originals again
    assert after == originals
