"""Wall time of one simulated round for fleets of 10, 100 and 1,000 devices, per engine.

    python benchmarks/fleet_scale.py [--sizes 10,100,1000] [--engines direct,flower]

Each size is a generated fleet (half Nanos, half TX2 NX boards, budgets 4.5 W / 7 W / none,
MobileNetV2, trace replay) run through both engines one after the other in the same process
environment; reports seconds per round, devices per second and the Flower/direct ratio. Both
engines must produce identical device rows (checked), so the ratio prices Flower's overhead.

With the flower engine it also runs a minimal Flower app (benchmarks/minimal_flower_app: one
empty message to every node and back) on as many simulated nodes, launched the same way
(``flwr run`` on a fresh local simulation SuperLink), and prints ``flower_over_minimal``: what
powerfleet's app costs over Flower's own floor (target: at most 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "simulations"
MINIMAL_APP = ROOT / "benchmarks" / "minimal_flower_app"


def fleet_file(n: int, where: Path) -> Path:
    groups = [
        ("nano", "jetson-nano", "nano_mobilenetv2.csv", "mobilenetv2_svhn.csv"),
        ("tx2nx", "jetson-tx2nx", "tx2nx_mobilenetv2.csv", "mobilenetv2_cinic.csv"),
    ]
    budgets = ["4.5", "7.0", '"none"']
    parts = [
        "[run]",
        f'name = "scale-{n}"',
        'model = "mobilenetv2"',
        f'efficiency = "{SIM / "efficiency" / "mobilenetv2_cifar10-proxy.csv"}"',
        "target_accuracy = 0.915",
        "ship_weights = false",
    ]
    cells = [(g, b) for g in groups for b in budgets]
    for k, ((tag, dtype, prof, data), budget) in enumerate(cells):
        count = n // len(cells) + (1 if k < n % len(cells) else 0)
        if count == 0:
            continue
        parts += [
            "[[devices]]",
            f'name = "{tag}-{k}"',
            f'type = "{dtype}"',
            f"budget_w = {budget}",
            f"count = {count}",
            f'profile = "{SIM / "profiles" / prof}"',
            f'data = "{SIM / "efficiency" / data}"',
        ]
    path = where / f"fleet-{n}.toml"
    path.write_text("\n".join(parts) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--engines", default="direct,flower")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    from simulations.runner import simulate

    engines = args.engines.split(",")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        for n in (int(s) for s in args.sizes.split(",")):
            path = fleet_file(n, tmpd)
            rows = {}
            entry: dict[str, object] = {"devices": n}
            for engine in engines:
                t0 = time.perf_counter()
                rep = simulate(path, engine, tmpd / f"run-{n}-{engine}")
                wall = time.perf_counter() - t0
                rows[engine] = [
                    (d["device"], d["batch_size"], d["freq_mhz"], d["time_s"])
                    for d in rep["devices"]
                ]
                entry[f"{engine}_s"] = wall
                entry[f"{engine}_devices_per_s"] = n / wall
            if "flower" in engines:
                from simulations.flower_engine import flwr_run_local

                done = tmpd / f"minimal-{n}.done"
                t0 = time.perf_counter()
                said = flwr_run_local(MINIMAL_APP, n, {"num-nodes": n, "done-file": str(done)})
                entry["minimal_flower_s"] = time.perf_counter() - t0
                if not done.exists() or done.read_text() != str(n):
                    raise SystemExit(f"the minimal app's round did not complete: {said}")
                entry["flower_over_minimal"] = entry["flower_s"] / entry["minimal_flower_s"]
            if len(rows) == 2:
                a, b = rows.values()
                entry["identical_rows"] = sorted(a) == sorted(b)
                entry["flower_over_direct"] = entry["flower_s"] / entry["direct_s"]
            results.append(entry)
            if not args.json:
                print(
                    " ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in entry.items()
                    ),
                    flush=True,
                )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
