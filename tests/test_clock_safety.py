"""Crash-safe clocks and settling, against the virtual Jetson (real files, a kernel process).

Each test asserts what the devfreq files hold over time: a killed agent leaves the clock pinned
and the next start (or ``powerfleet restore``) brings the originals back without recording the
pinned values; a foreign state file is refused; a signal between the two writes of a pair cannot
leave a cap; no permission to write is one line and exit 2 with the clocks untouched; a profile
right after a lock measures at the new clock, not the old one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from clients.agent_link import AgentLink, agent_command
from fleet.agent.devices import DeviceError
from fleet.agent.devices.clockstate import STATE_FILE, default_state_dir
from fleet.agent.devices.guard import install_restore_handlers
from fleet.agent.devices.jetson import JetsonBackend
from simulations.virtual_jetson import build_board, wait_for
from tests.conftest import AGENT_GUARD_S, run_cli

REPO = Path(__file__).resolve().parents[1]
HZ_230 = 230400000


def agent_argv(root: Path, state: Path) -> list:
    return agent_command(backend="jetson", sysfs_root=str(root)) + ["--state-dir", str(state)]


CRASH = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    JetsonBackend(sysfs_root=sys.argv[1], state_dir=sys.argv[2]).lock(float(sys.argv[3]))
    os._exit(0)  # no exit path runs, as after SIGKILL
    """
).format(repo=str(REPO))

HOLD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    JetsonBackend(sysfs_root=sys.argv[1], state_dir=sys.argv[2]).lock(float(sys.argv[3]))
    print("locked", flush=True)
    sys.stdin.read()  # hold the clock until the test ends us (it never closes our stdin first)
    """
).format(repo=str(REPO))


def crash_locked(root: Path, state: Path, mhz: float) -> None:
    """A run that locks the clock and dies without restoring."""
    subprocess.run([sys.executable, "-c", CRASH, str(root), str(state), str(mhz)], check=True)


def start_child(
    script: str, board, state: Path, *args: str, stderr: int | None = subprocess.PIPE
) -> subprocess.Popen:
    """``python -c script BOARD_ROOT STATE_DIR *args``, stdin, stdout (and by default stderr)
    piped as text: the child says when it holds the clock, the test then signals or inspects
    it; a child that waits on its stdin lasts until the test says so, however fast it runs."""
    return subprocess.Popen(
        [sys.executable, "-c", script, str(board.root), str(state), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def end_child(proc: subprocess.Popen) -> None:
    """Kill a child still running (a failed test), and close its stdin: whatever it started
    that waits there ends too."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stdin.close()


def pinned(board, hz: int) -> bool:
    c = board.clocks()
    return c["min_freq"] == c["max_freq"] == hz


def test_default_state_dir_rules(tmp_path, monkeypatch):
    # A prefix other than / keeps its state inside the tree (never the real board's state).
    assert default_state_dir(str(tmp_path)) == str(tmp_path / "var/lib/powerfleet")
    if os.geteuid() == 0:
        assert default_state_dir("/") == "/var/lib/powerfleet"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    if os.geteuid() != 0:
        assert default_state_dir("/") == str(tmp_path / "xdg/powerfleet")


