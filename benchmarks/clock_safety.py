"""Crash-safe clocks on the virtual Jetson: repair after SIGKILL, restore latency mid-step.

    python benchmarks/clock_safety.py [--trials 12] [--step-iterations 4000000]

Two measurements, each over ``--trials`` real processes on a Nano-shaped virtual board:

* SIGKILL while locked, then a fresh start: how often the clocks end up at the originals, and
  whether the state file ever recorded the pinned values as originals (issue 10 saw 0 of 12).
* SIGTERM in the middle of one long step (a GIL-releasing C call standing in for a CUDA step):
  time from the signal to the original bounds being back, with the prompt-restore watcher
  versus with the signal handler alone (which can only run once the step returns). The ratio
  is printed side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulations.virtual_jetson import build_board, wait_for  # noqa: E402

LOCK_AND_WAIT = textwrap.dedent(
    """
    import hashlib, sys, time
    sys.path.insert(0, {root!r})
    from fleet.agent.devices.jetson import JetsonBackend
    from fleet.agent.devices.guard import install_restore_handlers, start_prompt_restore
    b = JetsonBackend(sysfs_root=sys.argv[1], state_dir=sys.argv[2])
    install_restore_handlers(b)
    if sys.argv[3] == "watcher":
        start_prompt_restore(b, grace_s=60)
    b.lock(230.4)
    print("locked", flush=True)
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", int(sys.argv[4]))
    time.sleep(60)
    """
).format(root=str(ROOT))


def start(root: Path, state: Path, mode: str, iterations: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_AND_WAIT, str(root), str(state), mode, str(iterations)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def sigkill_repair(trials: int) -> dict:
    from fleet.agent.devices.jetson import JetsonBackend

    repaired = pinned_recorded = 0
    with tempfile.TemporaryDirectory() as tmp:
        board = build_board(Path(tmp) / "root", "nano")
        state = Path(tmp) / "state"
        original = board.bounds()
        for _ in range(trials):
            proc = start(board.root, state, "handler", 1)
            proc.kill()
            proc.wait()
            saved = json.loads((state / "jetson-clocks.json").read_text())
            if (saved["min_freq"], saved["max_freq"]) != (
                original["min_freq"],
                original["max_freq"],
            ):
                pinned_recorded += 1
            with contextlib.redirect_stderr(io.StringIO()):  # its "restored ..." note
                JetsonBackend(str(board.root), state_dir=str(state))  # the next start
            repaired += board.bounds() == original
    return {"trials": trials, "repaired": repaired, "pinned_recorded_as_original": pinned_recorded}


def sigterm_latency(trials: int, iterations: int, mode: str) -> list[float]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        board = build_board(Path(tmp) / "root", "nano")
        state = Path(tmp) / "state"
        original = board.bounds()
        for _ in range(trials):
            proc = start(board.root, state, mode, iterations)
            time.sleep(0.1)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            ok = wait_for(lambda: board.bounds() == original, 120, 0.002)
            out.append(time.monotonic() - t0 if ok else float("inf"))
            if proc.poll() is None:
                proc.wait(timeout=120)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--step-iterations", type=int, default=4_000_000)
    args = p.parse_args()
    kill = sigkill_repair(args.trials)
    t = kill["trials"]
    print(
        f"SIGKILL while locked, then restart: repaired {kill['repaired']}/{t}, "
        f"pinned values recorded as originals {kill['pinned_recorded_as_original']}/{t}"
    )
    n = max(3, args.trials // 3)
    watcher = sigterm_latency(n, args.step_iterations, "watcher")
    handler = sigterm_latency(n, args.step_iterations, "handler")
    mw, mh = statistics.median(watcher), statistics.median(handler)
    print(f"SIGTERM mid-step -> originals back ({n} trials each, step ~{args.step_iterations} it.)")
    print(f"  {'':<22}{'median s':>10}{'max s':>10}")
    print(f"  {'prompt-restore watcher':<22}{mw:>10.3f}{max(watcher):>10.3f}")
    print(f"  {'signal handler only':<22}{mh:>10.3f}{max(handler):>10.3f}")
    print(f"  handler-only / watcher median ratio: {mh / mw:.0f}x")
    return 0 if kill["repaired"] == kill["trials"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    sys.exit(main())
