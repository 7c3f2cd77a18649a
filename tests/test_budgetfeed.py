"""`powerfleet budget-feed` (fleet.budgets.feed): a power trace played into a live budget file."""

import os
import subprocess
import sys
import time
from pathlib import Path

from fleet.budgets.codec import BudgetStep
from fleet.budgets.feed import feed
from fleet.budgets.trace import schedule_from_trace

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


class FakeClock:
    def __init__(self):
        self.t = 100.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


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
    assert max(clock.sleeps) <= 0.5  # never sleeps past a step


def test_feeder_process_follows_the_trace_schedule(tmp_path):
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w\n0,6\n20,6\n40,3\n60,3\n80,5\n")
    want = [s.budget_w for s in schedule_from_trace(trace, 0.0)]
    live = tmp_path / "budget"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "budget-feed", "--trace", str(trace), "--file",
         str(live), "--dwell-s", "0", "--speed", "40"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    seen = []
    t0 = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - t0 < 30:
            if live.exists():
                v = live.read_text()
                if v and (not seen or seen[-1] != v):
                    seen.append(v)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, err
    assert want == [6.0, 3.0, 5.0]  # between readings the lower one holds: 3 W from 20 s
    assert [float(v) for v in seen] == want
    assert [float(ln.split()[-1]) for ln in out.splitlines()] == want
    assert elapsed >= 80 / 40 * 0.9  # the last step is due at 80 s / 40 = 2 s, not before


def test_bad_inputs_are_one_line(tmp_path):
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w\n0,6\n")
    for args, needle in (
        (["--trace", str(tmp_path / "missing.csv")], "budget trace not found"),
        (["--trace", str(trace), "--speed", "0"], "--speed: expected a positive number"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "fleet", "budget-feed", "--file", str(tmp_path / "b"), *args],
            capture_output=True, text=True, env=ENV,
        )  # fmt: skip
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr
        assert not (tmp_path / "b").exists()
