"""A clock the board refuses mid-run stops the closed loop, whichever part asked for it.

The loop changes the clock from three places: the sampler's reading (a budget change), the end
of a step (a budget change read at the boundary, the deadline) and the start of a step (a batch
switch that raises the clock only once the batch changes). A refusal from the kernel at any of
them (here a real one on a virtual Nano's tree: ``max_freq`` turned into a directory, which
fails as root too) must end the run with one line naming the file and status ``error`` (it
never ran over its budget), leave the clock where it was, hand the trainer a stop rather than an
exception, and still give the board back at exit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleet.agent.devices.jetson import JetsonBackend
from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.method.budget import BudgetStep, ScheduleBudget
from fleet.method.selection import lut_from_rows
from simulations.virtual_jetson import build_board
from tests.closedloop_helpers import EFF, FakeClock, model_power, model_time

NANO_MHZ = [230.4, 460.8, 691.2, 921.6]  # four of the Nano's own table
BATCHES = [8, 16, 32]


def nano_lut() -> list:
    rows = [
        {
            "batch_size": b,
            "freq_mhz": f,
            "time_per_batch_s": model_time(b, f),
            "peak_power_w": model_power(b, f) + 0.05,
            "mean_power_w": model_power(b, f),
        }
        for b in BATCHES
        for f in NANO_MHZ
    ]
    return lut_from_rows(rows)


def refuse(node: Path) -> str:
    """The kernel refuses every write of ``max_freq`` from now on; returns what it held."""
    held = (node / "max_freq").read_text()
    (node / "max_freq").unlink()
    (node / "max_freq").mkdir()
    return held


def accept(node: Path, held: str) -> None:
    shutil.rmtree(node / "max_freq")
    (node / "max_freq").write_text(held)


@pytest.mark.parametrize(
    "first_w,then_w,where",
    [
        (5.0, 3.0, "sample"),  # down: the clock goes down at once, from the sampler's reading
        (5.0, 3.0, "step end"),  # down, read at the step boundary
        (3.0, 6.0, "step start"),  # up to a new batch: the clock rises at the batch switch
    ],
)
def test_a_refused_clock_stops_the_run_and_the_board_is_given_back(
    tmp_path, first_w, then_w, where
):
    board = build_board(tmp_path / "root", "nano")
    original = board.bounds()
    backend = JetsonBackend(str(board.root), settle_timeout_s=0.0)  # no kernel: cur_freq stays
    clock = FakeClock()
    source = ScheduleBudget([BudgetStep(0.0, first_w), BudgetStep(2.0, then_w)])
    plan = LoopPlan(nano_lut(), EFF, source)
    hooks = LoopHooks(hz=0.001, clock=clock, sleep=clock.sleep, restore_on_exit=True)
    with ClosedLoop(backend, plan, hooks=hooks) as loop:
        # its one reading, if any, at 0 s: a thread whose first reading came after the clock
        # moved would follow the budget before the kernel refuses (the host's pace decides)
        loop.sampler.stop()
        start = (loop.batch_size, loop.freq_mhz)
        pinned = board.clocks()["max_freq"]
        assert pinned == int(start[1] * 1e6)
        assert loop.before_step() == (start[0], False)
        clock.t += 2.004
        if where == "step start":
            loop.after_step()  # the new batch's clock is higher: it waits for the switch
            assert loop.stop_reason is None and loop.freq_mhz == start[1]
            held = refuse(board.node)
        else:
            held = refuse(board.node)
            if where == "sample":
                loop.on_sample(clock.t, 2.0)
            loop.after_step()
        batch, stop = loop.before_step()
        assert stop and batch == start[0]  # the trainer is told to stop, not raised at
        why = loop.stop_reason
        assert (batch, loop.freq_mhz) == start  # nothing switched to the point never locked
        accept(board.node, held)  # the file is back, so the exit can restore
    assert why.startswith(
        "could not change the clock: cannot write {}".format(board.node / "max_freq")
    )
    assert loop.notes[-1] == "stopping: " + why and "\n" not in why
    summary = loop.summary()
    assert (summary["status"], summary["stop_reason"]) == ("error", why)  # not "over-budget"
    assert board.bounds() == original  # given back at exit
