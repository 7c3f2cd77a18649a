"""Coverage in the one device round: refused on the virtual clock, completed on a board.

The staircase profile made for 5 W (21 probes of the reference Nano grid) used at 7 W lacks the
point that wins there on the full grid (issue 11's example: 16 @ 921.6 MHz missed). The
virtual clock cannot measure: its row is an error naming the budget the profile covers. The
agent runner (a real ``python -m fleet.agent --backend replay`` on the full grid) profiles the
missing points instead and the round lands on the full grid's choice.
"""

from __future__ import annotations

import shutil

import pytest

from clients import records
from clients.agent_link import AgentLink, AgentSettings
from clients.hardware_client import run_on_agent
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.choice import align
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.rounds.virtual_clock import simulate_device
from tests.conftest import AGENT_GUARD_S
from tests.test_coverage_predict_cli import EFF, NANO, staircase5  # noqa: F401

pytestmark = pytest.mark.integration
RUN = RunSettings("cov", "resnet18", EFF, 0.9)


def full_grid_choice(budget: float):
    prof, eff, _ = align(load_profile(NANO), load_efficiency(EFF))
    return select(prof, eff, budget)


def test_virtual_clock_row_says_the_profile_does_not_cover_the_budget(staircase5):  # noqa: F811
    spec = DeviceSpec("n1", "jetson-nano", 7.0, staircase5, EFF)
    row = simulate_device(spec, load_efficiency(EFF), RUN).to_dict()
    assert row["status"] == "error"
    assert "covers budgets up to 5 W" in row["message"] and "\n" not in row["message"]
    ok = simulate_device(DeviceSpec("n1", "jetson-nano", 5.0, staircase5, EFF),
                         load_efficiency(EFF), RUN).to_dict()  # fmt: skip
    assert ok["status"] == "ok"  # at its own budget the staircase is complete


@pytest.mark.timeout(420)
def test_agent_runner_profiles_the_missing_points(staircase5, tmp_path):  # noqa: F811
    prof = tmp_path / "stair5.csv"
    shutil.copy(staircase5, prof)
    settings = AgentSettings(
        backend="replay", options={"profile_csv": NANO}, timeout_s=AGENT_GUARD_S
    )
    spec = DeviceSpec("n1", "jetson-nano", 7.0, str(prof), None)
    with AgentLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        row = run_on_agent(
            link, spec, records.TrainInstruction(load_efficiency(EFF), RUN), settings
        )
    want = full_grid_choice(7.0)
    stair, eff, _ = align(load_profile(staircase5), load_efficiency(EFF))
    assert stair.point(want.batch_size, want.freq_mhz) is None  # the premise: it lacks the win
    assert row["status"] == "selected", row["message"]
    assert (row["batch_size"], row["freq_mhz"]) == (want.batch_size, want.freq_mhz)
    assert "missing point(s) profiled" in row["message"]
    # The filled profile is on disk: the next round at 7 W needs no probe.
    filled = load_profile(prof)
    assert filled.point(want.batch_size, want.freq_mhz) is not None
    again = simulate_device(DeviceSpec("n1", "jetson-nano", 7.0, str(prof), EFF),
                            load_efficiency(EFF), RUN).to_dict()  # fmt: skip
    assert again["status"] == "ok"
    assert (again["batch_size"], again["freq_mhz"]) == (want.batch_size, want.freq_mhz)
