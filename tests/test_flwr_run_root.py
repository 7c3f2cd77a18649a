"""`flwr run .` from the project root: the Flower-native way in, checked on a fresh clone.

The root pyproject.toml carries the Flower app (``[tool.flwr.app]``) and a local-simulation
federation sized for the default fleet. Run from a fresh clone's root with only the venv's bin
on PATH and a private FLWR_HOME, it must write the same report as ``powerfleet simulate`` under
``runs/``, and every process it started (Flower leaves its local SuperLink running) must be
stoppable and stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from deployment import flwr_cli, processes
from fleet.config.fleetfile import load_fleet
from simulations.flower_engine import local_superlinks, stop_pids

ROOT = Path(__file__).resolve().parents[1]


def _app(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]


def test_root_app_and_deployment_app_agree() -> None:
    """Two pyproject files declare the app; they must name the same components and keys."""
    root, packaged = _app(ROOT / "pyproject.toml"), _app(flwr_cli.APP_DIR / "pyproject.toml")
    assert root["components"] == packaged["components"]
    assert root["components"]["clientapp"] == "clients.client_app:app"
    assert set(root["config"]) == set(packaged["config"])
    fed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["federations"]
    default_fleet = load_fleet(ROOT / root["config"]["fleet-path"])
    assert fed["local-simulation"]["options"]["num-supernodes"] == len(default_fleet.devices) == 8


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_flwr_run_from_a_fresh_clone_writes_the_default_report(tmp_path: Path) -> None:
    branch = subprocess.run(
        ["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--branch", branch, str(ROOT), str(clone)], check=True, timeout=60
    )
    home = tmp_path / "flwr-home"
    env = dict(os.environ)
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        FLWR_HOME=str(home),
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONPATH=str(clone),  # the clone's code, not whatever checkout the venv points at
        # A SuperLink of our own even if another `flwr run` is up on Flower's default ports.
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(processes.free_port()),
        FLWR_LOCAL_CONTROL_API_PORT=str(processes.free_port()),
    )
    started: set[int] = set()
    proc = subprocess.Popen(
        ["flwr", "run", ".", "--stream"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        links = local_superlinks(home)
        for pid in links:
            started.update([pid, *processes.descendants(pid)])
        processes.stop_tree(proc)
        stop_pids(links)
    assert links, "flwr run started no local SuperLink under this FLWR_HOME"
    assert [p for p in started if processes.is_alive(p)] == []

    reports = sorted((clone / "runs").glob("mixed-nano-tx2nx-*/report.json"))
    assert len(reports) == 1, out[-2000:]
    report = json.loads(reports[0].read_text())
    fleet = load_fleet(clone / "simulations" / "fleets" / "default.toml")
    rows = {r["device"]: r for r in report["devices"]}
    assert list(rows) == [d.name for d in fleet.devices] and len(rows) == 8
    assert rows["nano-starved"]["status"] == "infeasible"
    assert {r["status"] for n, r in rows.items() if n != "nano-starved"} == {"ok"}
    assert report["engine"] == "flower" and report["fleet_file"] == str(
        (clone / "simulations" / "fleets" / "default.toml").resolve()
    )
    assert (reports[0].parent / "devices.csv").exists()
