"""A signal handler must not wait for a lock the code it interrupted may hold.

A handler runs in the main thread between two bytecodes of whatever ran there, also inside
``threading.Event.wait()``/``set()`` while they hold the Event's own lock; a handler that then
calls ``set()`` on that Event waits for itself forever. The virtual kernel stand-in hung that
way on SIGTERM (the README rehearsal, under load), and the device guard's stop flag could, on a
second signal landing inside the first one's handler, with the clock still locked.

These tests make the bad moment certain instead of rare: a trace function (``sys.settrace``,
main thread) sends the signal from inside the lock-holding lines, so the handler runs there.
A child that finishes is the verdict; the wait is a hang guard, not a timing claim.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simulations.virtual_jetson import build_board

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 120

# Sends SIGNAL once, on the main thread, from inside FUNC called by CALLER, at its first line
# that starts with FIRST_LINE (in an Event: after ``with self._cond:``, its lock held).
TRACER = """
import linecache, os, signal, sys, threading
sent = []
def tracer(frame, event, arg):
    caller = frame.f_back.f_code.co_name if frame.f_back is not None else None
    if frame.f_code.co_name != FUNC or caller != CALLER or sent:
        return None
    def lines(frame, event, arg):
        text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if event == "line" and not sent and text.startswith(FIRST_LINE):
            sent.append(1)
            os.kill(os.getpid(), SIGNAL)
        return lines
    return lines
"""


def run_child(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        return subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env,
            cwd=str(tmp_path), timeout=HANG_GUARD_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the child deadlocked in its own signal handler")


def test_the_kernel_stand_in_stops_on_a_sigterm_landing_inside_its_wait(tmp_path):
    board = build_board(tmp_path / "board", "nano")
    code = TRACER.replace("FUNC", repr("wait")).replace("CALLER", repr("run_kernel"))
    code = code.replace("FIRST_LINE", repr("signaled ="))
    code = code.replace("SIGNAL", "signal.SIGTERM") + textwrap.dedent(f"""
        from simulations.virtual_kernel import serve
        sys.settrace(tracer)
        serve({str(board.root)!r})
        sys.settrace(None)
        print("stopped", len(sent))
    """)
    r = run_child(code, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["stopped", "1"]  # the signal was sent from inside the wait


def test_a_second_signal_inside_the_guards_handler_still_restores(tmp_path):
    restored = tmp_path / "restored"
    code = TRACER.replace("FUNC", repr("set")).replace("CALLER", repr("handler"))
    code = code.replace("FIRST_LINE", repr("self."))
    code = code.replace("SIGNAL", "signal.SIGINT") + textwrap.dedent(f"""
        from fleet.agent.devices.guard import STOP, install_restore_handlers
        class Board:
            def restore(self):
                with open({str(restored)!r}, "a") as fh:
                    fh.write("restored\\n")
        install_restore_handlers(Board())
        sys.settrace(tracer)
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # its handler sets STOP: SIGINT lands there
            for _ in range(1000):
                pass
        except (KeyboardInterrupt, SystemExit) as exc:
            sys.settrace(None)
            print("ended", type(exc).__name__, len(sent), STOP.is_set())
    """)
    r = run_child(code, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    words = r.stdout.split()
    assert words[0] == "ended" and words[2:] == ["1", "True"], r.stdout
    assert restored.read_text().count("restored") >= 1
