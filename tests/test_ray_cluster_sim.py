"""The Flower engine on an existing Ray cluster: a head and a second node on 127.0.0.1.

What it shows: ``powerfleet simulate --ray-address`` (``run_flower(ray_address=...)``) joins a
running cluster instead of starting a private Ray; each node holds one CPU and each device one
CPU, so Flower's actor pool has one worker per node and the devices' segments run on both
(the report's ``ran_on`` names the Ray node of every reply); and the rows are the ones the
direct engine computes in one process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.planning.learning_rounds import simulate_rounds
from fleet.reports.report import json_safe, runner_row
from simulations.flower_engine import RayPlacement, federation_config, run_flower
from tests.ray_cluster import two_node_cluster
from tests.row_compare import diff

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

SIM = Path(__file__).resolve().parents[1] / "simulations"


def _fleet(n: int) -> str:
    head = f"""
[run]
name = "cluster-test"
model = "resnet18"
efficiency = "{SIM}/efficiency/resnet18_cifar10-proxy.csv"
target_accuracy = 0.92
"""
    kinds = [
        ("jetson-nano", "nano_resnet18.csv", "resnet18_svhn.csv", "4.5"),
        ("jetson-tx2nx", "tx2nx_resnet18.csv", "resnet18_cinic.csv", '"none"'),
    ]
    devices = []
    for i in range(n):
        dtype, profile, data, budget = kinds[i % 2]
        devices.append(
            f"""
[[devices]]
name = "dev-{i}"
type = "{dtype}"
budget_w = {budget}
profile = "{SIM}/profiles/{profile}"
data = "{SIM}/efficiency/{data}"
"""
        )
    return head + "".join(devices)


def test_fleet_on_a_two_node_cluster_matches_one_process(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(_fleet(6))
    fleet = load_fleet(fleet_file)
    want = simulate_rounds(fleet, None, 1, tmp_path / "direct-store")[-1].rows
    with two_node_cluster() as address:
        report = run_flower(fleet_file, tmp_path / "run", ray_address=address, device_cpus=1)
    rows = {r["device"]: r for r in report["devices"]}
    assert list(rows) == [d.name for d in fleet.devices]
    for spec, expected in zip(fleet.devices, want, strict=True):
        assert diff(runner_row(rows[spec.name]), json_safe(expected), spec.name) == []
    # every device says where its segments ran; one worker per node: both nodes served
    ran_on = report["ran_on"]
    assert set(ran_on) == set(rows)
    nodes = {node for where in ran_on.values() for node in where}
    assert len(nodes) == 2, ran_on
    assert all("/" in node for node in nodes)  # IP/node-id: both nodes share 127.0.0.1's host


def test_cluster_config_leaves_sizing_to_the_cluster_and_private_runs_stay_private() -> None:
    on = federation_config(3, placement=RayPlacement("127.0.0.1:6379", 2, 0.5))
    assert "client-resources-num-cpus = 2\n" in on and "client-resources-num-gpus = 0.5\n" in on
    assert "init-args-num-cpus" not in on  # Ray refuses sizes when joining a cluster
    private = federation_config(3, ray_cpus=2)
    assert "init-args-num-cpus = 2\n" in private
    assert RayPlacement().environment() == {"RAY_ADDRESS": "local"}
    assert RayPlacement("127.0.0.1:6379").environment() == {"RAY_ADDRESS": "127.0.0.1:6379"}


def test_nothing_listening_at_the_address_is_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    from deployment.processes import free_port

    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(_fleet(1))
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(InputError, match=rf"ray address {address}: no Ray cluster answers"):
        run_flower(fleet_file, tmp_path / "run", ray_address=address)
    assert not (tmp_path / "run").exists()


def test_cli_refuses_a_bad_address_and_the_direct_engine_in_one_line() -> None:
    from tests.conftest import run_cli

    bad = run_cli("simulate", "--ray-address", "nope")
    assert bad.returncode == 2
    assert "--ray-address: expected host:port or auto, got 'nope'" in bad.stderr
    direct = run_cli("simulate", "--engine", "direct", "--ray-address", "127.0.0.1:6379")
    assert direct.returncode == 2 and "Traceback" not in direct.stderr
    assert direct.stderr.strip().endswith("need --engine flower")
