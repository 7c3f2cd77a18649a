"""The hardware ClientApp drives the board's closed loop: a schedule 5 W -> 3 W on the board.

``run_on_agent`` (what a hardware SuperNode runs) talks to a real ``python -m fleet.agent
--backend jetson`` subprocess whose sysfs tree is a virtual Nano with its kernel stand-in
running; the test samples the devfreq files meanwhile and asserts the clock was lowered at the
schedule step, the originals are back after the round, and the row carries every segment.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from clients import records
from clients.agent_link import AgentLink, AgentSettings
from clients.hardware_client import run_on_agent
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.method.budget import parse_schedule
from simulations.virtual_jetson import build_board, wait_for
from tests.conftest import AGENT_GUARD_S
from tests.hardware_helpers import (
    BATCH,
    MHZ,
    SETTLE_GUARD_S,
    ClockLog,
    board_profile,
    check_clocks_follow,
    deadline_profile,
    tiny_pt_data,
)


def instruction(
    max_samples: int, eval_every: int, samples: float = 4000.0, **run_keys: object
) -> records.TrainInstruction:
    """Train small_cnn at b=16 towards an unreachable target (1.0): the round runs to
    ``max_samples``, long enough for a budget change to show on the board. ``run_keys``:
    ``objective`` and more ``[run]`` keys (``deadline_s``)."""
    objective = str(run_keys.pop("objective", "time"))
    run = RunSettings(
        "hw", "small_cnn", "eff.csv", 1.0, objective=objective, lr_ref_batch=BATCH, lr_ref=1e-3,
        max_samples=max_samples, eval_every_samples=eval_every, **run_keys,  # type: ignore[arg-type]
    )  # fmt: skip
    return records.TrainInstruction(Efficiency({BATCH: samples}, source="eff.csv"), run)


def jetson_settings(board, state) -> AgentSettings:
    """The agent on ``board`` (the jetson backend), its clock state under ``state``; its work
    dir (the only place it reads and writes besides ``state``) is ``state``'s parent, the
    test's tmp_path, which holds the data. Paced: steps last the profile's step time."""
    return AgentSettings(
        backend="jetson",
        options={
            "sysfs_root": str(board.root),
            "state_dir": str(state),
            "settle_timeout_s": SETTLE_GUARD_S,
        },
        timeout_s=AGENT_GUARD_S,
        long_timeout_s=150,
        work_dir=str(Path(state).parent),
        pace_to_profile=True,
    )


class RecordingLink(AgentLink):
    """The real link, keeping every reply (the agent's own train summary, before the row)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)
        self.replies: list[tuple[str, dict]] = []

    def request(self, cmd: str, **kw: object) -> dict:
        out = super().request(cmd, **kw)
        self.replies.append((cmd, out))
        return out


def run_round(
    spec: DeviceSpec, ins: records.TrainInstruction, settings: AgentSettings, replies=None
) -> dict:
    """``run_on_agent`` against a live ``python -m fleet.agent`` (one torch thread)."""
    with RecordingLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        row = run_on_agent(link, spec, ins, settings)
    if replies is not None:
        replies.extend(link.replies)
    return row


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_schedule_is_honoured_on_the_board_through_the_hardware_client(tmp_path):
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(BATCH)
    prof = board_profile(board, tmp_path / "profile.csv")
    data = tiny_pt_data(tmp_path / "data.pt")
    state = tmp_path / "state"
    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, str(prof), str(data), parse_schedule("0:5,2:3"))
    with board.kernel(process=True, lag_s=0.02), ClockLog(board) as log:
        # paced: ~100 steps at 921.6 MHz until the 2 s step, then 75 at 384 MHz (~3.6 s)
        row = run_round(spec, instruction(2800, 4000), jetson_settings(board, state))
        after = board.bounds()
    assert row["status"] == "not reached", row["message"]  # target 1.0: runs to max_samples
    pinned = log.pinned()
    assert pinned[0][1] == 921.6 * MHZ and pinned[-1][1] == 384.0 * MHZ  # 5 W, then 3 W
    # the board's clock over time follows the loop's own record (its clock, not this CPU's)
    assert check_clocks_follow(pinned, row["segments"]) >= 2
    # the row: every segment, the first one's point, measured power within the schedule
    segs = row["segments"]
    assert [(s["budget_w"], s["freq_mhz"], s["reason"]) for s in segs] == [
        (5.0, 921.6, "start"),
        (3.0, 384.0, "budget-change"),
    ]
    # never before the schedule's 2 s (the loop's clock; how soon after is the host's), and it
    # ran on to the end
    assert 2.0 <= segs[1]["start_s"] < segs[1]["end_s"]
    assert (row["batch_size"], row["freq_mhz"]) == (BATCH, 921.6)  # the start point
    assert (row["end_batch_size"], row["end_freq_mhz"]) == (BATCH, 384.0)  # the end point
    assert row["guard_events"] == []
    assert row["peak_power_w"] is not None and row["peak_power_w"] <= 5.0 * 1.05
    assert math.isfinite(row["energy_j"]) and row["energy_j"] > 0
    assert row["samples"] == 2800
    # the wire carries the segments and guard events as they are
    decoded = records.decode_reply(*records.encode_reply(row))
    assert decoded["segments"] == segs and decoded["guard_events"] == []
    # the originals are back after the round, and the crash-safe state file is gone
    assert after == original
    assert not state.exists() or not any(state.iterdir())


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_rail_over_budget_at_every_clock_ends_the_round_over_budget(tmp_path):
    """The rail reads 6 W above the model: the guard steps down clock after clock, runs out of
    clocks and stops training; the row says over-budget with every guard event."""
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(BATCH)
    prof = board_profile(board, tmp_path / "profile.csv")
    data = tiny_pt_data(tmp_path / "data.pt")
    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, str(prof), str(data))
    settings = jetson_settings(board, tmp_path / "state")
    board.set_drift(add_w=6.0)
    with board.kernel(process=True, lag_s=0.02):
        row = run_round(spec, instruction(200000, 50000), settings)
        after = board.bounds()
    assert row["status"] == "over-budget", row["message"]
    events = row["guard_events"]
    assert len(events) >= 2
    assert all(e["measured_w"] > 5.0 and e["budget_w"] == 5.0 for e in events)
    steps = [e for e in events if e["to_mhz"] is not None]
    assert steps and all(e["from_mhz"] > e["to_mhz"] for e in steps)
    assert [e["to_mhz"] for e in steps] == sorted((e["to_mhz"] for e in steps), reverse=True)
    assert events[-1]["to_mhz"] is None  # the lowest clock was still over: stop
    assert any(s["reason"] == "guard" for s in row["segments"])
    assert row["samples"] < 200000  # stopped, not run out
    assert after == original


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_live_budget_file_named_in_the_node_config_drives_the_board(tmp_path):
    """``budget-file`` in the node config: the board follows the file, not the fleet's budget."""
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    board.set_load(BATCH)
    prof = board_profile(board, tmp_path / "profile.csv")
    data = tiny_pt_data(tmp_path / "data.pt")
    budget = tmp_path / "budget"
    budget.write_text("5\n")
    nc = {
        "device-name": "nano-1",
        "device-type": "jetson-nano",
        "budget-w": "10",  # the fleet's: the file takes its place
        "profile": str(prof),
        "data": str(data),
        "backend": "jetson",
        "sysfs-root": str(board.root),
        "state-dir": str(tmp_path / "state"),
        "budget-file": str(budget),
        "settle-timeout-s": str(SETTLE_GUARD_S),
        "work-dir": str(tmp_path),
        "pace-to-profile": "true",
    }
    settings = AgentSettings.from_node_config(nc)
    assert settings.budget_file == str(budget) and settings.pace_to_profile
    assert "--state-dir" in settings.argv()
    spec = records.device_spec_for(nc, "")

    def operator() -> None:
        """Lower the budget to 3 W once the board's clock is locked (the run under way). At
        once, not a while later: the run's length is the profile's (paced), and a timer thread
        on a loaded host could wake after it."""
        c = board.clocks
        if wait_for(lambda: c()["min_freq"] == c()["max_freq"], timeout_s=60):
            budget.write_text("3\n")

    writer = threading.Thread(target=operator, daemon=True)
    with board.kernel(process=True, lag_s=0.02):
        writer.start()
        # paced: 3 W arrives just after the first lock and is read within 1 s of the loop's
        # clock; the 175 steps last at least 2.5 s at 921.6 MHz, longer at 384 MHz
        row = run_round(spec, instruction(2800, 4000), settings)
    writer.join(timeout=5)
    assert row["status"] == "not reached", row["message"]
    segs = [(s["budget_w"], s["freq_mhz"]) for s in row["segments"]]
    assert segs == [(5.0, 921.6), (3.0, 384.0)], row["segments"]


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_the_deadline_objective_reaches_the_board_and_its_loop_keeps_it(tmp_path):
    """``objective = "deadline"`` with the round's ``deadline_s``: the hardware client sends
    both to the agent, whose closed loop starts on the host's planned deadline point and, at
    the 5 W -> 3 W drop, runs the deadline point for the work and time left (the host's
    ``choose_step`` at that clock and fraction done); the clocks follow, restored after."""
    from fleet.core.deadline import choose_step, rates
    from fleet.core.profile import load_profile

    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(BATCH)
    prof = deadline_profile(board, tmp_path / "profile.csv")
    data = tiny_pt_data(tmp_path / "data.pt")
    schedule = parse_schedule("0:5,2:3")
    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, str(prof), str(data), schedule)
    ins = instruction(24000, 24000, 24000.0, objective="deadline", deadline_s=7.5)
    table = rates(load_profile(str(prof)).points, ins.efficiency)  # before a drift refresh
    replies: list = []
    with board.kernel(process=True, lag_s=0.02), ClockLog(board) as log:
        row = run_round(spec, ins, jetson_settings(board, tmp_path / "state"), replies)
        after = board.bounds()
    assert row["status"] == "not reached", row["message"]  # target 1.0: runs to max_samples
    out = next(o for cmd, o in replies if cmd == "train")
    assert (out["objective"], out["deadline_s"], out["late"]) == ("deadline", 7.5, False)

    def host(k: int, clock_s: float, done: float) -> tuple[int, float]:
        got = choose_step(table, schedule, k, clock_s, done, 7.5)
        return got[0].point.batch_size, got[0].point.freq_mhz

    segs = out["segments"]
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"]) == host(0, 0.0, 0.0) == (BATCH, 614.4)
    assert out["predicted_finish_s"] == pytest.approx(
        choose_step(table, schedule, 0, 0.0, 0.0, 7.5)[2]
    )
    drop = next(s for s in segs if s["reason"] == "budget-change")
    assert drop["budget_w"] == 3.0 and 2.0 <= drop["start_s"] and drop["freq_mhz"] <= 384
    # every re-selection (the drop; a fall behind, e.g. after a slow first step) is the
    # deadline point for the work and time left then, under the budget the loop held then
    # (the segment's own budget_w: a re-selection just after 2 s may precede the loop's reading
    # of the 3 W step by a few ms); drift re-probes come on top
    for s in segs[1:]:
        if s["reason"] in ("budget-change", "deadline"):
            k = [5.0, 3.0].index(s["budget_w"])
            assert (s["batch_size"], s["freq_mhz"]) == host(k, s["start_s"], s["done"]), s
    # the row carries the board's segments; the clock followed them on the board
    assert [(s["budget_w"], s["freq_mhz"], s["reason"]) for s in row["segments"]] == [
        (s["budget_w"], s["freq_mhz"], s["reason"]) for s in segs
    ]
    pinned = log.pinned()
    assert pinned[0][1] == 614.4 * MHZ
    assert check_clocks_follow(pinned, segs) >= 2
    assert row["guard_events"] == []
    assert row["peak_power_w"] is not None and row["peak_power_w"] <= 5.0 * 1.05
    assert after == original


