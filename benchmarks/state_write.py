"""The round-state write's CPU: a full write against the incremental one, by fleet size.

    python benchmarks/state_write.py [--sizes 5,25,100,1000] [--repeats 300,300,200,40]

What a coordinator pays when one device's reply arrives alone: ``state.json`` and
``metrics.prom`` rewritten after one device changed. The entries are real: the direct engine
runs ``benchmarks/fleet_scale.py``'s fleet of the largest size once (its state.json: final
rows with their segments and efficiency fits), and each size takes its first N devices. Each
repeat changes one device (its progress and last-seen time, in place, the next device each
time) and then times, one after the other in alternating order, a full write
(``roundstate.write_state``: every device serialised, checked, rendered) and the incremental
one (``roundstate.Writer``, kept across the repeats: only the changed device rendered; every
device still fingerprinted and every byte still written). CPU seconds of this process
(``time.process_time``: the fsyncs' waits are not in it), median and p99 over the repeats;
both writers' files are compared byte for byte after the last repeat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from fleet_scale import fleet_file  # noqa: E402

from fleet.config.fleetfile import load_fleet  # noqa: E402
from fleet.reports import roundstate as rs  # noqa: E402
from simulations.runner import run_direct  # noqa: E402


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def entries(n: int, where: Path) -> list[dict]:
    """The device entries of a direct run of an n-device fleet (its state.json)."""
    run_dir = where / "direct"
    run_direct(load_fleet(fleet_file(n, where)), run_dir)
    return list(rs.read_state(run_dir)["devices"].values())


def state_of(devices: list[dict]) -> dict:
    state = rs.new_state("bench", "fleet.toml", "ab" * 32, "flower", "tok", 1, 600.0, [])
    state["devices"] = {e["device"]: json.loads(json.dumps(e)) for e in devices}
    return state


def measure(devices: list[dict], repeats: int, where: Path) -> dict[str, float]:
    state = state_of(devices)
    names = list(state["devices"])
    full_dir, inc_dir = where / "full", where / "inc"
    full_dir.mkdir()
    inc_dir.mkdir()
    writer = rs.Writer(inc_dir)
    writer.write(state)  # the first write renders every device; the repeats are what follows
    full: list[float] = []
    inc: list[float] = []
    rendered = set()

    def change(k: int) -> None:
        e = state["devices"][names[k % len(names)]]
        e["progress"]["samples"] = float(e["progress"].get("samples") or 0.0) + 1.0
        e["last_seen_utc"] = rs.now_utc()

    for k in range(repeats):
        change(k)  # one device changed since either writer's last write
        for which in ("full", "inc") if k % 2 else ("inc", "full"):
            t0 = time.process_time()
            if which == "full":
                rs.write_state(full_dir, state)
                full.append(time.process_time() - t0)
            else:
                writer.write(state)
                inc.append(time.process_time() - t0)
                rendered.add(writer.rendered)
    clock, rs.now_utc = rs.now_utc, lambda: "2026-01-01T00:00:00+00:00"  # one stamp for both
    try:
        rs.write_state(full_dir, state)
        writer.write(state)
    finally:
        rs.now_utc = clock
    files = (rs.STATE_FILE, rs.METRICS_FILE)
    same = all((full_dir / f).read_bytes() == (inc_dir / f).read_bytes() for f in files)
    return {
        "kb": (inc_dir / rs.STATE_FILE).stat().st_size / 1024,
        "prom_kb": (inc_dir / rs.METRICS_FILE).stat().st_size / 1024,
        "full_p50": statistics.median(full) * 1e3,
        "full_p99": p99(full) * 1e3,
        "inc_p50": statistics.median(inc) * 1e3,
        "inc_p99": p99(inc) * 1e3,
        "rendered": max(rendered),
        "same": same,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5,25,100,1000")
    ap.add_argument("--repeats", default="300,300,200,40", help="per size, or one for all")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    reps = [int(x) for x in args.repeats.split(",")]
    reps = reps * len(sizes) if len(reps) == 1 else reps
    with tempfile.TemporaryDirectory() as tmp:
        pool = entries(max(sizes), Path(tmp))
        rows = []
        for n, r in zip(sizes, reps, strict=True):
            where = Path(tmp) / f"n{n}"
            where.mkdir()
            rows.append((n, r, measure(pool[:n], r, where)))
    print(
        "| N | repeats | state.json KB | metrics.prom KB | full write CPU ms p50 / p99 | "
        "incremental CPU ms p50 / p99 | full / incremental p50 / p99 | devices rendered "
        "per incremental write | files equal |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, r, m in rows:
        print(
            f"| {n} | {r} | {m['kb']:.0f} | {m['prom_kb']:.0f} | "
            f"{m['full_p50']:.2f} / {m['full_p99']:.2f} | "
            f"{m['inc_p50']:.2f} / {m['inc_p99']:.2f} | "
            f"{m['full_p50'] / m['inc_p50']:.1f}x / {m['full_p99'] / m['inc_p99']:.1f}x | "
            f"{m['rendered']} | {'yes' if m['same'] else 'NO'} |"
        )


if __name__ == "__main__":
    main()
