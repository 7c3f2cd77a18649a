"""A board whose estimate improves mid-run re-selects, through the hardware client and the agent.

``run_on_agent`` (what a hardware SuperNode runs) talks to a live ``python -m fleet.agent
--backend jetson`` on a virtual Nano (``simulations.virtual_jetson``: its real sysfs layout, the
kernel stand-in as a process, power following the locked clock), which trains ``small_cnn`` for
real on a small learnable dataset built here. The shipped efficiency is a fleet's learnt one
(``source = learned``, each batch size known to within 30 %): 400 samples at b=16 and at b=64,
so b=64 (cheaper per sample in this LUT) is the first choice. On this data b=64 needs several
times that, b=16 far fewer: once the board's own curve says so, it re-selects b=16 (segment
reason ``learned``). What triggers the switch is the run's evaluations, counted in samples, not
the host's speed; the round's row carries what the board learnt, and the clocks are put back.
"""

from __future__ import annotations

import pytest
import torch

from clients import records
from fleet.agent.data import tensorfile
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from simulations.virtual_jetson import build_board
from tests.hardware_helpers import MHZ
from tests.test_hardware_closed_loop import jetson_settings, run_round

SHIPPED = 400.0
STEP = {16: 0.0352, 64: 0.128}  # seconds a step at the top clock: 2.2 ms vs 2.0 ms a sample


def learnable_pt(path, n: int = 2400, seed: int = 0):
    """Two classes told apart by a fixed 8x8 pattern under noise: small_cnn climbs smoothly to
    0.9 in about 900 samples at b=16 and 1,500 at b=64 (float tensors, the agent's data file)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    w = torch.randn(1, 8, 8, generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) + (2 * y.float() - 1).view(-1, 1, 1, 1) * 0.25 * w
    cut = n * 5 // 6
    tensorfile.save({"train": (x[:cut], y[:cut]), "test": (x[cut:], y[cut:])}, str(path), "data")
    return path


def profile(board, path):
    top = max(board.freqs_hz)
    rows = [
        f"{b},{top / MHZ:g},{t},{board.model_power_w(top, b) * 1.02:.4f},"
        f"{board.model_power_w(top, b):.4f}"
        for b, t in STEP.items()
    ]
    path.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n" + "\n".join(rows) + "\n"
    )
    return path


def instruction(learn: str) -> records.TrainInstruction:
    run = RunSettings(
        "hw", "small_cnn", "eff.csv", 0.9, lr_ref_batch=16, lr_ref=1e-3,
        max_samples=6000, eval_every_samples=64, learn_efficiency=learn,
    )  # fmt: skip
    shipped = Efficiency(
        {b: SHIPPED for b in STEP}, {b: 0.3 * SHIPPED for b in STEP}, source="eff.csv",
        metadata={"source": "learned"},
    )  # fmt: skip
    return records.TrainInstruction(shipped, run)


@pytest.mark.integration
@pytest.mark.timeout(420)
@pytest.mark.parametrize("learn", ["online", "none"])
def test_a_board_whose_running_batch_needs_more_than_shipped_re_selects(tmp_path, learn):
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    prof = profile(board, tmp_path / "profile.csv")
    data = learnable_pt(tmp_path / "data.pt")
    spec = DeviceSpec("nano-1", "jetson-nano", None, str(prof), str(data))
    with board.kernel(process=True, lag_s=0.02):
        row = run_round(spec, instruction(learn), jetson_settings(board, tmp_path / "state"))
        after = board.bounds()
    assert after == original  # the clocks are put back
    assert row["status"] == "ok", row["message"]
    segs = row["segments"]
    assert segs[0]["batch_size"] == 64  # the shipped choice
    learnt = [s for s in segs if s["reason"] == "learned"]
    if learn == "none":
        assert not learnt and len(segs) == 1 and row["learned_samples"] is None
        assert row["efficiency_fits"] == []
        return
    assert [s["batch_size"] for s in learnt] == [16], segs
    fits = row["efficiency_fits"]
    at64 = [f for f in fits if f["batch_size"] == 64]
    # what moved it: its curve at b=64 said far more than shipped, and the belief rose
    assert at64 and max(f["fit_samples"] for f in at64) > 1.5 * SHIPPED
    assert max(f["estimate"] for f in at64) > 1.1 * SHIPPED
    assert min(f["samples"] for f in at64) < row["samples"]  # learnt before the end
    # it met the target at b=16: what it reports for the fleet's store is the run's work counted
    # at b=16 (the b=64 stretch converted by what it learnt of the two)
    assert row["learned_batch_size"] == 16 and row["learned_log_sd"] > 0
    assert 0.5 * row["samples"] < row["learned_samples"] < 2 * row["samples"]
    decoded = records.decode_reply(*records.encode_reply(row))
    assert decoded["efficiency_fits"] == fits and decoded["learned_batch_size"] == 16
