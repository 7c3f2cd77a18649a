"""Runs that say what happened (issue 31, finding 2): a run stopped before its end is
``interrupted`` (when, how far it got) in state.json, ``powerfleet status`` (table, --json),
metrics.prom and ``powerfleet report``, never ``running`` without a live writer.

Real subprocesses: ``python -m fleet simulate --engine direct`` on a two-device fleet (one
replayed device done at once, one that trains on noise for real and cannot finish before it is
stopped), stopped with SIGINT, SIGTERM or SIGKILL once its state.json shows the trainer at
work (a wait on the file's content, never a fixed sleep). Also: the liveness rule the round
state shares with the clock state (``fleet.method.liveness``), and a writer superseded by a
restarted coordinator (finding 10) that can no longer overwrite the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from fleet.agent.data.imagefiles import write_idx
from fleet.method import liveness
from fleet.reports import roundstate, runlife
from tests.test_learning import HEADER

ROOT = Path(__file__).resolve().parents[1]
GUARD_S = 240.0  # a hang guard: turns a hang into a failure naming what did not happen

FLEET = """
[run]
name = "stopme"
model = "small_cnn"
efficiency = "eff.csv"
target_accuracy = 0.95
lr_ref_batch = 32
lr_ref = 0.002
eval_every_samples = 64
max_samples = 10000000

[[devices]]
name = "quick"
type = "jetson-nano"
budget_w = 5.0
profile = "p.csv"
data = "eff.csv"

[[devices]]
name = "trainer"
type = "jetson-nano"
budget_w = 5.0
profile = "p.csv"
data = "noise"
learning = "train"
"""


def fleet_file(tmp: Path) -> Path:
    """A replay device done in milliseconds, then one that trains on random labels: it never
    reaches 95% (chance is 50%), so it runs until stopped."""
    rng = np.random.default_rng(0)
    (tmp / "noise").mkdir()
    write_idx(
        str(tmp / "noise" / "images-idx3-ubyte.gz"),
        rng.integers(0, 255, (400, 12, 12), dtype=np.uint8),
    )
    write_idx(str(tmp / "noise" / "labels-idx1-ubyte.gz"), rng.integers(0, 2, 400, dtype=np.uint8))
    (tmp / "p.csv").write_text(
        HEADER + "\n"
        "8,307.2,0.08,4.0,3.0,jetson-nano\n8,614.4,0.05,5.5,4.5,jetson-nano\n"
        "32,307.2,0.20,4.6,4.0,jetson-nano\n32,614.4,0.12,6.5,5.5,jetson-nano\n"
    )
    (tmp / "eff.csv").write_text("batch_size,samples_to_accuracy\n8,800\n32,1600\n")
    path = tmp / "fleet.toml"
    path.write_text(FLEET)
    return path


def default_signals() -> None:
    """In the child: SIGINT as a terminal would deliver it. A test run started in the
    background by a shell without job control inherits SIGINT ignored, and Python then never
    raises KeyboardInterrupt: the interrupt under test would not arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_simulate(engine: str, fleet: str, run_dir: Path, quiet: bool = False) -> subprocess.Popen:
    """``powerfleet simulate`` as a child this test will signal (SIGINT at its default)."""
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "fleet", "simulate", "--engine", engine]
        + ["--fleet", fleet, "--run-dir", str(run_dir)],
        stdout=out,
        stderr=out,
        text=True,
        env=env(),
        preexec_fn=default_signals,
        cwd=str(ROOT),
    )


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        capture_output=True,
        text=True,
        env=env(),
        cwd=str(ROOT),
        timeout=GUARD_S,
    )


def read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def start_and_wait_for_the_trainer(tmp: Path) -> tuple[subprocess.Popen, Path]:
    """``simulate --engine direct`` started; returns once its state.json (written by it) shows
    the replayed device done and the trainer running."""
    run_dir = tmp / "run"
    proc = start_simulate("direct", str(fleet_file(tmp)), run_dir)
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        s = read(run_dir / "state.json") or {}
        d = s.get("devices") or {}
        if (
            (s.get("writer") or {}).get("pid") == proc.pid
            and (d.get("quick") or {}).get("status") == "ok"
            and (d.get("trainer") or {}).get("status") == "running"
        ):
            return proc, run_dir
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the trainer never showed running (exit {proc.returncode}): {err}")


