"""Verify before trusting, on the virtual Jetson: the device round probes a predicted choice.

The profile's two top clocks are *predicted* 15 % too low in power (as a wrong model would);
at 4.45 W the round first picks 16 @ 921.6 MHz (predicted 3.94 W, really 4.64 W). The agent
runner probes it on the board (the agent's ``profile`` on that one point), the correction is
carried to 844.8 MHz (probed in turn if it still wins); the round locks a measured point that
fits the board, and the corrected table is written back to the profile file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clients import records
from clients.agent_link import AgentLink, AgentSettings
from clients.hardware_client import run_on_agent
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.core.profile import load_profile
from simulations.virtual_jetson import build_board

MHZ = 1_000_000
BUDGET = 4.45
MEASURED, PREDICTED = (614.4, 768.0), (844.8, 921.6)

pytestmark = pytest.mark.integration


def power(board, mhz: float) -> float:
    return board.model_power_w(int(round(mhz * MHZ)), 16)


@pytest.mark.timeout(420)
def test_a_wrongly_predicted_choice_is_probed_and_corrected(tmp_path: Path) -> None:
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    board.set_load(16)
    lines = ["# plan=predict", "# grid_batch_sizes=16", "# grid_freqs=614.4,768,844.8,921.6"]
    lines.append("batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,status,source")
    for f in MEASURED + PREDICTED:
        wrong = 0.85 if f in PREDICTED else 1.0
        src = "predicted" if f in PREDICTED else "measured"
        p = power(board, f) * wrong
        lines.append(f"16,{f:g},{0.05 * 921.6 / f:.5f},{p:.4f},{p:.4f},ok,{src}")
    prof = tmp_path / "profile.csv"
    prof.write_text("\n".join(lines) + "\n")
    assert power(board, 921.6) > BUDGET >= power(board, 844.8)  # the premise
    assert power(board, 921.6) * 0.85 < BUDGET  # ... which the prediction hides

    run = RunSettings("v", "small_cnn", "eff.csv", 0.9, lr_ref_batch=16)
    shipped = Efficiency({16: 4000.0}, source="eff.csv")
    spec = DeviceSpec("j1", "jetson-nano", BUDGET, str(prof), None)
    settings = AgentSettings(
        backend="jetson",
        options={"sysfs_root": str(board.root), "state_dir": str(tmp_path / "state")},
        timeout_s=60,
        long_timeout_s=120,
    )
    with board.kernel(process=True, lag_s=0.02):
        with AgentLink(settings.argv(), timeout_s=60) as link:
            row = run_on_agent(link, spec, records.TrainInstruction(shipped, run), settings)
    assert row["status"] == "selected", row["message"]
    # Not the wrongly predicted 921.6 MHz: a point that fits on the board, measured now.
    assert row["batch_size"] == 16 and row["freq_mhz"] in (768.0, 844.8), row["message"]
    assert power(board, row["freq_mhz"]) <= BUDGET
    assert "predicted point(s) probed" in row["message"] and "corrected)" in row["message"]
    fixed = load_profile(prof)
    top = fixed.point(16, 921.6)
    assert top is not None and top.peak_power_w == pytest.approx(power(board, 921.6), rel=0.03)
    assert top.peak_power_w > BUDGET  # the correction: measured over the budget
    text = prof.read_text()
    assert "verified=at 4.45 W" in text
    chosen = next(ln for ln in text.splitlines() if ln.startswith(f"16,{row['freq_mhz']:g},"))
    assert ",predicted" not in chosen  # the round never trains on an unverified prediction
    # the point probed on this virtual board says so (its time is the host's), and so does the row
    probed = next(ln for ln in text.splitlines() if ln.startswith("16,921.6,"))
    assert ",virtual" in probed and "source=virtual: a virtual board on host" in row["message"]
