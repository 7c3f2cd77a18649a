"""The load test's recorder (strategies/reply_timings.py): off without the environment, and
each reply's line carries its own cost and the write that published it."""

from __future__ import annotations

import json

from strategies.reply_timings import ENV, ReplyTimings


def test_off_without_the_environment_keeps_nothing(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    t = ReplyTimings.from_env()
    t.handled("a", 1.0, 0.5, 0.25)
    t.written(0.1, 0.1)
    assert not t.on and t.pending == []


def test_each_reply_names_the_write_that_published_it(monkeypatch, tmp_path):
    path = tmp_path / "t.jsonl"
    monkeypatch.setenv(ENV, str(path))
    t = ReplyTimings.from_env()
    t.written(9.0, 9.0)  # nothing pending: no line
    t.handled("a", 100.0, 0.002, 0.001)
    t.handled("b", 101.0, 0.004, 0.003)
    t.written(0.010, 0.006)
    t.handled("c", 102.0, 0.001, 0.001)
    t.written(0.020, 0.002)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["device"] for x in lines] == ["a", "b", "c"]
    assert [x["batch"] for x in lines] == [2, 2, 1]
    assert [x["write_wall_s"] for x in lines] == [0.010, 0.010, 0.020]
    assert lines[1]["created"] == 101.0 and lines[1]["cpu_s"] == 0.003
    assert lines[0]["written"] == lines[1]["written"] <= lines[2]["written"]
    assert all(x["written"] >= x["handled"] for x in lines)
    assert t.pending == []


def test_state_writes_take_at_most_their_share_of_the_wall():
    from strategies.reply_timings import write_gap

    assert write_gap(0.010, 0.5, 0.1) == 0.5  # a small fleet: the fixed gap
    assert write_gap(0.200, 0.5, 0.1) == 2.0  # 200 ms to write: next one 2 s after its start
    for took in (0.05, 0.3, 1.0, 4.0):  # whatever a write costs, writing is <= 10 % of the wall
        assert took / write_gap(took, 0.5, 0.1) <= 0.1 + 1e-12
