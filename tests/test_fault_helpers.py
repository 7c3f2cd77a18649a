"""The fault harness's own parts on real processes and files: a killed tree is all gone, a
frozen process is stopped, the hostile agent answers as told, the replay fleet loads.

Why: fault cases trust these parts to do what they say (a SuperNode's SIGKILL takes its
agent with it; a hostile reply really carries NaN), so each is checked here without Flower.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from deployment import processes
from fleet.config.fleetfile import load_fleet
from tests.fault_helpers import (
    HangGuard,
    fleet_of_replay_devices,
    freeze,
    hostile_agent_python,
    kill_tree,
    thaw,
    wait_for_json,
    wait_until,
)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_kill_tree_takes_every_descendant(tmp_path: Path) -> None:
    script = "sleep 300 & sleep 300 & (sleep 300 & wait) & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    below = wait_until(lambda: len(processes.descendants(proc.pid)) >= 4 or None, 60, "children")
    assert below
    killed = kill_tree(proc)
    assert proc.returncode == -9
    assert set(processes.descendants(proc.pid)) == set()
    assert len(killed) >= 5 and not any(processes.is_alive(p) for p in killed)


def test_freeze_and_thaw_one_process() -> None:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        freeze(proc)
        assert wait_until(lambda: _state(proc.pid) == "T", 60, "stopped")
        thaw(proc)
        assert wait_until(lambda: _state(proc.pid) in "SR", 60, "running again")
    finally:
        kill_tree(proc)


def test_wait_until_raises_the_hang_guard_naming_what(tmp_path: Path) -> None:
    with pytest.raises(HangGuard, match="state.json .condition.: not within 0.3 s"):
        wait_for_json(tmp_path / "state.json", timeout_s=0.3)
    (tmp_path / "state.json").write_text('{"round": 2}')
    assert wait_for_json(tmp_path / "state.json", lambda d: d["round"] == 2, 1.0) == {"round": 2}


def test_replay_fleet_has_the_reference_devices(tmp_path: Path) -> None:
    extra = {"name": "x", "type": "jetson-nano", "budget_w": 5.0, "profile": "/p.csv"}
    fleet = load_fleet(fleet_of_replay_devices(tmp_path, 9, run={"rounds": 2}, extra_devices=[]))
    assert [d.name for d in fleet.devices] == [f"dev-{i}" for i in range(1, 10)]
    assert fleet.run.rounds == 2 and fleet.run.ship_weights is False
    assert all(Path(d.profile).is_file() and Path(str(d.data)).is_file() for d in fleet.devices)
    # the reference fleet's schedule device keeps its schedule; the starved one is left out
    assert any(len(d.schedule) == 2 for d in fleet.devices)
    assert all(d.budget_w != 1.5 for d in fleet.devices)
    text = fleet_of_replay_devices(tmp_path, 1, extra_devices=[extra]).read_text()
    assert 'name = "x"' in text


def _train(agent: Path, work: Path) -> tuple[dict, str]:
    """One hello and one train request to ``agent`` as the hardware client would send them."""
    profile = [
        {"batch_size": 16, "freq_mhz": 900.0, "time_per_batch_s": 0.1, "peak_power_w": 6.0,
         "mean_power_w": 5.0},
        {"batch_size": 16, "freq_mhz": 400.0, "time_per_batch_s": 0.2, "peak_power_w": 3.0,
         "mean_power_w": 2.5},
    ]  # fmt: skip
    reqs = [
        {"id": 1, "cmd": "hello"},
        {"id": 2, "cmd": "train", "budget_w": "4", "profile": profile, "efficiency": {"16": 160}},
        {"id": 3, "cmd": "shutdown"},
    ]
    out = subprocess.run(
        [str(agent), "-m", "fleet.agent", "--backend", "replay", "--work-dir", str(work)],
        input="".join(json.dumps(r) + "\n" for r in reqs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    return [m for m in lines if m.get("id") == 2 and "ok" in m][0], out.stderr


@pytest.mark.parametrize(
    "mode, key, check",
    [
        ("ok", "energy_j", lambda v: v == pytest.approx(2.5 * 2.0)),  # 10 steps x 0.2 s x 2.5 W
        ("nan-energy", "energy_j", math.isnan),
        ("negative-energy", "energy_j", lambda v: v < 0),
        ("huge-energy", "energy_j", lambda v: v == 1e308),
        ("samples-string", "samples", lambda v: isinstance(v, str)),
        ("big-message", "notes", lambda v: len(v[0]) == 10 * 1024 * 1024),
        ("unknown-status", "status", lambda v: v == "exploded"),
    ],
)
def test_hostile_agent_answers_as_told(tmp_path: Path, mode: str, key: str, check) -> None:
    agent = hostile_agent_python(tmp_path / "bin", mode)
    reply, _ = _train(agent, tmp_path)
    assert reply["ok"] is True and check(reply[key]), reply.get(key)
    assert reply["segments"][0]["freq_mhz"] == 400.0  # under 4 W
    assert json.loads((tmp_path / "hostile-agent.json").read_text())["state"] == "replied"


def test_hostile_agent_exit_mode_dies_mid_train(tmp_path: Path) -> None:
    agent = hostile_agent_python(tmp_path / "bin", "exit", 0.2)
    proc = subprocess.run(
        [str(agent), "--work-dir", str(tmp_path)],
        input=json.dumps({"id": 1, "cmd": "train"}) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3 and "exiting mid-train" in proc.stderr
    assert json.loads((tmp_path / "hostile-agent.json").read_text())["state"] == "training"
    bad = subprocess.run(
        [sys.executable, "tests/hostile_agent.py", "--mode", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert bad.returncode == 2 and "unknown mode 'nope'" in bad.stderr
