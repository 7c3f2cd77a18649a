"""`flwr run .` from the project root: the Flower-native way in, checked on a fresh clone.

The root pyproject.toml carries the Flower app (``[tool.flwr.app]``) and no legacy federation
table (Flower 1.42 would migrate it and rewrite pyproject.toml); the README's command sizes the
simulation on the command line. Run from a fresh clone's root with only the venv's bin on PATH
and a private FLWR_HOME, it must write the same report as ``powerfleet simulate`` under
``runs/``, end its log with the same table in plain text and leave pyproject.toml as it was.
The local SuperLink (which Flower leaves running) is started first with Flower's own command,
so the verdict does not hang on Flower's 15 s start limit; it and everything it started are
stopped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from deployment import flwr_cli, processes
from fleet.config.fleetfile import load_fleet
from simulations.flower_engine import local_superlink_command, local_superlinks, stop_pids

ROOT = Path(__file__).resolve().parents[1]


def _app(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]


def test_root_app_and_deployment_app_agree() -> None:
    """Two pyproject files declare the app; they must name the same components and keys."""
    root, packaged = _app(ROOT / "pyproject.toml"), _app(flwr_cli.APP_DIR / "pyproject.toml")
    assert root["components"] == packaged["components"]
    assert root["components"]["clientapp"] == "clients.client_app:app"
    assert set(root["config"]) == set(packaged["config"])
    assert "federations" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]


def test_the_readme_sizes_the_simulation_to_the_default_fleet() -> None:
    """One simulated SuperNode per device of the fleet the command runs."""
    root = _app(ROOT / "pyproject.toml")
    default_fleet = load_fleet(ROOT / root["config"]["fleet-path"])
    assert SIZE == f"num-supernodes={len(default_fleet.devices)} client-resources-num-cpus=1"
    readme = (ROOT / "README.md").read_text()
    assert f'flwr run . --stream --federation-config "{SIZE}"' in readme
    pinned = re.search(r'"flwr\[simulation\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None and f"Flower {pinned.group(1)}" in readme


SIZE = "num-supernodes=8 client-resources-num-cpus=1"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
    # The local SuperLink `flwr run` would start, started first with flwr's own command from the
    # clone (its working directory is the ServerApp's): Flower gives the one it starts 15 s to
    # answer, which a loaded 2-core machine misses; `flwr run` finds this one up and uses it.
    http, control = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"], env["FLWR_LOCAL_CONTROL_API_PORT"]
    (home / "local-superlink").mkdir(parents=True)
    link = subprocess.Popen(
        local_superlink_command(home, int(http), int(control)),
        cwd=clone,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started: set[int] = set()
    try:
        processes.wait_healthy("127.0.0.1", int(http), link, timeout_s=180.0)
    except processes.DeployError:
        processes.stop_tree(link)
        raise
    proc = subprocess.Popen(
        ["flwr", "run", ".", "--stream", "--federation-config", SIZE],
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
        processes.stop_tree(link)
    assert links == [link.pid], out[-2000:]  # the run used the SuperLink of this FLWR_HOME
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
    # Flower 1.42 left pyproject.toml alone (no legacy federation to migrate)
    assert subprocess.run(["git", "diff", "--quiet"], cwd=clone).returncode == 0
    # the log ends with powerfleet simulate's table; the app's lines carry no colour codes
    ours = [line for line in out.splitlines() if "powerfleet:" in line or "segments:" in line]
    assert ours and not [line for line in ours if ANSI.search(line)]
    assert "mixed-nano-tx2nx: 8 devices, resnet18, target 0.92, engine flower" in out
    assert f"report: {reports[0].parent}/report.json, devices.csv" in out
    # no line per spare partition, and Ray's FutureWarning only inside the one summary line
    assert "partition-id" not in out
    assert not re.search(r"\.py:\d+: FutureWarning", out)