def test_a_board_late_from_the_start_makes_a_late_row_with_its_note():
    """The agent's reply says its deadline plan missed from the start (``late``): a reached
    target is then a ``late`` row, with the board's note; ``late`` false keeps ``ok``."""
    from clients.train_exchange import fill_from_train
    from fleet.rounds.device_round import DeviceResult

    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, "p.csv", "d.pt")
    note = "deadline: predicted finish 9.0 s misses the 7.5 s deadline; running the fastest point"
    reply = {"status": "reached", "late": True, "notes": [note], "time_s": 8.0, "segments": []}
    res = DeviceResult.for_device(spec, "eff.csv")
    fill_from_train(res, reply, 0.9)
    assert (res.status, res.message, res.time_s) == ("late", note, 8.0)
    res = DeviceResult.for_device(spec, "eff.csv")
    fill_from_train(res, dict(reply, late=False, notes=[]), 0.9)
    assert (res.status, res.message) == ("ok", "")


def test_a_board_that_refused_a_clock_makes_an_error_row_with_its_reason():
    """The board's loop stopped because the kernel refused a clock (``tests/test_clock_refused``):
    the reply says ``error`` and why; the row is ``error`` with that reason, not ``over-budget``
    (it never ran over) and not a refused reply."""
    from clients.train_exchange import fill_from_train
    from fleet.rounds.device_round import DeviceResult

    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, "p.csv", "d.pt")
    why = "could not change the clock: cannot write /sys/x/max_freq: [Errno 13] Permission denied"
    reply = {"status": "error", "stop_reason": why, "notes": ["stopping: " + why], "segments": []}
    res = DeviceResult.for_device(spec, "eff.csv")
    fill_from_train(res, reply, 0.9)
    assert res.status == "error" and res.message == why + "; stopping: " + why


def test_a_board_that_spent_time_over_its_budget_makes_an_over_budget_row():
    """The agent's reply says the run reached its target but its budget statistic spent 0.4 s
    (1.2 J) above the budget: the row is ``over-budget``, not ``ok``, and carries both."""
    from clients.train_exchange import fill_from_train
    from fleet.rounds.device_round import DeviceResult

    spec = DeviceSpec("nano-1", "jetson-nano", 5.0, "p.csv", "d.pt")
    note = "over budget: 0.4 s and 1.2 J above the budget in 1 excursion(s)"
    reply = {
        "status": "over-budget", "notes": [note], "time_s": 8.0, "segments": [],
        "over_budget_s": 0.4, "over_budget_j": 1.2, "over_budget_excursions": 1,
        "power_window_s": 0.05,
    }  # fmt: skip
    res = DeviceResult.for_device(spec, "eff.csv")
    fill_from_train(res, reply, 0.9)
    assert (res.status, res.message) == ("over-budget", note)
    assert (res.over_budget_s, res.over_budget_j) == (0.4, 1.2)
    row = res.to_dict()
    assert (row["over_budget_s"], row["over_budget_j"]) == (0.4, 1.2)
