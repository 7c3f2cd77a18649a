"""`powerfleet status` as a user runs it: a subprocess on a run directory built in tmp (the
table, --json, --prometheus, --follow, bad input), and the direct engine writing the state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fleet.reports import roundstate as rs
from tests.conftest import ROOT, run_cli
from tests.test_status import build_state

HANG_GUARD_S = 120  # only so a broken --follow cannot hang the suite; never a verdict on speed


# ------------------------------------------------------------------------------------- CLI


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    rs.write_state(d, build_state())
    return d


def test_table_shows_the_numbers(run_dir):
    r = run_cli("status", str(run_dir))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "run demo" in out and "round 2/3" in out and "running" in out
    assert "deadline 1h00m" in out and "plan revisions 1" in out
    assert "2 at work draw 4.3/5.0 W; longest ETA 30m00s" in out  # running + pending
    nano = next(line for line in out.splitlines() if "nano-1" in line)
    for cell in ("running", "40,960", "42.0", "4.3/5.0 W", "32 @ 921.6", "0.710", "20m34s"):
        assert cell in nano, (cell, nano)
    assert "30m00s" in nano  # ETA 1800 s
    assert "03:10:00Z" in nano  # last seen (UTC time of day)
    orin = next(line for line in out.splitlines() if "orin-1" in line and "lost" in line)
    assert "lost 2026-01-02 03:09:00Z" in orin or "lost 03:09:00Z" in orin
    assert "-/none W" in next(line for line in out.splitlines() if "tx2-1" in line)
    assert "orin-1: lost: no reply for 3 segments" in out


def test_json_round_trips_with_a_summary(run_dir):
    r = run_cli("status", str(run_dir), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    summary = out.pop("summary")
    assert out == rs.read_state(run_dir)
    assert summary["status_counts"] == {"pending": 1, "running": 1, "lost": 1}
    assert summary["samples"] == 40960.0 + 1000.0
    assert summary["energy_j"] == 7000.0
    assert summary["running"] == 2 and summary["final"] == 1
    assert summary["running_power_w"] == 4.3 and summary["running_budget_w"] == 5.0
    assert summary["eta_max_s"] == 1800.0 and summary["plan_revisions"] == 1


def test_prometheus_flag_prints_metrics_prom(run_dir):
    r = run_cli("status", str(run_dir), "--prometheus")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (run_dir / "metrics.prom").read_text()


def _bad(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("powerfleet status: error: ")
    return lines[0]


@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(tmp_path, run_dir):
    assert "no such directory" in _bad(run_cli("status", str(tmp_path / "missing")))
    line = _bad(run_cli("status", str(tmp_path)))
    assert line.endswith("state.json not found: is this a powerfleet run directory?")
    (run_dir / "state.json").write_text('{"format": "powerfleet-round-state", "ver')
    assert "state.json: not valid JSON" in _bad(run_cli("status", str(run_dir)))
    state = json.loads(json.dumps(build_state()))
    state["version"] = 9
    (run_dir / "state.json").write_text(json.dumps(state))
    assert "state.json: version: expected 1, got 9" in _bad(run_cli("status", str(run_dir)))
    assert "--interval" in _bad(run_cli("status", str(run_dir), "--interval", "-1"))
    assert "choose one" in _bad(run_cli("status", str(run_dir), "--json", "--prometheus"))


def test_an_old_run_directory_is_named_as_such(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "report.json").write_text('{"devices": [], "fleet": {}}')
    assert "before round state" in _bad(run_cli("status", str(old)))


# ---------------------------------------------------------------------------------- follow


def _sigint_default() -> None:
    """A CI runner may start the suite with SIGINT ignored (a background job), which every
    child inherits and Python then keeps: give the follower Ctrl-C as a terminal would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Follower:
    """`powerfleet status --follow` in the background, its stdout collected line by line."""

    def __init__(self, run_dir: Path, *flags: str, pythonpath: str = "") -> None:
        env = dict(os.environ, COLUMNS="200")
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet", "status", str(run_dir), "--follow"]
            + ["--interval", "0.05", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
            preexec_fn=_sigint_default,
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, text: str) -> None:
        with self.changed:
            ok = self.changed.wait_for(lambda: text in "".join(self.lines), HANG_GUARD_S)
        assert ok, f"{text!r} never appeared in {''.join(self.lines)!r}"

    def finish(self) -> tuple[int, str, str]:
        rc = self.proc.wait(timeout=HANG_GUARD_S)
        err = self.proc.stderr.read()
        return rc, "".join(self.lines), err


def test_follow_prints_each_change_and_stops_when_finished(run_dir):
    state = rs.read_state(run_dir)
    f = Follower(run_dir)
    f.wait_for("40,960")  # the first block is out: the follower is reading
    state["devices"]["nano-1"]["progress"]["samples"] = 81920.0
    rs.write_state(run_dir, state)
    f.wait_for("81,920")  # a new block for the change
    state["finished"] = True
    state["devices"]["nano-1"]["status"] = "ok"
    rs.write_state(run_dir, state)
    rc, out, err = f.finish()
    assert rc == 0, err
    assert "Traceback" not in err
    blocks = [b for b in out.split("\n\n") if "run demo" in b]
    assert len(blocks) >= 3
    assert "running" in blocks[0].splitlines()[0] and "finished" in blocks[-1].splitlines()[0]
    assert "81,920" in blocks[-1]