def stop(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"simulate did not stop on signal {sig}") from None
    return proc.returncode, err


def assert_interrupted_everywhere(run_dir: Path, reason: str) -> None:
    """state.json, status (table and --json), metrics.prom and report all say interrupted."""
    state = read(run_dir / "state.json")
    assert state["finished"] is False
    stop_ = state["interrupted"]
    assert reason in stop_["reason"]
    assert stop_["devices"] == 2 and stop_["devices_done"] == 1
    quick = state["devices"]["quick"]
    assert quick["status"] == "ok" and quick["progress"]["samples"] > 0
    assert stop_["samples"] == pytest.approx(quick["progress"]["samples"])
    trainer = state["devices"]["trainer"]
    assert trainer["status"] == "interrupted"
    assert "interrupted at" in trainer["message"] and "last progress" in trainer["message"]

    got = cli("status", str(run_dir), "--json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["summary"]["run_status"] == "interrupted"
    assert doc["summary"]["status_counts"] == {"ok": 1, "interrupted": 1}
    table = cli("status", str(run_dir))
    assert table.returncode == 0 and "interrupted" in table.stdout.splitlines()[0]
    assert "1 of 2 devices done" in table.stdout and "running" not in table.stdout

    prom = (run_dir / "metrics.prom").read_text()
    assert 'powerfleet_run_status{run="stopme",status="interrupted"} 1' in prom
    assert 'powerfleet_run_status{run="stopme",status="running"} 0' in prom
    assert 'device="trainer",device_type="jetson-nano",status="interrupted"} 1' in prom

    rep = cli("report", str(run_dir))
    assert rep.returncode == 1, rep.stderr
    lines = rep.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in rep.stderr, rep.stderr
    assert "interrupted at" in lines[0] and "missing: the final rows of 1 of 2 devices" in lines[0]
    assert "report.json" not in lines[0]
    md = (run_dir / "report.md").read_text()
    assert "Incomplete: the run is interrupted" in md
    assert "| quick |" in md and "| trainer |" in md and "| interrupted |" in md
    assert not (run_dir / "report.json").exists()  # report.json means a finished run

    fleet = state["fleet_file"]
    again = cli("simulate", "--engine", "direct", "--fleet", fleet, "--run-dir", str(run_dir))
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "does not resume" in again.stderr, again.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_is_recorded_by_the_run_itself(tmp_path, sig):
    proc, run_dir = start_and_wait_for_the_trainer(tmp_path)
    code, err = stop(proc, sig)
    assert code == 128 + sig
    assert "Traceback" not in err
    (line,) = [w for w in err.splitlines() if w.strip()]
    assert line.startswith("powerfleet simulate: interrupted: interrupted at ")
    assert "1 of 2 devices done" in line and str(run_dir) in line
    # recorded by the writer itself, before it exited: a reader has nothing to add
    state = read(run_dir / "state.json")
    assert state["writer"]["pid"] == proc.pid
    assert state["interrupted"]["reason"] == signal.Signals(sig).name
    assert_interrupted_everywhere(run_dir, signal.Signals(sig).name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_writer_is_found_gone_by_its_readers(tmp_path):
    proc, run_dir = start_and_wait_for_the_trainer(tmp_path)
    before = read(run_dir / "state.json")
    code, _ = stop(proc, signal.SIGKILL)
    assert code == -signal.SIGKILL
    state = read(run_dir / "state.json")
    assert state == before and state.get("interrupted") is None  # nobody said anything yet
    assert 'status="running"} 1' in (run_dir / "metrics.prom").read_text()
    got = cli("status", str(run_dir))  # finds the writer gone, says so and writes it down
    assert got.returncode == 0, got.stderr
    assert "interrupted" in got.stdout.splitlines()[0]
    state = read(run_dir / "state.json")
    assert state["interrupted"]["at_utc"] == before["updated_utc"]  # its last sign of life
    assert_interrupted_everywhere(run_dir, f"pid {proc.pid}")


# ------------------------------------------------------------------------ the liveness rule


def sleeper(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *argv])


def test_liveness_self_alive_gone_elsewhere():
    assert liveness.holder(liveness.process_identity()) == liveness.SELF
    proc = sleeper()
    try:
        record = liveness.process_identity(proc.pid, with_host=True)
        assert liveness.holder(record) == liveness.ALIVE
        assert liveness.holder({**record, "host": record["host"] + "-x"}) == liveness.ELSEWHERE
        assert liveness.holder({**record, "pid_start": "1"}) == liveness.GONE  # a reused pid
        proc.kill()
        proc.wait()
        assert liveness.holder(record) == liveness.GONE
    finally:
        proc.kill()
        proc.wait()


def small_state() -> dict:
    return roundstate.new_state(
        "r", "f.toml", "0" * 64, "flower", "t", 1, 600.0, [("a", "jetson-nano", 5.0)]
    )


WRITE = (
    "import sys, time; from fleet.reports import roundstate as r;"
    "s = r.read_state(sys.argv[1]); s['round'] = 1; r.write_state(sys.argv[1], s);"
    "print('written', flush=True); time.sleep(120)"
)


def test_a_superseded_writer_cannot_overwrite_the_run(tmp_path):
    """Finding 10's cause: the ServerApp of a killed coordinator, orphaned (its dead SuperLink
    unreaped, so Flower's parent watch never fires), reconnected to the restarted SuperLink
    and finished the round under the old run token after the new run had taken over, so the
    new run's report was the old one's in 1 of 2 runs. Now the first write of another live
    process takes the run over, and the old writer's next write (state or report) refuses."""
    state = small_state()
    roundstate.write_state(tmp_path, state)  # this process: the old writer
    new = subprocess.Popen(
        [sys.executable, "-c", WRITE, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert new.stdout.readline().strip() == "written"
        assert roundstate.read_state(tmp_path)["writer"]["pid"] == new.pid
        with pytest.raises(runlife.Superseded, match=f"process {new.pid}"):
            roundstate.write_state(tmp_path, state)
        with pytest.raises(runlife.Superseded):
            runlife.still_writer(tmp_path / "state.json")  # what the ServerApp asks first
        assert roundstate.read_state(tmp_path)["writer"]["pid"] == new.pid
    finally:
        new.kill()
        new.wait()
    roundstate.write_state(tmp_path, state)  # the new one is gone: nobody to defer to


def test_a_restarted_coordinator_stops_an_orphaned_serverapp_first(tmp_path):
    """``powerfleet coordinator`` on a run directory whose writer is a live ServerApp (one left
    by a killed coordinator) stops it before starting anything; a live writer that is no
    ServerApp is refused in one line."""
    from deployment.deploy import stop_previous_writer
    from fleet.common.errors import InputError

    orphan = sleeper("flwr-serverapp")  # its command line names it as Flower's would
    other = sleeper("something-else")
    try:
        state = small_state()
        state["writer"] = liveness.process_identity(orphan.pid, with_host=True)
        stop_previous_writer(tmp_path, state, timeout_s=20.0)
        assert orphan.wait(timeout=30) == -signal.SIGTERM
        state["writer"] = liveness.process_identity(other.pid, with_host=True)
        with pytest.raises(InputError, match=f"live process \\(pid {other.pid}"):
            stop_previous_writer(tmp_path, state)
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


# ------------------------------------------------------------------------ the flower engine


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_flower_engine_interrupted_then_resumed(tmp_path):
    """``simulate --engine flower`` stopped with SIGINT once its ServerApp has reported
    progress: one line, exit 130, the run ``interrupted`` in its state with how far it got;
    run again on the same run directory, it resumes and ends on the direct engine's rows."""
    from tests.fault_helpers import fleet_of_replay_devices, reference_devices

    ref = reference_devices()
    devices = [dict(ref[i], name=f"dev-{k}") for k, i in enumerate((0, 1), start=1)]
    fleet = str(fleet_of_replay_devices(tmp_path, 0, extra_devices=devices))
    run_dir = tmp_path / "run"
    proc = start_simulate("flower", fleet, run_dir)
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline and proc.poll() is None:
        s = read(run_dir / "state.json") or {}
        segs = [(e.get("progress") or {}).get("segments", 0) for e in s.get("devices", {}).values()]
        if segs and min(segs) >= 1 and not s.get("finished"):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    code, err = stop(proc, signal.SIGINT)
    assert code == 130 and "Traceback" not in err, err
    (line,) = [w for w in err.splitlines() if w.strip()]
    assert line.startswith("powerfleet simulate: interrupted: interrupted at ")
    assert "0 of 2 devices done" in line
    state = read(run_dir / "state.json")
    assert state["finished"] is False and state["interrupted"]["samples"] > 0
    assert {e["status"] for e in state["devices"].values()} == {"interrupted"}
    doc = json.loads(cli("status", str(run_dir), "--json").stdout)
    assert doc["summary"]["run_status"] == "interrupted"

    again = cli("simulate", "--engine", "flower", "--fleet", fleet, "--run-dir", str(run_dir))
    assert again.returncode == 0, again.stderr
    report = json.loads((run_dir / "report.json").read_text())
    direct = cli("simulate", "--engine", "direct", "--fleet", fleet, "--run-dir",
                 str(tmp_path / "direct"), "--json")  # fmt: skip
    want = {r["device"]: r for r in json.loads(direct.stdout)["devices"]}
    for row in report["devices"]:
        assert row["status"] == want[row["device"]]["status"] == "ok"
        for key in ("samples", "time_s", "energy_j"):
            assert row[key] == pytest.approx(want[row["device"]][key], rel=1e-9), key
    state = read(run_dir / "state.json")
    assert state["finished"] is True and state.get("interrupted") is None


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_killed_flower_simulation_leaves_no_run_going_on(tmp_path):
    """``simulate --engine flower`` SIGKILLed: the local SuperLink and ``flwr run`` it started
    die with it (and the simulation with the SuperLink), so nothing goes on writing the run, and its
    readers find it ``interrupted`` (or finished, if the simulation completed the round on its
    way out), never ``running`` forever."""
    from deployment.processes import descendants
    from fleet.method import liveness
    from tests.fault_helpers import cmdline, fleet_of_replay_devices, reference_devices

    ref = reference_devices()
    devices = [dict(ref[0], name="dev-1")]
    fleet = str(fleet_of_replay_devices(tmp_path, 0, extra_devices=devices))
    run_dir = tmp_path / "run"
    proc = start_simulate("flower", fleet, run_dir, quiet=True)
    deadline = time.monotonic() + GUARD_S
    state: dict = {}
    while time.monotonic() < deadline and proc.poll() is None:
        state = read(run_dir / "state.json") or {}
        if state.get("devices") and not state.get("finished"):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    writer = state["writer"]
    tree = descendants(proc.pid)
    links = [p for p in tree if "flower-superlink" in cmdline(p)]
    assert links, "no local SuperLink below simulate"
    # `flwr run --stream` too: left running, its log stream held the SuperLink open a minute
    runs = [p for p in tree if " run " in cmdline(p) and "flwr" in cmdline(p)]
    assert runs, "no flwr run below simulate"
    database = cmdline(links[0]).split("--database ")[1].split()[0]  # in simulate's Flower home
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline and any(liveness.proc_start(p) for p in links + runs):
        time.sleep(0.2)
    assert not any(liveness.proc_start(p) for p in runs), "flwr run outlived simulate"
    assert not any(liveness.proc_start(p) for p in links), "the SuperLink outlived simulate"
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline and liveness.holder(writer) == liveness.ALIVE:
        time.sleep(0.2)
    assert liveness.holder(writer) == liveness.GONE, "the ServerApp outlived simulate"
    # its private Flower home stayed behind (nothing alive could remove it); the next
    # simulation's start removes it, and leaves a live one's and an unowned one alone
    from simulations.flower_engine import OWNER, sweep_homes

    home = Path(database).parent.parent  # (a simulation another test starts now may sweep it)
    assert not home.exists() or (home / OWNER).is_file()
    mine = Path(tempfile.mkdtemp(prefix="powerfleet-flwr-", dir=home.parent))
    (mine / OWNER).write_text(json.dumps(liveness.process_identity()))
    unowned = Path(tempfile.mkdtemp(prefix="powerfleet-flwr-", dir=home.parent))
    try:
        sweep_homes()
        assert not home.exists() and mine.is_dir() and unowned.is_dir()
    finally:
        shutil.rmtree(mine)
        shutil.rmtree(unowned)
    # Flower's simulation runs the round in its own process, SuperLink or not, and may finish
    # it on its way out: the run then says finished (true); else interrupted; never running
    got = cli("status", str(run_dir), "--json")
    status = json.loads(got.stdout)["summary"]["run_status"]
    assert status in ("interrupted", "finished"), got.stderr
    assert f'status="{status}"}} 1' in (run_dir / "metrics.prom").read_text()
