"""The coordinator's book of a segmented round, the segment wire, re-planning, reply checks.

Everything here runs on real Flower records (RecordDict, ConfigRecord) and the persisted state
dict; the processes themselves are exercised by the fault suite (tests/test_faults_*.py).
"""

from __future__ import annotations

import json
import math

import pytest
from flwr.app import ConfigRecord, RecordDict

from clients import records
from clients import segment_wire as wire
from clients.reply_check import check_row
from fleet.common.errors import InputError
from fleet.planning import replan
from fleet.planning import round_logic as logic
from fleet.rounds.device_round import DeviceResult
from fleet.rounds.progress import Progress, later
from strategies import round_book as book


def _state() -> dict:
    return {"devices": {}, "plan": {"deadline_s": None, "revisions": []}}


def _row(name: str = "nano-1", **values: object) -> dict:
    base = dict(
        status="running",
        batch_size=32,
        freq_mhz=921.6,
        time_s=600.0,
        samples=9600.0,
        energy_j=3000.0,
        budget_w=5.0,
        peak_power_w=4.8,
        mean_power_w=4.5,
    )
    base.update(values)
    return DeviceResult(name, "jetson-nano", **base).to_dict()  # type: ignore[arg-type]


def test_progress_replaces_never_adds_across_replayed_segments() -> None:
    state = _state()
    book.assign(state, "nano-1", 7)
    p1 = Progress(time_s=600, samples=9600, energy_j=3000, done=0.25, segments=1)
    assert book.apply_segment(state, "nano-1", _row(), p1) is False
    # the same segment's reply arrives again (a replay after a lost reply): nothing doubles
    assert book.apply_segment(state, "nano-1", _row(), p1) is False
    p2 = Progress(time_s=1200, samples=19200, energy_j=6000, done=0.5, segments=2)
    book.apply_segment(state, "nano-1", _row(), p2)
    assert logic.progress(state["devices"]["nano-1"]).samples == 19200
    final = _row(status="ok", time_s=2400.0, samples=38400.0, energy_j=12000.0)
    assert book.apply_segment(state, "nano-1", final, p2) is True
    rows = book.round_rows(state)
    assert [r["samples"] for r in rows] == [38400.0]
    assert rows[0]["status"] == "ok"


def test_lost_device_reported_with_last_progress_and_back_within_the_round() -> None:
    state = _state()
    book.assign(state, "tx2-1", 3)
    prog = Progress(
        time_s=1800,
        samples=27000,
        energy_j=9100,
        done=0.4,
        end_batch_size=64,
        end_freq_mhz=1300.5,
        segments=3,
    )
    book.apply_segment(state, "tx2-1", _row("tx2-1"), prog)
    book.mark_lost(state, "tx2-1", "node 3 went offline")
    e = state["devices"]["tx2-1"]
    assert e["status"] == "lost" and e["lost_at_utc"]
    assert logic.active(state["devices"]) == []
    row = book.round_rows(state)[0]
    assert row["status"] == "lost"
    assert (row["samples"], row["time_s"], row["energy_j"]) == (27000, 1800, 9100)
    # the point it chose at the start (its first reply's row), and the one it ran when lost
    assert (row["batch_size"], row["freq_mhz"]) == (32, 921.6)
    assert (row["end_batch_size"], row["end_freq_mhz"]) == (64, 1300.5)
    assert "27000 samples" in row["message"] and "node 3 went offline" in row["message"]
    # a restarted SuperNode identifies under a new node id: the device runs again
    book.assign(state, "tx2-1", 11)
    assert e["status"] == "running" and e["node_id"] == 11
    assert logic.progress(e).samples == 27000  # resumes, keeping every sample


def test_coordinator_restart_keeps_finished_devices_and_resumes_the_rest() -> None:
    state = _state()
    for n, node in (("a", 1), ("b", 2), ("c", 3)):
        book.assign(state, n, node)
    book.apply_segment(state, "a", _row("a", status="ok"), Progress(time_s=900, segments=2))
    book.apply_segment(state, "b", _row("b"), Progress(time_s=600, samples=5, segments=1))
    book.mark_lost(state, "c", "node 3 went offline")
    resumed = book.resume_after_restart(json.loads(json.dumps(state)))  # as read back
    assert sorted(resumed) == ["b", "c"]
    back = json.loads(json.dumps(state))
    book.resume_after_restart(back)
    assert back["devices"]["a"]["status"] == "ok"
    assert back["devices"]["b"]["status"] == "pending"
    assert back["devices"]["b"]["node_id"] is None
    assert back["devices"]["b"]["progress"]["samples"] == 5


def test_hostile_reply_refused_naming_device_and_field() -> None:
    state = _state()
    book.assign(state, "nano-1", 1)
    cases = {
        "energy_j": math.nan,
        "samples": -5.0,
        "accuracy": 7.0,
        "time_s": 1e30,
        "batch_size": 0,
        "end_batch_size": 2.5,  # the end point is bounded like the start point
    }
    for key, bad in cases.items():
        row = _row()
        row[key] = bad
        with pytest.raises(InputError, match=rf"device nano-1: report row field '{key}'"):
            check_row(row, "nano-1")
    for key, bad in (
        ("status", "pwned"),
        ("status", "lost"),
        ("device", "other-dev"),
        ("message", "x" * 10_000),
        ("samples", "12"),
    ):
        row = _row()
        row[key] = bad
        with pytest.raises(InputError, match=rf"field '{key}'"):
            check_row(row, "nano-1")
    row = _row()
    row["segments"] = [{"start_s": 0.0, "energy_j": math.inf}]
    with pytest.raises(InputError, match="segments"):
        check_row(row, "nano-1")
    book.refuse(state, "nano-1", "device nano-1: field 'energy_j': nan")
    out = book.round_rows(state)[0]
    assert out["status"] == "error" and out["energy_j"] is None
    assert check_row(_row(), "nano-1")["samples"] == 9600.0


