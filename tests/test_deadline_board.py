"""`powerfleet train --objective deadline` on the virtual Jetson: a 5 W -> 3 W schedule.

The board emulator (simulations/virtual_jetson.py) runs its kernel stand-in in a separate
process; `powerfleet train` runs in another; this test polls the devfreq files meanwhile. Every
choice the closed loop made is checked against the host's ``fleet.core.deadline.choose_step`` at the
same step, clock and fraction done, and the clocks on the board against the segments.
"""

import csv

import pytest

from fleet.core.deadline import choose_step, rates
from fleet.core.efficiency import Efficiency
from fleet.core.profile import load_profile
from fleet.method.budget import BudgetStep
from fleet.method.selection import choose, lut_from_rows
from simulations.virtual_jetson import build_board
from tests.hardware_helpers import (
    BATCH,
    MHZ,
    check_clocks_follow,
    deadline_profile,
    run_watching_clocks,
    tiny_npz,
    train_cmd,
)

N = 24000.0  # shipped samples-to-accuracy at b=16 (the run's max_samples too)
DEADLINE_S = 7.5
STEPS = [BudgetStep(0.0, 5.0), BudgetStep(2.0, 3.0)]


def host_choice(prof, clock_s, done):
    """The host's deadline choice at this clock and progress (the step running then)."""
    table = rates(load_profile(str(prof)).points, Efficiency({BATCH: N}, source="eff"))
    k = 1 if clock_s >= STEPS[1].at_s else 0
    rate, late, finish, _energy = choose_step(table, STEPS, k, clock_s, done, DEADLINE_S)
    return (rate.point.batch_size, rate.point.freq_mhz), late, finish


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_deadline_on_the_board_follows_the_schedule_and_the_remaining_work(tmp_path):
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(BATCH)
    prof = deadline_profile(board, tmp_path / "profile.csv")
    eff = tmp_path / "eff.csv"
    eff.write_text(f"batch_size,samples_to_accuracy\n{BATCH},{N:g}\n")
    state = tmp_path / "state"
    cmd = train_cmd(board, state, tiny_npz(tmp_path / "tiny.npz"), eff, prof) + [
        "--budget-schedule", "0:5,2:3", "--objective", "deadline", "--deadline-s",
        str(DEADLINE_S), "--max-samples", f"{N:.0f}", "--eval-every", f"{N:.0f}", "--no-drift",
    ]  # fmt: skip
    seen, result, err, rc = run_watching_clocks(board, cmd)
    after = board.bounds()
    assert rc == 0, err
    assert (result["objective"], result["deadline_s"]) == ("deadline", DEADLINE_S)
    segs = result["segments"]

    # The start: the deadline point, priced with the look-ahead (5 W for 2 s, then the fastest
    # point under 3 W) -- neither the fastest point nor the least-energy one.
    first, late, finish = host_choice(prof, 0.0, 0.0)
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"], segs[0]["reason"]) == (*first, "start")
    assert first == (BATCH, 614.4) and late is False
    assert result["late"] is False
    assert result["predicted_finish_s"] == pytest.approx(finish) and finish <= DEADLINE_S
    with open(prof, newline="") as fh:
        lut = lut_from_rows(list(csv.DictReader(fh)))
    fastest = choose(lut, {BATCH: N}, 5.0, "time")
    least = choose(lut, {BATCH: N}, 5.0, "energy")
    assert first != (BATCH, fastest.freq_mhz) and first != (BATCH, least.freq_mhz)

    # At the drop, and at any later re-selection: the deadline point for the work and the time
    # left then (the host's choice at that step, clock and fraction done).
    drop = [s for s in segs if s["reason"] == "budget-change"]
    assert len(drop) == 1 and drop[0]["budget_w"] == 3.0 and 2.0 <= drop[0]["start_s"]
    assert 0 <= drop[0]["done"] < 1  # 0: the first step (warm-up, an evaluation) still running
    for s in segs[1:]:
        assert s["reason"] in ("budget-change", "deadline"), s
        want, _late, _f = host_choice(prof, s["start_s"], s["done"])
        assert (s["batch_size"], s["freq_mhz"]) == want, s
    assert all(s["freq_mhz"] <= 384.0 for s in segs if s["budget_w"] == 3.0)  # fits 3 W

    # The sysfs clock follows the segments (away from the switches), from the first lock on.
    pinned = [(t, mx) for t, mn, mx in seen if mn == mx]
    assert pinned[0][1] == 614.4 * MHZ
    assert check_clocks_follow(pinned, segs) >= 2

    # The budget is never exceeded: no guard action, every segment's mean power within it.
    assert result["guard_events"] == []
    for s in segs:
        span = s["end_s"] - s["start_s"]
        if span > 0.3:
            assert s["energy_j"] / span <= s["budget_w"], s
    assert after == original
    assert not state.exists() or not any(state.iterdir())
