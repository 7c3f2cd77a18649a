"""AgentLink and the hardware client's steps against a real replay agent subprocess.

``python -m fleet.agent --backend replay`` answers from a recorded profile, so the whole chain a
board runs (hello, staircase profile under the budget, selection, lock, shutdown) is exercised
without a board, and the choice can be checked against ``fleet.core.selection`` on the same profile.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings, AgentTimeout, agent_command
from clients.hardware_client import run_on_agent
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.choice import align
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from tests.conftest import AGENT_GUARD_S

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SIM = Path(__file__).resolve().parents[1] / "simulations"
PROFILE = str(SIM / "profiles" / "nano_resnet18.csv")
EFFICIENCY = str(SIM / "efficiency" / "resnet18_cifar10-proxy.csv")
BATCHES = [4, 8, 16, 32, 64, 128]


def replay_link(timeout_s: float = 20.0, work_dir: Path | None = None) -> AgentLink:
    argv = agent_command(backend="replay", profile_csv=PROFILE, work_dir=work_dir)
    return AgentLink(argv, timeout_s=timeout_s)


def test_agent_command_only_given_options() -> None:
    argv = agent_command("/opt/py36/bin/python3", "jetson", sysfs_root="/tmp/sys")
    assert argv == [
        "/opt/py36/bin/python3", "-m", "fleet.agent", "--backend", "jetson",
        "--sysfs-root", "/tmp/sys",
    ]  # fmt: skip
    assert agent_command()[0] == sys.executable


def test_hello_profile_lock_shutdown(tmp_path: Path) -> None:
    out = tmp_path / "staircase.csv"
    events: list[dict] = []
    link = replay_link(work_dir=tmp_path).start()
    try:
        hello = link.request("hello")
        caps = hello["capabilities"]
        assert caps["backend"] == "replay" and {"profile", "lock"} <= set(caps["commands"])
        prof = link.request(
            "profile",
            on_progress=events.append,
            model="resnet18",
            batch_sizes=BATCHES,
            budget_w=5.0,
            out=str(out),
            rows=False,
        )
        # staircase: fewer probes than the grid, one progress event per probe at least
        assert 0 < prof["probes"] < prof["grid_size"]
        assert len(events) >= prof["probes"] and events[0]["event"] == "progress"
        written = load_profile(out)
        assert max(p.peak_power_w for p in written.points if p.peak_power_w <= 5.0) <= 5.0
        f = caps["frequencies"][2]
        assert link.request("lock", freq_mhz=f)["freq_mhz"] == f
        with pytest.raises(AgentError) as err:
            link.request("lock", freq_mhz=1.234)
        assert "1.234 MHz is not in" in err.value.reason and "\n" not in str(err.value)
        with pytest.raises(AgentError, match="unknown command"):
            link.request("fly")
    finally:
        code = link.close()
    assert code == 0 and not link.alive
    with pytest.raises(AgentError, match="exited with code 0"):
        link.request("hello")


def test_agent_that_cannot_start_reports_its_reason() -> None:
    link = AgentLink(agent_command(backend="replay", profile_csv="/nonexistent.csv")).start()
    try:
        with pytest.raises(AgentError, match="exited with code 2.*nonexistent"):
            link.request("hello")
    finally:
        link.close()


def test_request_timeout() -> None:
    # an agent that reads its requests and never answers, alive until the link closes it
    link = AgentLink([sys.executable, "-c", "import sys; sys.stdin.read()"], timeout_s=0.5)
    link.start()
    try:
        with pytest.raises(AgentTimeout, match="no response within 0.5 s"):
            link.request("hello")
    finally:
        link.close(timeout_s=0.3)
    assert not link.alive


def _instruction() -> records.TrainInstruction:
    eff = load_efficiency(EFFICIENCY)
    return records.TrainInstruction(eff, RunSettings("hw", "resnet18", eff.source, 0.92))


@pytest.mark.parametrize("budget", [5.0, 7.0])
def test_hardware_steps_choose_what_selection_chooses(tmp_path: Path, budget: float) -> None:
    """No profile yet: the agent measures the staircase, the choice equals fleet.core.selection."""
    new_profile = tmp_path / "nano-measured.csv"
    spec = DeviceSpec("nano-hw", "jetson-nano", budget, str(new_profile), None)
    ins = _instruction()
    settings = AgentSettings(
        backend="replay",
        options={"profile_csv": PROFILE},
        timeout_s=AGENT_GUARD_S,
        work_dir=str(tmp_path / "w"),
    )
    with AgentLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        res = run_on_agent(link, spec, ins, settings)
    assert res["status"] == "selected", res["message"]
    assert new_profile.exists() and res["profile"] == str(new_profile)

    full, eff, _ = align(load_profile(PROFILE), ins.efficiency)
    expected = select(full, eff, budget, "time")
    # The board chooses from its staircase profile, which holds predicted rows; these budgets
    # are cases without a near-tie, so the prediction's ~1 % error cannot flip the choice and
    # the board's answer must be the full grid's exactly (brute force over every point).
    costs = sorted(
        p.time_per_batch_s / p.batch_size * eff.samples[p.batch_size]
        for p in full.points
        if p.peak_power_w <= budget and p.batch_size in eff.samples
    )
    assert costs[0] == pytest.approx(expected.predicted_time_s)
    assert costs[1] > costs[0] * 1.01, "a near-tie at this budget: choose another case"
    staircase, eff2, _ = align(load_profile(new_profile), ins.efficiency)
    got = select(staircase, eff2, budget, "time")
    assert (got.batch_size, got.freq_mhz) == (expected.batch_size, expected.freq_mhz)
    assert (res["batch_size"], res["freq_mhz"]) == (expected.batch_size, expected.freq_mhz)
    assert res["peak_power_w"] <= budget
    assert f"locked {expected.freq_mhz:g} MHz" in res["message"]


def test_hardware_round_reuses_profile_and_reports_selected(tmp_path: Path) -> None:
    spec = DeviceSpec("nano-hw", "jetson-nano", 4.5, PROFILE, None)
    ins = _instruction()
    settings = AgentSettings(
        backend="replay",
        options={"profile_csv": PROFILE},
        timeout_s=AGENT_GUARD_S,
        work_dir=str(tmp_path / "w"),
    )
    with AgentLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        row = run_on_agent(link, spec, ins, settings)
    assert row["status"] == "selected" and row["time_s"] is None and row["energy_j"] is None
    assert row["profile"] == PROFILE
    expected = select(*align(load_profile(PROFILE), ins.efficiency)[:2], 4.5, "time")
    assert (row["batch_size"], row["freq_mhz"]) == (expected.batch_size, expected.freq_mhz)


def test_hardware_round_infeasible_budget(tmp_path: Path) -> None:
    spec = DeviceSpec("nano-hw", "jetson-nano", 1.0, PROFILE, None)
    settings = AgentSettings(
        backend="replay",
        options={"profile_csv": PROFILE},
        timeout_s=AGENT_GUARD_S,
        work_dir=str(tmp_path / "w"),
    )
    with AgentLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        row = run_on_agent(link, spec, _instruction(), settings)
    assert row["status"] == "infeasible" and row["batch_size"] is None
    lowest = min(p.peak_power_w for p in load_profile(PROFILE).points)  # brute force
    assert f"the lowest measured peak power is {lowest:g} W" in row["message"]