def test_follow_json_is_one_line_per_change(run_dir):
    state = rs.read_state(run_dir)
    f = Follower(run_dir, "--json")
    f.wait_for("\n")
    state["finished"] = True
    rs.write_state(run_dir, state)
    rc, out, err = f.finish()
    assert rc == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs[0]["finished"] is False and docs[-1]["finished"] is True
    assert all("summary" in d for d in docs)


def test_follow_ends_on_ctrl_c_without_a_traceback(run_dir):
    f = Follower(run_dir)
    f.wait_for("nano-1")
    f.proc.send_signal(signal.SIGINT)
    rc, _, err = f.finish()
    assert rc == 0 and "Traceback" not in err, err


# Ctrl-C raised from code that exec() ran from a string, as dataclasses and namedtuple build their
# methods: every interrupt of this child lands there, where a real one lands now and then.
CTRL_C_IN_EXEC = """\
import signal


def ctrl_c_in_exec(signum, frame):
    exec("raise KeyboardInterrupt")


signal.signal(signal.SIGINT, ctrl_c_in_exec)
"""


def test_a_ctrl_c_inside_exec_code_keeps_the_status_the_command_chose(run_dir, tmp_path):
    """CPython marks a process to die by SIGINT once a KeyboardInterrupt has left exec'd string
    code, caught or not, and `python -m` honours the mark over sys.exit's status: -2, not 0."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CTRL_C_IN_EXEC)
    f = Follower(run_dir, pythonpath=str(site))
    f.wait_for("nano-1")
    f.proc.send_signal(signal.SIGINT)
    rc, _, err = f.finish()
    assert rc == 0 and "Traceback" not in err, (rc, err)


def test_follow_on_a_finished_run_prints_once(run_dir):
    state = rs.read_state(run_dir)
    state["finished"] = True
    rs.write_state(run_dir, state)
    r = run_cli("status", str(run_dir), "--follow", "--interval", "0.05")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("run demo") == 1 and "finished" in r.stdout


# ---------------------------------------------------------------------- the direct engine


@pytest.mark.slow
def test_direct_engine_writes_the_round_state(tmp_path):
    out = tmp_path / "run"
    fleet = ROOT / "simulations" / "fleets" / "default.toml"
    r = run_cli("simulate", "--fleet", str(fleet), "--engine", "direct", "--run-dir", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    state = rs.read_state(out)
    assert state["finished"] is True and state["engine"] == "direct"
    assert state["fleet_sha256"] == rs.fleet_sha256(fleet)
    assert list(state["devices"]) == [row["device"] for row in report["devices"]]
    for row in report["devices"]:
        e = state["devices"][row["device"]]
        assert e["status"] == row["status"] and e["row"] == row
        assert e["progress"]["samples"] == (row["samples"] or 0.0)
        assert e["progress"]["energy_j"] == (row["energy_j"] or 0.0)
    assert state["completed_rounds"] == [{"round": 1, "totals": report["fleet"]}]
    assert sorted(p for p in os.listdir(out) if p.startswith(".")) == []  # no temp left
    s = run_cli("status", str(out), "--json")
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["summary"]["status_counts"] == report["fleet"]["status_counts"]


def test_direct_engine_state_goes_pending_then_final_per_device(tmp_path):
    """The direct engine's writer in process: after the first device, that device is final
    and the others still pending (writes every time here: every_s=0)."""
    from fleet.config.fleetfile import load_fleet
    from fleet.rounds.virtual_clock import cached_efficiency, simulate_device
    from simulations.runner import StateWriter

    fleet = load_fleet(ROOT / "simulations" / "fleets" / "default.toml")
    writer = StateWriter(fleet, tmp_path, every_s=0.0)
    first = rs.read_state(tmp_path)
    assert {e["status"] for e in first["devices"].values()} == {"pending"}
    assert first["finished"] is False
    spec = fleet.devices[0]
    row = simulate_device(spec, cached_efficiency(fleet.run.efficiency), fleet.run).to_dict()
    writer.finished_device(row)
    now = rs.read_state(tmp_path)["devices"]
    assert now[spec.name]["status"] == row["status"] == "ok"
    assert now[spec.name]["progress"]["time_s"] == row["time_s"]
    assert {now[d.name]["status"] for d in fleet.devices[1:]} == {"pending"}


def test_follow_on_a_terminal_redraws_until_finished(run_dir):
    """stdout a terminal (a pty): the table is redrawn in place (rich Live), and the follow
    still ends with exit 0 once the state says finished."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "status", str(run_dir), "--follow", "--interval", "0.05"],
        stdout=slave,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=dict(os.environ, COLUMNS="200", TERM="xterm"),
    )
    os.close(slave)
    seen = bytearray()
    got = threading.Condition()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            with got:
                seen.extend(chunk)
                got.notify_all()

    threading.Thread(target=drain, daemon=True).start()
    with got:
        assert got.wait_for(lambda: b"nano-1" in seen, HANG_GUARD_S), bytes(seen)
    state = rs.read_state(run_dir)
    state["finished"] = True
    rs.write_state(run_dir, state)
    rc = proc.wait(timeout=HANG_GUARD_S)
    err = proc.stderr.read().decode()
    assert rc == 0 and "Traceback" not in err, err
    with got:  # the last frame may still be in the terminal's buffer
        assert got.wait_for(lambda: b"finished" in seen, HANG_GUARD_S), bytes(seen)
    os.close(master)
