"""Start-up time of `powerfleet select --json` next to a bare `python -c pass`, run by run.

    python benchmarks/startup.py [--runs 30] [--json]

Why paired: on a shared 2-core machine the absolute time of a process start drifts with load;
running the command and the bare interpreter back to back, N times, and comparing medians
prices what powerfleet itself adds (imports, parsing, the selection) over the interpreter's own
start. The command selects on a reference profile (Nano, ResNet18, 4.5 W) as a board would.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "simulations"
# The installed console script, as a user runs it (``python -m fleet`` where none is installed).
SCRIPT = Path(sys.executable).parent / "powerfleet"
SELECT = [
    *([str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "fleet"]),
    "select",
    "--profile",
    str(SIM / "profiles" / "nano_resnet18.csv"),
    "--efficiency",
    str(SIM / "efficiency" / "resnet18_cifar10-proxy.csv"),
    "--budget-w",
    "4.5",
    "--json",
]
BARE = [sys.executable, "-c", "pass"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=str(ROOT))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    timed(SELECT, env)  # warm the file cache and __pycache__ once
    bare, select = [], []
    for _ in range(args.runs):
        bare.append(timed(BARE, env))
        select.append(timed(SELECT, env))
    result = {
        "runs": args.runs,
        "python_pass_median_s": statistics.median(bare),
        "select_median_s": statistics.median(select),
        "difference_s": statistics.median(s - b for s, b in zip(select, bare, strict=True)),
    }
    result["ratio"] = result["select_median_s"] / result["python_pass_median_s"]
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"runs={args.runs} python -c pass: {result['python_pass_median_s'] * 1000:.1f} ms  "
        f"powerfleet select --json: {result['select_median_s'] * 1000:.1f} ms  "
        f"difference (median of pairs): {result['difference_s'] * 1000:.1f} ms  "
        f"ratio: {result['ratio']:.2f}x"
    )


if __name__ == "__main__":
    main()
