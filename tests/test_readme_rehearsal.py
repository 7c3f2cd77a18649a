"""The README's board-owner rehearsal on a virtual board runs as written.

Why: a walk-through nobody runs drifts from the commands it names, and a board owner pastes it
before the board arrives. This test takes the ``bash`` block under the README's rehearsal
marker and runs it, unchanged, with bash (``powerfleet`` and ``python`` are this checkout's),
then checks what it claims: doctor says virtual, the profile and the run say ``source=virtual``
with the host, the run followed its schedule's budgets, the run killed with its clock locked
left saved clocks that ``restore`` put back, and the clocks end where the board started.
"""

import csv
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.virtual_boards import board_spec
from tests.hardware_helpers import TRAIN_ENV

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- rehearsal: tests/test_readme_rehearsal.py runs this block as written -->"


def rehearsal_block() -> str:
    """The bash block right under the marker."""
    text = (ROOT / "README.md").read_text()
    assert text.count(MARKER) == 1, "the README has no (or more than one) rehearsal marker"
    after = text.split(MARKER, 1)[1].lstrip("\n")
    assert after.startswith("```bash\n"), "the marker must sit right above a ```bash block"
    return after[len("```bash\n") :].split("\n```", 1)[0] + "\n"


def _bin(tmp: Path) -> Path:
    """``powerfleet`` and ``python`` as this checkout's, first on PATH."""
    tmp.mkdir()
    for name, run in (("powerfleet", f"{sys.executable} -m fleet"), ("python", sys.executable)):
        path = tmp / name
        path.write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return tmp


def test_the_block_is_the_board_owners_path():
    block = rehearsal_block()
    steps = (
        "virtual_jetson build", "virtual_jetson kernel", "powerfleet doctor",
        "powerfleet profile", "--budget-schedule", "kill -9", "powerfleet restore",
    )  # fmt: skip
    for step in steps:
        assert step in block, step


@pytest.mark.slow
def test_the_readme_rehearsal_runs_as_written(tmp_path):
    env = dict(TRAIN_ENV, VBOARD=str(tmp_path / "vboard"), COLUMNS="200")
    env["PATH"] = f"{_bin(tmp_path / 'bin')}{os.pathsep}{env.get('PATH', '')}"
    prep = subprocess.run(
        ["powerfleet", "data", "prepare", "mnist-5k"], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if prep.returncode != 0:
        pytest.skip(f"mnist-5k cannot be prepared here (offline?): {prep.stderr.strip()[-200:]}")
    # the harness's own lines: stop at the first failing command, never leave the kernel behind
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
    r = subprocess.run(
        ["bash", "-c", script + rehearsal_block()], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=570,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    board = tmp_path / "vboard"
    out = " ".join(r.stdout.split())
    assert f"virtual board (jetson-nano) on host {socket.gethostname()}" in out
    # the profile: every row and its header say virtual and the host
    with open(board / "profile.csv") as fh:
        lines = fh.read().splitlines()
    header = dict(line[2:].split("=", 1) for line in lines if line.startswith("# ") and "=" in line)
    assert header["source"] == "virtual" and header["host"].startswith(socket.gethostname())
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert rows and {row["source"] for row in rows} == {"virtual"}
    # the scheduled run: virtual, on this host, under the schedule's budgets
    run = json.loads((board / "run" / "run.json").read_text())
    assert run["source"] == "virtual" and run["host"].startswith(socket.gethostname())
    budgets = [s["budget_w"] for s in run["segments"]]
    assert budgets[0] == 1.5 and set(budgets) <= {1.5, 1.4}
    assert run["samples"] <= 400 + 8 and run["peak_power_w"] is not None
    # the crash: restore found the killed run's saved clocks and put them back
    restored = [
        json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"restored"')
    ]
    assert len(restored) == 1 and restored[0]["restored"] is True, r.stdout[-2000:]
    assert not (board / "state" / "jetson-clocks.json").exists()
    spec = board_spec("jetson-nano")
    node = board / "sys/class/devfreq" / spec.nodes[0]
    assert int((node / "min_freq").read_text()) == min(spec.clock_hz)
    assert int((node / "max_freq").read_text()) == max(spec.clock_hz)