def test_state_file_written_before_first_write_and_removed_after_restore(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    before = board.bounds()
    b = JetsonBackend(str(board.root), state_dir=str(state))
    assert not (state / STATE_FILE).exists()
    b.lock(230.4)
    saved = json.loads((state / STATE_FILE).read_text())
    assert (saved["min_freq"], saved["max_freq"], saved["governor"]) == (
        before["min_freq"],
        before["max_freq"],
        before["governor"],
    )
    assert saved["devfreq"] == "57000000.gpu"
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    b.lock(614.4)  # the file keeps the originals, not the previous lock
    assert json.loads((state / STATE_FILE).read_text())["min_freq"] == before["min_freq"]
    b.restore()
    assert board.bounds() == before
    assert not (state / STATE_FILE).exists()


@pytest.mark.slow
def test_sigkill_leaves_pin_then_next_agent_start_restores(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    with board.kernel(process=True, lag_s=0.02):
        original = board.bounds()
        link = AgentLink(agent_argv(board.root, state), timeout_s=AGENT_GUARD_S).start()
        try:
            link.request("lock", freq_mhz=230.4)
            assert pinned(board, HZ_230)
            assert wait_for(lambda: board.clocks()["cur_freq"] == HZ_230, 3)
            link.proc.kill()  # SIGKILL: no exit path runs
            link.proc.wait(timeout=60)  # a hang guard
        finally:
            link.close(timeout_s=2)
        time.sleep(0.2)
        assert pinned(board, HZ_230)  # nothing could restore it...
        assert json.loads((state / STATE_FILE).read_text())["max_freq"] == original["max_freq"]

        # ...until the next start, which restores before reading anything as "original".
        link = AgentLink(agent_argv(board.root, state), timeout_s=AGENT_GUARD_S).start()
        try:
            link.request("hello")
            assert board.bounds() == original
            assert not (state / STATE_FILE).exists()
            link.request("lock", freq_mhz=614.4)
            again = json.loads((state / STATE_FILE).read_text())
            assert (again["min_freq"], again["max_freq"]) == (
                original["min_freq"],
                original["max_freq"],
            )  # not the pinned 230.4 MHz of the killed run
            link.proc.kill()
            link.proc.wait(timeout=60)  # a hang guard
        finally:
            link.close(timeout_s=2)
        assert any("restored GPU clocks of 57000000.gpu" in line for line in link._stderr)
        assert pinned(board, 614400000)

        r = run_cli("restore", "--sysfs-root", str(board.root), "--state-dir", str(state), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["restored"] is True and out["devfreq"] == "57000000.gpu"
        assert "restored GPU clocks of 57000000.gpu" in r.stderr
        assert board.bounds() == original
        assert not (state / STATE_FILE).exists()
        # the governor's range is back: idle, the clock falls to the floor again
        assert wait_for(lambda: board.clocks()["cur_freq"] == original["min_freq"], 3)

        r = run_cli("restore", "--sysfs-root", str(board.root), "--state-dir", str(state))
        assert r.returncode == 0 and "nothing to restore" in r.stderr


def test_agent_start_says_it_restored(tmp_path):
    board = build_board(tmp_path / "root", "tx2nx")
    state = tmp_path / "state"
    original = board.bounds()
    crash_locked(board.root, state, 318.75)
    proc = subprocess.run(
        [*agent_argv(board.root, state)],
        input=json.dumps({"id": 1, "cmd": "shutdown"}) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stderr
    assert "restored GPU clocks of 17000000.gp10b" in proc.stderr
    assert board.bounds() == original


def test_foreign_state_file_is_refused(tmp_path):
    nano = build_board(tmp_path / "nano", "nano")
    tx2 = build_board(tmp_path / "tx2", "tx2nx")
    state = tmp_path / "state"
    crash_locked(nano.root, state, 230.4)
    tx2_before = tx2.bounds()
    saved = (state / STATE_FILE).read_text()

    r = run_cli("restore", "--sysfs-root", str(tx2.root), "--state-dir", str(state))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(state / STATE_FILE) in lines[0] and "another board" in lines[0]
    assert "57000000.gpu" in lines[0] and "17000000.gp10b" in lines[0]
    assert tx2.bounds() == tx2_before
    assert (state / STATE_FILE).read_text() == saved  # kept for its own board

    # the agent refuses to start on it as well, and locks nothing
    proc = subprocess.run(
        agent_argv(tx2.root, state), input="", capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert proc.returncode == 2 and "another board" in proc.stderr
    assert tx2.bounds() == tx2_before

    # its own board takes it back
    with pytest.raises(DeviceError):
        JetsonBackend(str(tx2.root), state_dir=str(state))
    JetsonBackend(str(nano.root), state_dir=str(state))
    assert not pinned(nano, HZ_230) and not (state / STATE_FILE).exists()


def test_a_running_holder_is_not_robbed_and_a_second_backend_adopts(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    original = board.bounds()
    proc = start_child(HOLD, board, state, "230.4", stderr=None)
    try:
        assert proc.stdout.readline().strip() == "locked"
        r = run_cli("restore", "--sysfs-root", str(board.root), "--state-dir", str(state))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
        assert f"held by running process {proc.pid}" in r.stderr
        assert pinned(board, HZ_230)  # the live run keeps its clock
    finally:
        end_child(proc)  # it holds the clock until killed
    # now it is gone: the same command repairs the board
    r = run_cli("restore", "--sysfs-root", str(board.root), "--state-dir", str(state))
    assert r.returncode == 0 and board.bounds() == original

    # two backends in one process: the second adopts the first's originals, never the pin
    first = JetsonBackend(str(board.root), state_dir=str(state))
    first.lock(230.4)
    second = JetsonBackend(str(board.root), state_dir=str(state))
    assert second.recovered is None and pinned(board, HZ_230)
    second.lock(614.4)
    second.restore()
    assert board.bounds() == original and not (state / STATE_FILE).exists()


def test_damaged_state_file_is_one_line(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    state.mkdir()
    (state / STATE_FILE).write_text("{not json")
    r = run_cli("restore", "--sysfs-root", str(board.root), "--state-dir", str(state))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "damaged" in r.stderr and str(state / STATE_FILE) in r.stderr


class SignalInsideFirstWrite(JetsonBackend):
    """Sends itself a real SIGTERM inside the first write of a lock: after ``write``, before the
    ``close`` that flushes it, which is where a supervisor's signal landed in the field."""

    fired = False

    def _write(self, attr, value):
        if self.fired or attr != "max_freq" or self._originals is None:
            return super()._write(attr, value)
        self.fired = True
        path = self._path(attr)
        with open(path, "w") as fh:
            fh.write(str(value))
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # every chance for the handler to run right here
        self.writes.append((path, str(value)))


def test_sigterm_between_the_two_writes_leaves_no_cap(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    original = board.bounds()
    b = SignalInsideFirstWrite(str(board.root), state_dir=str(state))
    uninstall = install_restore_handlers(b)
    try:
        with pytest.raises(SystemExit) as exc:
            b.lock(230.4)  # raising the floor from 76.8: max (921.6 -> 230.4) goes first
        assert exc.value.code == 143
        # The handler ran after the pair: the lock completed, then the restore undid it.
        assert [os.path.basename(p) for p, _ in b.writes[:2]] == ["max_freq", "min_freq"]
        assert board.bounds() == original
        assert not (state / STATE_FILE).exists()
    finally:
        uninstall()


STRESS_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    from fleet.agent.devices.guard import install_restore_handlers, start_prompt_restore
    from fleet.agent.measure.sampler import PowerSampler
    b = JetsonBackend(sysfs_root=sys.argv[1], state_dir=sys.argv[2])
    install_restore_handlers(b)
    start_prompt_restore(b)
    PowerSampler(b.read_power_w, hz=200).start()  # a second thread, as in a real run
    print("ready", flush=True)
    while True:
        for f in (76.8, 921.6, 230.4, 614.4):
            b.lock(f)
    """
).format(repo=str(REPO))


@pytest.mark.slow
def test_sigterm_at_random_moments_of_relocking_always_restores(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    original = board.bounds()
    for trial in range(6):
        proc = start_child(STRESS_CHILD, board, state)
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.05 + 0.037 * trial)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=20)
        finally:
            end_child(proc)
        assert rc in (143, -15), proc.stderr.read()
        assert board.bounds() == original, f"trial {trial}"
        assert not (state / STATE_FILE).exists()


LONG_STEP_CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    from fleet.agent.devices.guard import install_restore_handlers, start_prompt_restore
    b = JetsonBackend(sysfs_root=sys.argv[1], state_dir=sys.argv[2])
    install_restore_handlers(b)
    start_prompt_restore(b, grace_s=60)
    b.lock(230.4)
    print("locked", flush=True)
    # The step: one long C call that releases the GIL, like a CUDA step at 76.8 MHz: Python
    # handlers cannot run until it returns. system() waits for its shell however often it is
    # interrupted; the shell says "stepping" once the call has begun and ends when the test
    # writes a line, so the step lasts as long as the test needs, on any machine.
    os.system("echo stepping; read line; echo step ended >&2")
    print("after the step", flush=True)  # never: the handler runs as the step returns
    """
).format(repo=str(REPO))


def test_sigterm_mid_step_restores_before_the_step_ends(tmp_path):
    board = build_board(tmp_path / "root", "nano")
    state = tmp_path / "state"
    original = board.bounds()
    proc = start_child(LONG_STEP_CHILD, board, state)
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert pinned(board, HZ_230)
        assert proc.stdout.readline().strip() == "stepping"  # the main thread is in the step
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: board.bounds() == original, 30, 0.005)  # a hang guard
        in_step = proc.poll() is None  # the step cannot end before the line below
        proc.stdin.write("go\n")
        proc.stdin.flush()
        rc = proc.wait(timeout=60)
    finally:
        end_child(proc)
    err = proc.stderr.read()
    assert in_step, err  # restored while the step was still running
    assert rc in (143, -15), err
    assert "device clocks restored" in err and "step ended" in err
    assert proc.stdout.read() == ""  # the handler ended it as the step returned
    assert not (state / STATE_FILE).exists()


AS_NOBODY = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    # Import what the command needs while still root (the interpreter may live under /root),
    # then drop to 'nobody' for good before it touches the board.
    import torch
    import fleet.agent.devices.jetson, fleet.agent.models.registry
    import fleet.agent.measure.profiler, fleet.agent.measure.sampler
    import fleet.agent.measure.staircase, fleet.agent.prediction.predict
    import fleet.agent.measure.measurers, fleet.agent.measure.profile_writer
    import fleet.agent.prediction.design, fleet.agent.prediction.fit
    from fleet.agent.models import registry as models
    from fleet.cli import build_parser, main
    build_parser()
    m = models.build_model("small_cnn", 10, (1, 8, 8))
    opt = torch.optim.Adam(m.parameters())
    x, y = models.make_batch("small_cnn", 2, (1, 8, 8), 10, 0, "cpu")
    models.loss_fn(m(x), y).backward()
    opt.step()
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    sys.exit(main(sys.argv[1:]))
    """
).format(repo=str(REPO))


def _others_can_enter(path: Path) -> bool:
    """Every directory from / down to ``path`` lets other users through (o+x)."""
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


@pytest.mark.slow
def test_no_permission_is_one_line_exit_2_clocks_untouched():
    """A real EACCES: the command runs as 'nobody' on a root-owned tree (tests run as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the command as another user")
    for where in (REPO, Path(sys.prefix)):
        if not _others_can_enter(where):  # 'nobody' could not import what loads lazily
            pytest.skip(f"{where} is closed to other users (a private checkout or venv)")
    base = Path(tempfile.mkdtemp(prefix="pf-perm-"))
    try:
        os.chmod(base, 0o755)
        board = build_board(base / "root", "nano")
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
        state = base / "state"
        state.mkdir()
        os.chmod(state, 0o777)
        before = board.bounds()
        r = subprocess.run(
            [
                sys.executable, "-c", AS_NOBODY, "profile", "--backend", "jetson",
                "--sysfs-root", str(board.root), "--state-dir", str(state / "pf"),
                "--model", "small_cnn", "--input-shape", "1x8x8", "--batch-sizes", "2",
                "--steps", "1", "--warmup", "0", "--device", "cpu",
                "--out", str(state / "out.csv"),  # writable: the clocks are what is refused
            ],
            capture_output=True, text=True, timeout=120, cwd=str(base),
            env=dict(os.environ, HOME=str(state)),
        )  # fmt: skip
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "cannot write {}: permission denied".format(board.node / "max_freq") in lines[0]
        assert board.bounds() == before
        assert not (state / "pf" / STATE_FILE).exists()  # nothing changed, nothing to restore
        assert not (state / "out.csv").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


class RecordingBackend(JetsonBackend):
    """Records when each write pair began and when each wait for the clock ended (this host's
    monotonic clock, the one the kernel stand-in's lag runs on)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = []

    def _set_bounds(self, new_min, new_max):
        self.events.append(("write", new_max, time.monotonic()))
        super()._set_bounds(new_min, new_max)

    def wait_settled(self, timeout_s=None):
        ok = super().wait_settled(timeout_s)
        self.events.append(("settled", ok, time.monotonic()))
        return ok


@pytest.mark.slow
@pytest.mark.parametrize("settle_timeout_s,lag_s,settled", [(60.0, 0.3, True), (0.0, 10.0, False)])
def test_settling_drops_samples_taken_before_the_clock_arrived(
    tmp_path, settle_timeout_s, lag_s, settled
):
    """cur_freq lags each lock by ``lag_s``; a 1-step window with --warmup 0 is shorter.

    Waiting for the clock puts every sample at the locked clock; not waiting (timeout 0, the old
    behaviour) measures the previous clock's power, which is the staircase error of issue 10.
    There the lag is 10 s, so the window opens before the clock moves however slowly this
    machine gets to it; with the wait, the timeout (10 s) is only a hang guard.
    """
    from tests.hardware_helpers import sweep

    board = build_board(tmp_path / "root", "nano", workload="small_cnn")
    freqs = (76.8, 921.6)
    with board.kernel(process=True, load=8, lag_s=lag_s):
        assert wait_for(lambda: board.clocks()["cur_freq"] == max(board.freqs_hz), 5)
        b = RecordingBackend(
            str(board.root), state_dir=str(tmp_path / "s"), settle_timeout_s=settle_timeout_s
        )
        result = sweep(
            b, "small_cnn", "1x8x8", batch_sizes=[2], freqs=freqs, steps=1, warmup=0,
            sampler_hz=100, min_window_s=0.05,
        )  # fmt: skip
    assert [r["freq_mhz"] for r in result.rows] == [76.8, 921.6]
    for row in result.rows:
        own = board.model_power_w(round(row["freq_mhz"] * 1e6), 8)
        other_f = freqs[1] if row["freq_mhz"] == freqs[0] else freqs[0]
        other = board.model_power_w(round(other_f * 1e6), 8)
        assert abs(own - other) > 0.5  # the two clocks are far apart in power
        if settled:
            assert row["peak_power_w"] == pytest.approx(own, abs=0.002)
            assert row["mean_power_w"] == pytest.approx(own, abs=0.002)
        elif row["freq_mhz"] == freqs[0]:
            # the window opened before the clock moved: its first samples are the previous
            # (921.6 MHz) clock's power, and that is what the profile would record as the peak
            assert row["peak_power_w"] == pytest.approx(other, abs=0.002)
    if settled:
        # each wait ended once the clock arrived, never before the lag from its lock's write
        waits = [
            (ok, t - prev[2])
            for prev, (kind, ok, t) in zip(b.events, b.events[1:], strict=False)
            if kind == "settled" and prev[0] == "write"
        ]
        assert len(waits) == 2 and all(ok and dt >= lag_s - 1e-3 for ok, dt in waits), waits
        assert b.settle_s is not None and b.settle_s > 0


def test_agent_sigterm_restores_and_exits_143(tmp_path):
    board = build_board(tmp_path / "root", "orin")
    state = tmp_path / "state"
    original = board.bounds()
    link = AgentLink(
        agent_argv(board.root, state), timeout_s=AGENT_GUARD_S, close_timeout_s=2
    ).start()
    try:
        link.request("lock", freq_mhz=612.0)
        assert pinned(board, 612000000) and (state / STATE_FILE).exists()
        link.proc.send_signal(signal.SIGTERM)
        rc = link.proc.wait(timeout=20)
    finally:
        link.close()
    assert rc == 143
    # (whether the watcher thread or the main thread's handler got there first varies)
    assert board.bounds() == original and not (state / STATE_FILE).exists()
