"""The incremental round-state writer (``roundstate.Writer``): after any sequence of changes its
state.json and metrics.prom are byte for byte what a full rewrite writes, and a write renders
(serialises, checks, renders as Prometheus text) only the devices whose entry changed."""

from __future__ import annotations

import json
import os

import pytest

from fleet.common.errors import InputError
from fleet.reports import roundstate as rs
from fleet.reports import runlife
from fleet.reports.prometheus import prometheus_text
from fleet.reports.report import json_safe
from fleet.rounds.device_round import DeviceResult
from fleet.rounds.progress import Progress
from strategies import round_book as book

ODD = 'nano "7" \\ é\nx'  # a name JSON and the Prometheus labels must both escape


def _state(n: int) -> dict:
    devices = [(f"dev-{k:04d}", "jetson-nano" if k % 2 else "jetson-tx2nx", 4.5) for k in range(n)]
    devices.append((ODD, "jetson-nano", None))
    return rs.new_state("demo", "fleet.toml", "ab" * 32, "flower", "tok", 2, 600.0, devices)


def _row(name: str, status: str = "running", **values: object) -> dict:
    base = dict(status=status, batch_size=32, freq_mhz=921.6, time_s=600.0, samples=9600.0)
    base.update(energy_j=3000.0, budget_w=4.5, peak_power_w=4.8, mean_power_w=4.4)
    base.update(values)
    return DeviceResult(name, "jetson-nano", **base).to_dict()  # type: ignore[arg-type]


class Pair:
    """The incremental writer on one directory, a fresh full write of the same state on
    another, the clock frozen so both stamp the same ``updated_utc``."""

    def __init__(self, tmp_path, monkeypatch) -> None:
        self.inc, self.full = tmp_path / "inc", tmp_path / "full"
        self.inc.mkdir()
        self.full.mkdir()
        self.writer = rs.Writer(self.inc)
        self.tick = 0
        monkeypatch.setattr(rs, "now_utc", lambda: f"2026-01-02T03:04:{self.tick:02d}+00:00")

    def write(self, state: dict) -> int:
        """Both writes; the files compared; how many devices the incremental one rendered."""
        self.tick += 1
        self.writer.write(state)
        rs.write_state(self.full, state)
        for name in (rs.STATE_FILE, rs.METRICS_FILE):
            assert (self.inc / name).read_bytes() == (self.full / name).read_bytes(), name
        # and both are what the whole document serialised at once is (the old write)
        text = (self.inc / rs.STATE_FILE).read_text()
        assert text == json.dumps(json_safe(state), allow_nan=False) + "\n"
        assert (self.inc / rs.METRICS_FILE).read_text() == prometheus_text(json_safe(state))
        got, sealed = rs.read_run(self.inc)  # the reader accepts it (its writer: this process)
        assert not sealed and got == json.loads(text)
        return self.writer.rendered


def test_a_sequence_of_changes_writes_the_full_writes_bytes(tmp_path, monkeypatch):
    p = Pair(tmp_path, monkeypatch)
    state = _state(6)
    names = list(state["devices"])
    assert p.write(state) == 7  # the first write renders everything
    assert p.write(state) == 0  # nothing changed: nothing rendered, same bytes
    for k, name in enumerate(names[:4]):  # devices identify
        book.assign(state, name, 10 + k)
    assert p.write(state) == 4
    prog = Progress(time_s=600, samples=9600, energy_j=3000, done=0.25, power_w=4.4, segments=1)
    book.apply_segment(state, names[0], _row(names[0]), prog)
    book.apply_segment(state, ODD, _row(ODD), prog)
    assert p.write(state) == 2
    # in place, nested, one value: seen without anyone saying so
    state["devices"][names[0]]["progress"]["samples"] = 9700.0
    assert p.write(state) == 1
    # the same number as another type: JSON writes 9700 and 9700.0 differently
    state["devices"][names[0]]["progress"]["samples"] = 9700
    assert p.write(state) == 1
    first = state["devices"][names[0]]["first_point"]  # was 32, then true, then 1
    first["batch_size"] = True
    assert p.write(state) == 1
    first["batch_size"] = 1  # the same sample in metrics.prom, not the same JSON
    assert p.write(state) == 1
    # a device changes status: overdue, then lost; a refused reply; a final row with a NaN
    book.mark_overdue(state, names[1], 900.0)
    assert p.write(state) == 1
    book.mark_lost(state, names[1], "node offline")
    book.refuse(state, names[2], "samples: -1 is below 0")
    rs.record_row(state, _row(names[3], "ok", energy_j=float("nan")))
    assert p.write(state) == 3
    # the head alone: a plan revision, a closed round's totals
    state["plan"]["deadline_s"] = 3600.0
    state["plan"]["revisions"].append(
        {
            "at_utc": "2026-01-02T03:04:05+00:00",
            "round_time_s": 3500.0,
            "deadline_s": 3600.0,
            "previous_s": None,
            "reason": "planned",
        }  # fmt: skip
    )
    assert p.write(state) == 0
    # the book re-ordered (fleet order) and a device dropped: order and content follow
    state["devices"] = dict(reversed(list(state["devices"].items())))
    del state["devices"][names[5]]
    assert p.write(state) == 0
    # a new round: every entry that had a node replaced by a fresh one; names[4], which no node
    # ever ran, leaves the book until one does (round_book.start_round)
    book.assign(state, ODD, 20)
    state["completed_rounds"].append({"round": 1, "totals": {"devices": 6, "energy_j": 1.5}})
    book.start_round(state, 2)
    assert names[4] not in state["devices"] and len(state["devices"]) == 5
    assert p.write(state) == 5
    # the run renamed: every device's metrics carry the run's label
    state["run"] = "demo-2"
    assert p.write(state) == 5
    # the run ends
    for name in list(state["devices"]):
        rs.record_row(state, _row(name, "ok"))
    state["finished"] = True
    assert p.write(state) == 5
    assert rs.read_run(p.inc)[0]["finished"] is True


