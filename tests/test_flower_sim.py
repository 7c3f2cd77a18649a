"""run_flower: a 3-device fleet through Flower's Simulation Runtime (Ray), checked row by row.

The Flower path must give what the device model gives when called directly
(``fleet.rounds.virtual_clock.simulate_device``): same choice, time, energy, segments (to the
last bit's rounding: the round runs in segments whose counters add up). Two federated
rounds with a small model also exercise weights travelling both ways and the per-round report
layout.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleet.config.fleetfile import load_fleet
from fleet.planning.learning_rounds import simulate_rounds
from fleet.reports.report import json_safe, runner_row
from fleet.reports.roundstate import read_state
from simulations.flower_engine import run_flower
from tests.row_compare import diff

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

SIM = Path(__file__).resolve().parents[1] / "simulations"

FLEET = f"""
[run]
name = "sim-test"
model = "small_cnn"
efficiency = "{SIM}/efficiency/resnet18_cifar10-proxy.csv"
target_accuracy = 0.92
mode = "federated"
objective = "time"
rounds = 2

[[devices]]
name = "nano-4w5"
type = "jetson-nano"
budget_w = 4.5
profile = "{SIM}/profiles/nano_resnet18.csv"
data = "{SIM}/efficiency/resnet18_svhn.csv"

[[devices]]
name = "tx2-free"
type = "jetson-tx2nx"
budget_w = "none"
profile = "{SIM}/profiles/tx2nx_resnet18.csv"
data = "{SIM}/efficiency/resnet18_cinic.csv"

[[devices]]
name = "nano-starved"
type = "jetson-nano"
budget_w = 1.5
profile = "{SIM}/profiles/nano_resnet18.csv"
data = "{SIM}/efficiency/resnet18_svhn.csv"
"""


def test_run_flower_matches_direct_replay(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(FLEET)
    events: list[tuple[int, int, str]] = []
    report = run_flower(fleet_file, tmp_path / "run", lambda *e: events.append(e))

    fleet = load_fleet(fleet_file)
    rows = {r["device"]: r for r in report["devices"]}
    assert list(rows) == [d.name for d in fleet.devices]
    # round 2 ships each device what round 1 taught the efficiency store, in both engines
    want = simulate_rounds(fleet, None, fleet.run.rounds, tmp_path / "direct-store")[-1].rows
    for spec, expected in zip(fleet.devices, want, strict=True):
        # segmented (the default): equal to the last bit's rounding of the summed segments
        assert diff(runner_row(rows[spec.name]), json_safe(expected), spec.name) == []
    assert rows["nano-4w5"]["efficiency"].startswith("learned:")
    assert report["efficiency_store"] == str(tmp_path / "run" / "efficiency-store")

    # the round ran in segments of 600 device seconds, and its book says so
    state = read_state(tmp_path / "run")
    assert state["finished"] is True and state["segment_s"] == 600.0
    assert list(state["devices"]) == [d.name for d in fleet.devices]
    for name, e in state["devices"].items():
        if e["status"] == "ok":
            t = rows[name]["time_s"]
            assert e["progress"]["segments"] == math.ceil(t / 600.0), name
            assert e["progress"]["time_s"] == pytest.approx(t, rel=1e-9)
            assert e["progress"]["done"] == pytest.approx(1.0)

    assert rows["nano-starved"]["status"] == "infeasible"
    assert "1.5" in rows["nano-starved"]["message"]
    for row in rows.values():
        if row["status"] == "ok" and row["budget_w"] is not None:
            assert row["peak_power_w"] <= row["budget_w"]
    assert report["fleet"]["trained"] == 2 and report["fleet"]["budget_violations"] == []
    assert report["fleet"]["status_counts"] == {"ok": 2, "infeasible": 1}

    assert report["engine"] == "flower" and report["ship_weights"] is True
    assert report["rounds"] == 2 and [r["round"] for r in report["round_totals"]] == [1, 2]
    assert (tmp_path / "run" / "rounds" / "round-002" / "devices.csv").exists()
    # federated: the global model is kept beside the report, loadable into the fleet's model
    from fleet.agent.data import tensorfile
    from fleet.agent.models.registry import build_model

    state = tensorfile.load(report["global_model"], "weights")
    assert set(state) == set(build_model(fleet.run.model).state_dict())
    assert events[0] == (0, 6, "starting") and events[-1] == (6, 6, "done")
    replies = events[1:-1]
    assert [done for done, _, _ in replies] == [1, 2, 3, 4, 5, 6]
    assert sorted(name for _, _, name in replies) == sorted(2 * [d.name for d in fleet.devices])
