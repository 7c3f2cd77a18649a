"""`powerfleet doctor` on every board row's virtual tree: what it says equals what the tree holds.

The survey is read-only, so the tests also check that nothing under the tree changed and no
state file appeared; and after a run was SIGKILLed with its clocks locked, doctor reports the
saved state as left by a process that is gone (the next start restores it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.cli import main
from simulations.virtual_boards import ROW_KEYS
from simulations.virtual_jetson import build_board, wait_for

REPO = Path(__file__).resolve().parents[1]


def doctor(capsys, root: Path, *extra: str) -> dict:
    assert main(["doctor", "--sysfs-root", str(root), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                out[p] = Path(p).read_text()
            except (OSError, UnicodeDecodeError):
                out[p] = "<unreadable>"
    return out


@pytest.mark.parametrize("key", ROW_KEYS)
def test_doctor_reports_each_rows_board_clocks_and_power(tmp_path, capsys, key):
    board = build_board(tmp_path, key)
    before = snapshot(tmp_path)
    rep = doctor(capsys, tmp_path)
    assert snapshot(tmp_path) == before  # read-only
    b = rep["board"]
    assert b["type"] == key and b["jetpack"] == board.spec.jetpack
    assert b["kernel_rules"] == ("einval" if board.spec.jetpack == 4 else "pmqos")
    nodes = rep["gpu"]["nodes"]
    assert [n["name"] for n in nodes] == list(board.spec.nodes)
    assert nodes[0]["available_mhz"] == [h / 1e6 for h in board.freqs_hz]
    assert all(n["writable"] for n in nodes)
    power = rep["power"]
    if not board.spec.sensors:
        assert "no power sensor" in power["reason"]
        assert rep["ready"]["profile"] is False and rep["ready"]["train"] is True
        assert rep["ready"]["why_not_profile"] == [power["reason"]]
        return
    assert power["total_w"] == pytest.approx(board.power_w(), abs=1e-6)
    in_total = sorted(r["name"] for r in power["rails"] if r["in_total"])
    assert in_total == sorted(board.spec.row.total)
    assert rep["ready"] == {
        "profile": True, "train": True, "why_not_profile": [], "why_not_train": [], "notes": [],
    }  # fmt: skip
    assert rep["clock_state"]["saved"] is False


def test_doctor_sees_a_clamp_and_a_state_file_a_killed_run_left(tmp_path, capsys):
    board = build_board(tmp_path / "root", "jetson-orin-nx")
    state = tmp_path / "state"
    hz = board.freqs_hz
    child = (
        "import os, signal, sys\n"
        "from fleet.agent.devices.jetson import JetsonBackend\n"
        "b = JetsonBackend(sys.argv[1], state_dir=sys.argv[2])\n"
        "b.lock(float(sys.argv[3]))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with board.kernel(process=False, lag_s=0.0):
        r = subprocess.run(
            [sys.executable, "-c", child, str(board.root), str(state), str(hz[1] / 1e6)],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert r.returncode == -signal.SIGKILL, r.stderr
        rep = doctor(capsys, board.root, "--state-dir", str(state))
        assert rep["clock_state"]["saved"] is True and rep["clock_state"]["writer"] == "gone"
        assert rep["clock_state"]["nodes"][0]["max_freq"] == hz[-1]  # the original, not the lock
        assert rep["gpu"]["nodes"][0]["max_mhz"] == hz[1] / 1e6  # still pinned: doctor only reads
        assert any("crashed run" in n for n in rep["ready"]["notes"])
    board2 = build_board(tmp_path / "hot", "jetson-orin-nx")
    with board2.kernel(process=False, lag_s=0.0):
        board2.set_clamp(board2.freqs_hz[-3])  # a thermal clamp: max_freq reads the bound
        assert wait_for(lambda: board2.bounds()["max_freq"] == board2.freqs_hz[-3], 3)
        rep = doctor(capsys, board2.root)
    assert rep["gpu"]["nodes"][0]["below_table_top"] is True


def test_doctor_on_a_missing_root_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["doctor", "--sysfs-root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no sys/ directory" in err