def test_segment_wire_round_trip_and_bad_values() -> None:
    base = ConfigRecord({"server-round": 2})
    resume = Progress(time_s=1200.5, samples=100.0, done=0.3, segments=2, end_batch_size=16)
    cfg = wire.segment_config(base, 300.0, resume)
    assert "segment-s" not in base  # the round's config is never mutated
    seconds, back = wire.read_segment(cfg)
    assert seconds == 300.0 and back == resume
    for value in (0.0, -1.0, math.nan, "300", True):
        bad = ConfigRecord(dict(cfg))
        bad["segment-s"] = value
        with pytest.raises(InputError, match="segment-s"):
            wire.read_segment(bad)
    bad = ConfigRecord(dict(cfg))
    bad["resume"] = json.dumps({"time_s": -4})
    with pytest.raises(InputError, match=r"resume': progress field 'time_s'"):
        wire.read_segment(bad)
    content = wire.attach_progress(records.reply_content(_row()), resume)
    assert wire.progress_of(content, "nano-1") == resume
    content[wire.PROGRESS] = ConfigRecord({"progress": json.dumps({"samples": math.inf})})
    with pytest.raises(InputError, match="nano-1"):
        wire.progress_of(content, "nano-1")
    ident = wire.identity_content("nano-1", "jetson-nano", "simulated")
    assert wire.identity_of(ident) == "nano-1"
    with pytest.raises(InputError):
        wire.identity_of(wire.identity_content("../etc", "x", "y"))
    with pytest.raises(InputError):
        wire.identity_of(RecordDict())


def test_later_takes_the_further_view() -> None:
    a, b = Progress(time_s=600, samples=10), Progress(time_s=900, samples=5)
    assert later(a, b) is b and later(b, a) is b


def test_replan_moves_the_deadline_only_when_the_slowest_falls_behind() -> None:
    # planned: slowest fastest finish 1000 s. Half-way at 600 s, a device with fastest 1000 s
    # can finish at 600 + 0.5 * 1000 = 1100 s: behind by 10 % -> the deadline moves to 1100.
    s = [replan.Standing("a", 600.0, 0.5, 1000.0), replan.Standing("b", 600.0, 0.9, 500.0)]
    new, why = replan.revise(1000.0, s)
    assert new == pytest.approx(1100.0) and "a fell behind" in why
    # within the hysteresis (2 % late) or ahead: no revision, the deadline never moves earlier
    assert replan.revise(1000.0, [replan.Standing("a", 520.0, 0.5, 1000.0)]) == (1000.0, "")
    assert replan.revise(1000.0, [replan.Standing("a", 100.0, 0.9, 1000.0)]) == (1000.0, "")
    assert replan.revise(None, s) == (None, "")


def test_round_logic_steps_in_lock_step_replans_and_settles() -> None:
    """The round's logic every engine drives (fleet.planning.round_logic), by hand: three
    devices at 0 s all train; one ahead waits; a device half-way at 600 s whose planned
    fastest finish is 1000 s can end at 600 + 0.5 x 1000 = 1100 s, so the deadline 1000 s
    moves there (over the 5 % hysteresis); a row that ended at 1150 s is then late."""
    devices = {n: logic.device_entry(n) for n in ("a", "b", "c")}
    assert logic.due(devices) == ["a", "b", "c"]
    half = Progress(time_s=600.0, samples=9600.0, done=0.5, end_batch_size=32, segments=1)
    assert logic.apply_segment(devices["a"], _row("a"), half) is False
    assert logic.due(devices) == ["b", "c"]  # a is ahead of the slowest clock
    for n in ("b", "c"):
        logic.apply_segment(devices[n], _row(n), half)
    assert logic.due(devices) == ["a", "b", "c"]
    plan = logic.new_plan(1000.0, {"a": 1000.0, "b": 500.0, "c": None}, lambda: "T")
    assert plan["revisions"] == [
        {"at_utc": "T", "round_time_s": 0.0, "deadline_s": 1000.0, "previous_s": None,
         "reason": logic.PLANNED}
    ]  # fmt: skip

    def shipped(name: str) -> dict[int, float]:
        return {32: 19200.0}  # 9600 samples at half-way: exactly the shipped pace

    assert logic.replan(plan, devices, shipped).startswith("a fell behind")
    rev = plan["revisions"][-1]
    assert plan["deadline_s"] == pytest.approx(1100.0) == rev["deadline_s"]
    assert (rev["previous_s"], rev["round_time_s"], "at_utc" in rev) == (1000.0, 600.0, False)
    assert logic.replan(plan, devices, shipped) == ""  # no news, no revision
    assert logic.deadline_for(plan, "a", half, shipped) == pytest.approx(1100.0)
    assert logic.deadline_for(None, "a", half, shipped) is None  # the run's own
    done = _row("a", status="ok", time_s=1150.0)
    assert logic.apply_segment(devices["a"], done, half) is True
    logic.apply_segment(devices["b"], _row("b", status="ok", time_s=900.0), half)
    logic.settle(devices.values(), plan)
    assert (devices["a"]["status"], devices["a"]["row"]["status"]) == ("late", "late")
    assert "after the round's deadline 1100 s" in devices["a"]["row"]["message"]
    assert devices["b"]["row"]["status"] == "ok" and logic.active(devices) == ["c"]
