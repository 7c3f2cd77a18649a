"""Deployment end to end on 127.0.0.1: a real SuperLink, two SuperNodes, `flwr run`, a report.

Each SuperNode describes its device only through --node-config (name, type, budget or a budget
schedule string, profile, data), as `powerfleet device` starts it: one replays its profile (the
replay client), the other is a "hardware" node whose client drives a replay agent subprocess
(hello, select, lock). So this checks node config -> DeviceSpec -> selection -> reply -> report
for both clients behind the one Flower app.
Every process started here (and the flower-superexec / flwr-*app processes they spawn) is
stopped on the way out (`tests/deploy_helpers.stopped_at_exit`), which checks that none survives.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deployment import daemons, deploy, flwr_cli, security
from fleet.common.errors import InputError
from fleet.config.fleetfile import Fleet, load_fleet
from fleet.core.choice import align
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.rounds.virtual_clock import cached_efficiency
from tests.deploy_helpers import run_loopback_round, stopped_at_exit

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "simulations"

FLEET = f"""
[run]
name = "deploy-test"
model = "small_cnn"
efficiency = "{SIM}/efficiency/resnet18_cifar10-proxy.csv"
target_accuracy = 0.92
mode = "local"
objective = "time"

[[devices]]
name = "nano-a"
type = "jetson-nano"
budget_w = 4.5
profile = "{SIM}/profiles/nano_resnet18.csv"
data = "{SIM}/efficiency/resnet18_svhn.csv"

[[devices]]
name = "tx2-b"
type = "jetson-tx2nx"
budget_schedule = [[0, 7.0], [1000, 4.5]]
profile = "{SIM}/profiles/tx2nx_resnet18.csv"
data = "{SIM}/efficiency/resnet18_cinic.csv"
"""


def node_configs(fleet: Fleet) -> dict[str, dict[str, object]]:
    """Each device's --node-config: nano-a is a board behind the agent (replaying its profile,
    so it plans and selects from it), tx2-b the replay client."""
    configs = {}
    for spec in fleet.devices:
        config = daemons.device_node_config(spec.to_node_config(), "replay")
        if spec.name == "nano-a":
            config = {k: v for k, v in config.items() if k != "data"}
            config.update(client="hardware", backend="replay", **{"profile-csv": spec.profile})
        configs[spec.name] = config
    return configs


def test_node_config_and_commands_without_processes(tmp_path: Path) -> None:
    """The command lines and config files deployment writes (no process is started)."""
    cfg = {"device-name": "nano 1", "budget-w": -1.0, "profile": '/p/"q".csv', "on": True}
    text = daemons.format_node_config(cfg)
    assert text == 'device-name="nano 1" budget-w=-1.0 profile="/p/\\"q\\".csv" on=true'
    link = daemons.superlink_command("127.0.0.1", 9091, insecure=True)
    assert link[-1] == "--insecure" and "--disable-runtime-dependency-installation" in link
    with pytest.raises(InputError, match="refusing to serve on 0.0.0.0 without TLS"):
        daemons.superlink_command("0.0.0.0", 9091)
    with pytest.raises(InputError, match="needs --ssl-certfile, --ssl-keyfile"):
        daemons.superlink_command("0.0.0.0", 9091, security.Tls(ca_certfile="/ca.pem"))
    node = daemons.supernode_command("127.0.0.1:9091", 9094, {"device-name": "a"}, insecure=True)
    assert node[-1] == "--insecure" and node[node.index("--port") + 1] == "9094"
    with pytest.raises(InputError, match="refusing to connect to coordinator.example without TLS"):
        daemons.supernode_command("coordinator.example:9091", 9094, {})
    conf = flwr_cli.write_cli_config(tmp_path, "127.0.0.1:9091").read_text()
    assert 'address = "127.0.0.1:9091"' in conf and "insecure = true" in conf
    full = daemons.device_node_config({"device-name": "a"}, "hardware", agent_python="/py", rail="")
    assert full == {"device-name": "a", "client": "hardware", "agent-python": "/py"}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_superlink_two_supernodes_one_round(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(FLEET)
    fleet = load_fleet(fleet_file)
    run_dir = tmp_path / "run"
    configs = node_configs(fleet)
    run_config = {"fleet-path": str(fleet_file), "run-dir": str(run_dir), "run-token": "t-1"}
    with stopped_at_exit() as procs:
        status, details = run_loopback_round(procs, tmp_path, configs, run_config, timeout_s=60)

    assert status == "finished:completed", details
    report = deploy.read_report(run_dir, "t-1")
    assert report is not None, (run_dir / "report.json").exists()
    assert report["engine"] == "flower-deployment"
    rows = {r["device"]: r for r in report["devices"]}
    assert list(rows) == ["nano-a", "tx2-b"]  # fleet order
    assert rows["nano-a"]["budget_w"] == 4.5
    assert rows["tx2-b"]["budget_w"] == 7.0  # the schedule's first step
    assert rows["nano-a"]["device_type"] == "jetson-nano"
    eff = cached_efficiency(fleet.run.efficiency)
    assert rows["nano-a"]["status"] == "selected", rows["nano-a"]["message"]
    assert rows["nano-a"]["time_s"] is None and "locked" in rows["nano-a"]["message"]
    assert rows["tx2-b"]["status"] == "ok", rows["tx2-b"]["message"]
    for spec in fleet.devices:
        row = rows[spec.name]
        prof, shipped, _ = align(load_profile(spec.profile), eff)
        choice = select(prof, shipped, spec.budget_w, "time")
        assert (row["batch_size"], row["freq_mhz"]) == (choice.batch_size, choice.freq_mhz)
        assert row["peak_power_w"] <= spec.budget_w
    # the schedule dropped to 4.5 W at 1000 s: the device re-selected in a second segment
    assert len(rows["tx2-b"]["segments"]) == 2
    assert report["fleet"]["trained"] == 1 and report["fleet"]["budget_violations"] == []
    assert (run_dir / "rounds" / "round-001" / "report.json").exists()
    assert os.path.exists(run_dir / "devices.csv")
