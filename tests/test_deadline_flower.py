"""The deadline objective's planning exchange through Flower: simulation and a real deployment.

Without ``[run] deadline_s`` the coordinator first sends every device a planning query; each
replies its fastest predicted finish without training, the coordinator sets the deadline
(the slowest of them) and sends it with the train message. The rows must be the direct
engine's, which plans the same deadline in-process (``fleet.whatif.simulate_fleet``).
Every process the deployment test starts is stopped in its finally block.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from deployment import deploy
from fleet.fleetconfig import load_fleet
from fleet.report import read_report
from fleet.whatif import simulate_fleet
from simulations.runner import DEFAULT_FLEET, simulate
from tests.test_flower_deploy import FLEET as DEPLOY_FLEET

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = Path(__file__).resolve().parents[1] / "simulations"


def _finite(obj: object) -> object:
    """As report.json stores it: non-finite floats become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def deadline_fleet(tmp_path: Path, text: str) -> Path:
    """A copy of a fleet file with ``objective = "deadline"`` and absolute paths."""
    assert 'objective = "time"' in text
    text = text.replace('objective = "time"', 'objective = "deadline"')
    text = text.replace('"../', f'"{SIM}/')
    path = tmp_path / "deadline.toml"
    path.write_text(text)
    return path


@pytest.mark.timeout(240)
def test_flower_simulation_plans_the_deadline_like_the_direct_engine(tmp_path: Path) -> None:
    fleet_file = deadline_fleet(tmp_path, DEFAULT_FLEET.read_text())
    direct = simulate(fleet_file, "direct", tmp_path / "direct")
    flower = simulate(fleet_file, "flower", tmp_path / "flower")
    assert flower["deadline_s"] == pytest.approx(direct["deadline_s"])
    assert [r["device"] for r in flower["devices"]] == [r["device"] for r in direct["devices"]]
    for got, want in zip(flower["devices"], direct["devices"], strict=True):
        assert got == want, got["device"]
    assert flower["deadline_vs_time"] == direct["deadline_vs_time"]  # the report's section
    assert read_report(tmp_path / "flower")["deadline_vs_time"] == direct["deadline_vs_time"]
    # the deadline changed somebody's choice (else this test would not tell the two apart)
    time_rows = simulate_fleet(load_fleet(fleet_file), "time").rows
    assert any(
        (d["batch_size"], d["freq_mhz"]) != (t["batch_size"], t["freq_mhz"])
        for d, t in zip(direct["devices"], time_rows, strict=True)
    )


@pytest.mark.timeout(180)
def test_deployment_planning_exchange_matches_the_direct_engine(tmp_path: Path) -> None:
    # no weights travel: the planning exchange and the choices need none (trace + select only)
    text = DEPLOY_FLEET.replace('mode = "local"', 'mode = "local"\nship_weights = false')
    fleet_file = deadline_fleet(tmp_path, text)
    fleet = load_fleet(fleet_file)
    run_dir = tmp_path / "run"
    home = tmp_path / "flwr"
    link_port = deploy.free_port()
    procs = []
    spawned: set[int] = set()
    try:
        link = deploy.start_process(
            deploy.superlink_command("127.0.0.1", link_port, insecure=True),
            (home / "superlink").resolve(),
            tmp_path / "logs" / "superlink.log",
        )
        procs.append(link)
        deploy.wait_healthy("127.0.0.1", link_port, link)
        for spec in fleet.devices:
            node_home = home / spec.name
            node_home.mkdir(parents=True)
            config = deploy.device_node_config(spec.to_node_config(), "replay")
            if spec.name == "nano-a":  # a board behind the agent: plans from its profile
                config = {k: v for k, v in config.items() if k != "data"}
                config.update(client="hardware", backend="replay", **{"profile-csv": spec.profile})
            argv = deploy.supernode_command(
                f"127.0.0.1:{link_port}", deploy.free_port(), config, insecure=True
            )
            procs.append(deploy.start_process(argv, node_home, tmp_path / "logs" / spec.name))
        cli = home / "cli"
        deploy.write_cli_config(cli, f"127.0.0.1:{link_port}")
        deploy.wait_for_nodes(cli, 2, timeout_s=40)
        run_id = deploy.submit_run(
            cli, {"fleet-path": str(fleet_file), "run-dir": str(run_dir), "run-token": "d-1"}
        )
        status, details = deploy.wait_for_run(cli, run_id, timeout_s=90)
        for p in procs:
            spawned.update(deploy.descendants(p.pid))
    finally:
        for p in procs:
            spawned.update(deploy.descendants(p.pid))
            deploy.stop_tree(p)
    left = [pid for pid in spawned | {p.pid for p in procs} if deploy.is_alive(pid)]
    assert not left, f"processes left running: {left}"

    assert status == "finished:completed", details
    report = deploy.read_report(run_dir, "d-1")
    assert report is not None
    want = simulate_fleet(fleet, "deadline")
    assert report["deadline_s"] == pytest.approx(want.deadline_s)
    rows = {r["device"]: r for r in report["devices"]}
    expect = {r["device"]: r for r in want.rows}
    assert list(rows) == ["nano-a", "tx2-b"]
    for name, row in rows.items():
        assert (row["batch_size"], row["freq_mhz"]) == (
            expect[name]["batch_size"],
            expect[name]["freq_mhz"],
        ), name
    assert rows["nano-a"]["status"] == "selected", rows["nano-a"]["message"]
    assert rows["tx2-b"] == _finite(expect["tx2-b"])  # the simulated node: the very same row
    # the planned deadline slowed the faster device down: its choice is not the time objective's
    fast = {r["device"]: r for r in simulate_fleet(fleet, "time").rows}["tx2-b"]
    assert (rows["tx2-b"]["batch_size"], rows["tx2-b"]["freq_mhz"]) != (
        fast["batch_size"],
        fast["freq_mhz"],
    )
    assert rows["tx2-b"]["predicted_time_s"] > fast["predicted_time_s"]  # slower, on purpose


@pytest.mark.timeout(240)
def test_federated_rounds_each_plan_their_deadline(tmp_path: Path) -> None:
    """Federated, two rounds: every round runs the planning exchange on its own work and ships
    weights back from devices that trained (``ok`` or ``late``)."""
    from tests.test_flower_sim import FLEET as SIM_FLEET

    fleet_file = deadline_fleet(tmp_path, SIM_FLEET)
    report = simulate(fleet_file, "flower", tmp_path / "run")
    want = simulate_fleet(load_fleet(fleet_file), "deadline")
    for k in (1, 2):
        rnd = read_report(tmp_path / "run" / "rounds" / f"round-{k:03d}")
        assert rnd["deadline_s"] == pytest.approx(want.deadline_s)
        assert rnd["devices"] == [_finite(r) for r in want.rows]
    assert report["mode"] == "federated" and report["global_model"]
