"""How fast does the closed loop's runtime guard react to a drifting rail, and how much power
above the budget gets through? Measured on the virtual Jetson (``simulations/virtual_jetson.py``):
real sysfs files, a kernel stand-in in its own process whose INA3221 files follow the locked
clock through the device model, with injected drift and noise.

Each run: pick a budget a little above the chosen point's profiled peak, start the closed loop
(``fleet.agent.loop.closedloop.ClosedLoop``, the same object ``powerfleet train`` and the agent
use),
let "training" call ``before_step()`` every 20 ms, inject a drift at a random moment that puts
the rail over the budget, and measure

- reaction: from the drift's onset (the first sample the kernel wrote over budget) to the moment
  the lower clock was written to sysfs (the JetsonBackend's lock returned);
- the share of power samples over budget, from onset to the end of the run.

The same runs without a guard (window = infinity) give the share side by side.

    PYTHONPATH=. python benchmarks/guard.py --runs 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from fleet.agent.devices.jetson import JetsonBackend
from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.loop_plan import LoopPlan
from fleet.method.budget import FixedBudget
from fleet.method.point import Point
from fleet.method.selection import choose
from simulations.virtual_jetson import build_board

BATCHES = (16, 32, 64)
EFF = {16: 4000.0, 32: 4200.0, 64: 5000.0}


class BoardBackend(JetsonBackend):
    """The real Jetson backend on the virtual tree; tells the emulator which batch runs and
    records when each lock has reached sysfs."""

    def __init__(self, board, **kw):
        super().__init__(sysfs_root=str(board.root), **kw)
        self.board = board
        self.lock_done: list[tuple[float, float]] = []

    def set_workload(self, batch):
        self.board.set_load(batch)

    def lock(self, freq_mhz, settle=False):
        out = super().lock(freq_mhz, settle)
        self.lock_done.append((time.monotonic(), float(freq_mhz)))
        return out


def lut_for(board) -> list[Point]:
    points = []
    for b in BATCHES:
        for hz in board.freqs_hz:
            p = board.model_power_w(hz, b)
            points.append(Point(b, hz / 1e6, b / (hz / 1e6) * 1e-3, p * 1.02, p))
    return points


def one_run(board, state_dir, rng, guard: bool, duration_s: float, noise_w: float) -> dict:
    points = lut_for(board)
    # A budget between the top point's peak and the next: the selection sits right under it.
    top = choose(points, EFF, None)
    budget = top.peak_power_w + rng.uniform(0.05, 0.3)
    drift = budget - top.mean_power_w + rng.uniform(0.1, 0.6)
    board.set_drift(0.0)
    board.set_noise(noise_w)
    backend = BoardBackend(board, state_dir=state_dir)
    samples: list[tuple[float, float]] = []
    plan = LoopPlan(points, EFF, FixedBudget(budget), guard_window_s=0.2 if guard else 1e9)
    loop = ClosedLoop(backend, plan)
    orig = loop.on_sample

    def watch(t, w):
        if w is not None:
            samples.append((t, w))
        orig(t, w)

    loop.sampler.on_sample = watch
    inject_at = rng.uniform(0.6, 1.4)
    injected: list[float] = []

    def inject():
        injected.append(time.monotonic())
        board.set_drift(add_w=drift)

    with loop:
        t_start = time.monotonic()
        timer = threading.Timer(inject_at, inject)
        timer.start()
        while time.monotonic() - t_start < duration_s:
            loop.before_step()
            time.sleep(0.02)
        timer.cancel()
    board.set_drift(0.0)
    t_inj = injected[0]
    onset = next((t for t, w in samples if t >= t_inj and w > budget), None)
    after = [w for t, w in samples if onset is not None and t >= onset]
    stepped = [t for t, f in backend.lock_done if t > t_inj and f < top.freq_mhz]
    return {
        "reaction_s": (stepped[0] - onset) if (stepped and onset is not None) else None,
        "over_share": sum(1 for w in after if w > budget) / len(after) if after else 0.0,
        "events": len(loop.guard_events),
        "steps_down": sum(1 for e in loop.guard_events if e["to_mhz"] is not None),
        "status": loop.status,
        "restored": board.clocks()["max_freq"] == board.freqs_hz[-1],
    }


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--board", default="nano", choices=("nano", "tx2nx", "orin"))
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per run")
    ap.add_argument("--noise", type=float, default=0.05, help="rail noise sd (W)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        board = build_board(Path(tmp) / "board", args.board, workload="small_cnn")
        state_dir = str(Path(tmp) / "state")
        results = {True: [], False: []}
        with board.kernel(process=True, lag_s=0.02):
            for i in range(args.runs):
                for guard in (True, False):
                    results[guard].append(
                        one_run(board, state_dir, rng, guard, args.duration, args.noise)
                    )
                print(f"run {i + 1}/{args.runs}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    g, n = results[True], results[False]
    reactions = [r["reaction_s"] for r in g if r["reaction_s"] is not None]
    missed = sum(1 for r in g if r["reaction_s"] is None)
    print(f"guard benchmark: {args.runs} runs on a virtual {args.board}, drift injected at "
          f"0.6-1.4 s, noise sd {args.noise} W, sampler 20 Hz, window 0.2 s")  # fmt: skip
    print(f"{'':34}{'median':>10}{'p95':>10}{'max':>10}")
    if reactions:
        print(f"{'reaction, onset -> step-down (s)':34}{statistics.median(reactions):>10.3f}"
              f"{pct(reactions, 0.95):>10.3f}{max(reactions):>10.3f}")  # fmt: skip
    og = [r["over_share"] for r in g]
    on = [r["over_share"] for r in n]
    print(f"{'samples over budget, guard':34}{statistics.median(og):>10.1%}"
          f"{pct(og, 0.95):>10.1%}{max(og):>10.1%}")  # fmt: skip
    print(f"{'samples over budget, no guard':34}{statistics.median(on):>10.1%}"
          f"{pct(on, 0.95):>10.1%}{max(on):>10.1%}")  # fmt: skip
    steps = [r["steps_down"] for r in g]
    print(f"{'guard step-downs per run':34}{statistics.median(steps):>10.0f}"
          f"{pct(steps, 0.95):>10.0f}{max(steps):>10.0f}")  # fmt: skip
    ratio = statistics.mean(og) / statistics.mean(on) if statistics.mean(on) > 0 else float("nan")
    print(
        f"mean share over budget, guard / no guard: {ratio:.3f}; runs without a step-down: "
        f"{missed}; clocks restored after every run: {all(r['restored'] for r in g + n)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
