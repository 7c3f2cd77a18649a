"""The agent's JSON-lines protocol, spoken to a real ``python -m fleet.agent`` subprocess."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fleet.method.profile_io import read_rows, write_rows
from tests.conftest import AGENT_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
FREQS = [76.8, 307.2, 614.4, 921.6]
BATCHES = [4, 16, 64]
TIMEOUT = AGENT_GUARD_S  # a hang guard: an agent's start under load has taken over 20 s

pytestmark = pytest.mark.integration


def replay_csv(path):
    rows = []
    for i, b in enumerate(BATCHES):
        for f in FREQS:
            peak = 1.5 + 0.004 * f * (1 + 0.3 * i)
            rows.append(
                {
                    "batch_size": b,
                    "freq_mhz": f,
                    "time_per_batch_s": 0.001 * b * 921.6 / f,
                    "peak_power_w": peak,
                    "mean_power_w": 0.8 * peak,
                }
            )
    write_rows(str(path), rows)
    return str(path)


class Agent:
    """A running agent: send a request, read lines with a timeout (a reader thread never hangs
    the test), and collect every stdout line to check that only protocol lines appear there."""

    def __init__(self, csv, timeout=TIMEOUT, env=None, work_dir=None):
        env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.timeout = timeout
        argv = [sys.executable, "-m", "fleet.agent", "--backend", "replay", "--profile-csv", csv]
        if work_dir is not None:  # the agent's own directory: request paths must lie inside
            argv += ["--work-dir", str(work_dir)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
            env=env,
            text=True,
            bufsize=1,
        )
        self.lines = queue.Queue()
        self.raw = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.raw.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def send(self, **req):
        self.send_raw(json.dumps(req))

    def recv(self):
        line = self.lines.get(timeout=self.timeout)
        assert line is not None, "agent closed stdout; stderr: " + self.proc.stderr.read()
        return json.loads(line)

    def call(self, **req):
        """Send one request; return (progress events, final response)."""
        self.send(**req)
        events = []
        while True:
            msg = self.recv()
            if msg.get("event"):
                events.append(msg)
                continue
            return events, msg

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.timeout)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


@pytest.fixture
def agent(tmp_path):
    a = Agent(replay_csv(tmp_path / "replay.csv"), work_dir=tmp_path)
    try:
        yield a
    finally:
        a.kill()


def test_full_session(agent, tmp_path):
    _, hello = agent.call(id=1, cmd="hello")
    assert hello["id"] == 1 and hello["ok"] is True
    caps = hello["capabilities"]
    assert set(caps["commands"]) >= {"hello", "profile", "lock", "restore", "power", "shutdown"}
    assert caps["backend"] == "replay" and caps["frequencies"] == FREQS and caps["power"] is True
    assert hello["versions"]["protocol"] == "1" and hello["versions"]["python"]

    _, locked = agent.call(id=2, cmd="lock", freq_mhz=307.2)
    assert locked == {"id": 2, "ok": True, "freq_mhz": 307.2}
    _, bad_lock = agent.call(id=3, cmd="lock", freq_mhz=555)
    assert bad_lock["ok"] is False and "555" in bad_lock["error"] and "\n" not in bad_lock["error"]

    _, power = agent.call(id=4, cmd="power")
    assert power["ok"] is True and "power_w" in power and isinstance(power["available"], bool)

    out = tmp_path / "out" / "profile.csv"
    events, prof = agent.call(
        id=5, cmd="profile", model="resnet18", input_shape="3x32x32", batch_sizes=BATCHES,
        budget_w=4.5, out=str(out),
    )  # fmt: skip
    assert prof["ok"] is True and prof["id"] == 5
    assert prof["grid_size"] == len(BATCHES) * len(FREQS)
    assert 0 < prof["probes"] < prof["grid_size"] and prof["saved"] > 0
    assert len(prof["rows"]) == prof["probes"]
    assert events and all(e["id"] == 5 and e["event"] == "progress" for e in events)
    assert [e["done"] for e in events][-1] == prof["probes"] == events[-1]["total"]
    _, rows, comments = read_rows(str(out))
    assert len(rows) == prof["probes"] and "source=replayed" in comments

    agent.send_raw("{this is not json")
    bad = agent.recv()
    assert bad["ok"] is False and bad["id"] is None and bad["error"].startswith("bad JSON")

    _, unknown = agent.call(id=6, cmd="dance")
    assert unknown["ok"] is False and unknown["id"] == 6 and "unknown command" in unknown["error"]
    _, typo = agent.call(id=7, cmd="profile", model="resnet18", batchsizes=[4])
    assert typo["ok"] is False and "batchsizes" in typo["error"]
    _, no_model = agent.call(id=8, cmd="profile", model="vgg16")
    assert no_model["ok"] is False and "unknown model" in no_model["error"]

    _, again = agent.call(id=9, cmd="hello")  # still serving after all the errors
    assert again["ok"] is True

    _, bye = agent.call(id=10, cmd="shutdown")
    assert bye["ok"] is True and bye["id"] == 10
    assert agent.proc.wait(timeout=TIMEOUT) == 0
    assert agent.lines.get(timeout=TIMEOUT) is None  # nothing after the last response
    for line in agent.raw:
        json.loads(line)  # stdout carried protocol lines only


def test_eof_exits_zero(agent):
    _, hello = agent.call(id="a", cmd="hello")
    assert hello["id"] == "a" and hello["ok"] is True
    agent.proc.stdin.close()
    assert agent.proc.wait(timeout=TIMEOUT) == 0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_restores_and_exits_143(agent):
    _, locked = agent.call(id=1, cmd="lock", freq_mhz=921.6)
    assert locked["ok"] is True
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(timeout=TIMEOUT) == 143


def test_bad_backend_options_fail_fast_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fleet.agent", "--backend", "replay",
         "--profile-csv", str(tmp_path / "missing.csv")],
        cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
        input="", capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "missing.csv" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
