"""`powerfleet budget-feed` (fleet.budgets.feed): a power trace played into a live budget file."""

import os
import subprocess
import sys
import time
from pathlib import Path

from fleet.budgets.feed import feed
from fleet.budgets.trace import schedule_from_trace
from fleet.method.budget import BudgetStep
from tests.closedloop_helpers import FakeClock

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def test_each_step_is_written_at_its_time(tmp_path):
    clock = FakeClock()
    path = tmp_path / "budget"
    contents = []
    steps = (BudgetStep(0.0, 6.0), BudgetStep(2.0, 3.0), BudgetStep(5.0, None))
    got = feed(
        steps, str(path), speed=2.0, clock=clock, sleep=clock.sleep,
        on_write=lambda at, w: contents.append(path.read_text()),
    )  # fmt: skip
    # trace seconds / speed: 0, 1 and 2.5 s after the start
    assert [round(at, 9) for at, _w in got] == [0.0, 1.0, 2.5]
    assert [w for _at, w in got] == [6.0, 3.0, None]
    assert contents == ["6\n", "3\n", "none\n"]  # the budget codec's words, read back
    assert path.stat().st_mode & 0o777 == 0o644  # an agent running as another user reads it
    assert max(clock.slept) <= 0.5  # never sleeps past a step


def test_feeder_process_follows_the_trace_schedule(tmp_path):
    """The command writes each step when its time comes on its own clock (its output says when:
    never before the step is due), and a reader of the live file only ever sees the schedule's
    values, in order, whole, ending at the last one."""
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w\n0,6\n20,6\n40,3\n60,3\n80,5\n")
    schedule = schedule_from_trace(trace, 0.0)
    want = [s.budget_w for s in schedule]
    live = tmp_path / "budget"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "budget-feed", "--budget-trace", str(trace),
         "--budget-file", str(live), "--budget-dwell-s", "0", "--speed", "40"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    seen = []

    def look():
        v = live.read_text() if live.exists() else ""
        if v and (not seen or seen[-1] != v):
            seen.append(v)

    try:
        while proc.poll() is None and time.monotonic() - t0 < 60:  # 60 s: a hang guard
            look()
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    look()  # the last write may come just before the process ends
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, err
    assert want == [6.0, 3.0, 5.0]  # between readings the lower one holds: 3 W from 20 s
    written = [ln.split() for ln in out.splitlines()]  # "<seconds> s  budget <watts>"
    assert [float(w[-1]) for w in written] == want
    # each step written when due on the feeder's clock (trace s / 40), never before; printed
    # to 0.1 s
    due = [s.at_s / 40 for s in schedule]
    assert due == [0.0, 0.5, 2.0]
    assert all(float(w[0]) >= d - 0.05 for w, d in zip(written, due, strict=True)), out
    assert elapsed >= due[-1]  # the last step is due 2 s after the start, not before
    # a reader polling the file (at whatever pace this machine allows) sees whole values of
    # the schedule, in its order, and the last one at the end
    values = [float(v) for v in seen]
    assert all(v.endswith("\n") for v in seen) and values[-1] == want[-1]
    assert values == [w for w in want if w in values], values


def test_bad_inputs_are_one_line(tmp_path):
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w\n0,6\n")
    for args, needle in (
        (["--budget-trace", str(tmp_path / "missing.csv")], "budget trace not found"),
        (["--budget-trace", str(trace), "--speed", "0"], "--speed: expected a positive number"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "fleet", "budget-feed", "--budget-file", str(tmp_path / "b"),
             *args],
            capture_output=True, text=True, env=ENV,
        )  # fmt: skip
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr
        assert not (tmp_path / "b").exists()
