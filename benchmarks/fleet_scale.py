"""Wall time of one simulated round for fleets of 10, 100 and 1,000 devices, per engine.

    python benchmarks/fleet_scale.py [--sizes 10,100,1000] [--engines direct,flower]

Each size is a generated fleet (half Nanos, half TX2 NX boards, budgets 4.5 W / 7 W / none,
MobileNetV2, trace replay) run through both engines one after the other in the same process
environment; reports seconds per round, devices per second and the Flower/direct ratio. Both
engines must produce identical device rows (checked), so the ratio prices Flower's overhead.

With the flower engine it also runs a minimal Flower app (benchmarks/minimal_flower_app: one
empty message to every node and back) on as many simulated nodes, launched the same way
(``flwr run`` on a fresh local simulation SuperLink), and prints ``flower_over_minimal``: what
powerfleet's app costs over Flower's own floor (target: at most 1.1). ``--minimal same`` makes
that app send powerfleet's own traffic instead (the identity exchange, then every lock-step of
segments with its nodes and message sizes: ``benchmarks/message_pattern.py``), so its wall is
Flower's and Ray's floor for these messages.

``--split`` (flower engine): where the Flower engine's wall goes. The coordinator records its
cost per reply and per state write (``strategies/reply_timings.py``), the ClientApp its work per
message inside the Ray actors (``clients/handler_timings.py``); printed as ``coordinator_s``
(wall), ``client_cpu_s``, ``ours_share`` = (coordinator + ClientApp CPU) / Flower engine wall,
and ``ours_share_wall``, with the ClientApp's wall inside its handlers per actor instead of its
CPU (on a loaded machine a handler waits for a core; the actors work side by side)
(docs/deploy-load.md, the 1,000-device section).
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


def _split_env(tmpd: Path, n: int) -> dict[str, Path]:
    """Switch on the coordinator's and the ClientApp's timings for the next Flower run."""
    from clients.handler_timings import ENV as CLIENT_ENV
    from strategies.reply_timings import ENV as REPLY_ENV

    files = {REPLY_ENV: tmpd / f"replies-{n}.jsonl", CLIENT_ENV: tmpd / f"client-{n}.jsonl"}
    for key, file in files.items():
        file.unlink(missing_ok=True)
        os.environ[key] = str(file)
    return files


def _split(files: dict[str, Path], wall: float) -> dict[str, object]:
    """The coordinator's seconds (replies handled, state written), the ClientApp's (CPU in its
    handlers, all messages), and their share of the Flower engine's wall."""
    from clients.handler_timings import ENV as CLIENT_ENV
    from clients.handler_timings import read_timings
    from strategies.reply_timings import ENV as REPLY_ENV

    lines = [json.loads(x) for x in files[REPLY_ENV].read_text().splitlines()]
    writes = {(x["written"], x["write_wall_s"], x["write_cpu_s"]) for x in lines}
    handle = sum(x["wall_s"] for x in lines)
    write = sum(w for _, w, _c in writes)
    handle_cpu = sum(x["cpu_s"] for x in lines)
    write_cpu = sum(c for _, _w, c in writes)
    client = read_timings(files[CLIENT_ENV])
    client_cpu = sum(h["cpu_s"] for h in client.values())
    out: dict[str, object] = {
        "coordinator_handle_s": handle,
        "coordinator_write_s": write,
        "state_writes": len(writes),
        "coordinator_s": handle + write,
        "client_messages": int(sum(h["messages"] for h in client.values())),
        "client_cpu_s": client_cpu,
        "client_wall_s": sum(h["wall_s"] for h in client.values()),
        "client_processes": max(int(h["processes"]) for h in client.values()),
    }
    for name, h in client.items():
        out[f"client_{name}_ms"] = 1000 * h["cpu_s"] / h["messages"]
    out["coordinator_cpu_s"] = handle_cpu + write_cpu
    out["ours_share"] = (handle + write + client_cpu) / wall
    # CPU on both sides: what our code costs, whatever waited for a core meanwhile
    out["ours_share_cpu"] = (handle_cpu + write_cpu + client_cpu) / wall
    # the actors run side by side: each one's wall inside our handlers is on the round's path
    actors = out["client_wall_s"] / max(1, out["client_processes"])  # type: ignore[operator]
    out["ours_share_wall"] = (handle + write + actors) / wall
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--engines", default="direct,flower")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--minimal",
        choices=("one", "same"),
        default="one",
        help="the minimal app's traffic: one empty message per node, or powerfleet's own",
    )
    ap.add_argument("--split", action="store_true", help="time ours inside the Flower engine")
    args = ap.parse_args()
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    from benchmarks.message_pattern import message_pattern
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
                timings = _split_env(tmpd, n) if args.split and engine == "flower" else {}
                t0 = time.perf_counter()
                try:
                    rep = simulate(path, engine, tmpd / f"run-{n}-{engine}")
                finally:
                    for key in timings:
                        os.environ.pop(key, None)
                wall = time.perf_counter() - t0
                if timings:
                    entry.update(_split(timings, wall))
                rows[engine] = [
                    (d["device"], d["batch_size"], d["freq_mhz"], d["time_s"])
                    for d in rep["devices"]
                ]
                entry[f"{engine}_s"] = wall
                entry[f"{engine}_devices_per_s"] = n / wall
            if "flower" in engines:
                from simulations.flower_engine import flwr_run_local

                done = tmpd / f"minimal-{n}.done"
                config: dict[str, object] = {"num-nodes": n, "done-file": str(done)}
                messages = n
                if args.minimal == "same":
                    pattern = message_pattern(path)
                    config.update(pattern.run_config())
                    messages = n + pattern.segments  # the identities, then the segments
                    entry["segments"] = pattern.segments
                    entry["steps"] = "/".join(str(x) for x in pattern.steps)
                    entry["inprocess_cpu_ms_per_segment"] = 1000 * pattern.cpu_s_per_segment
                t0 = time.perf_counter()
                said = flwr_run_local(MINIMAL_APP, n, config)
                entry["minimal_flower_s"] = time.perf_counter() - t0
                if not done.exists() or done.read_text() != str(messages):
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