def test_an_interrupted_run_writes_the_full_writes_bytes(tmp_path, monkeypatch):
    p = Pair(tmp_path, monkeypatch)
    state = _state(5)
    names = list(state["devices"])
    for name in names[:3]:
        book.assign(state, name, 1)
        state["devices"][name]["status"] = "running"
    rs.record_row(state, _row(names[3], "ok"))
    assert p.write(state) == 6
    runlife.interrupt(state, "SIGTERM", "2026-01-02T03:05:00+00:00")
    assert p.write(state) == 5  # the running and the pending became interrupted
    got = rs.read_state(p.inc)
    assert got["interrupted"]["devices_done"] == 1
    assert [got["devices"][n]["status"] for n in names] == ["interrupted"] * 3 + ["ok"] + [
        "interrupted"
    ] * 2
    book.resume_after_restart(state)  # a coordinator resumes it
    assert p.write(state) == 5
    assert rs.read_state(p.inc).get("interrupted") is None


def test_one_changed_device_of_many_is_the_only_one_rendered(tmp_path, monkeypatch):
    p = Pair(tmp_path, monkeypatch)
    state = _state(299)
    for k, name in enumerate(state["devices"]):
        rs.record_row(state, _row(name, "ok" if k % 3 else "running", samples=float(k)))
    assert p.write(state) == 300
    state["devices"]["dev-0150"]["status"] = "late"
    assert p.write(state) == 1
    assert p.writer.writes == 2
    assert rs.read_state(p.inc)["devices"]["dev-0150"]["status"] == "late"
    assert (
        'device="dev-0150",device_type="jetson-tx2nx",status="late"} 1'
        in (p.inc / rs.METRICS_FILE).read_text()
    )


def test_a_changed_entry_is_still_checked_and_a_refused_one_never_written(tmp_path):
    state = _state(20)
    w = rs.Writer(tmp_path)
    w.write(state)
    before = {n: (tmp_path / n).read_bytes() for n in (rs.STATE_FILE, rs.METRICS_FILE)}
    state["devices"]["dev-0007"]["status"] = "sleeping"
    with pytest.raises(InputError, match=r"devices\.dev-0007\.status: 'sleeping' is not one of"):
        w.write(state)
    state["devices"]["dev-0007"]["status"] = "running"
    state["devices"]["dev-0003"]["progress"]["samples"] = -5.0
    with pytest.raises(InputError, match=r"devices\.dev-0003\.progress"):
        w.write(state)
    state["devices"]["dev-0003"]["progress"]["samples"] = 5.0
    state["round"] = 3  # the head is checked every write
    with pytest.raises(InputError, match=r"round: 3 is beyond rounds \(2\)"):
        w.write(state)
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["metrics.prom", "state.json"]
    state["round"] = 2
    w.write(state)
    assert w.rendered == 2  # the two fixed entries, checked again
    assert rs.read_state(tmp_path)["devices"]["dev-0003"]["progress"]["samples"] == 5.0
