"""What segments cost a round: a segmented round vs a one-request round of the same work.

Why a benchmark: segmented rounds (docs/architecture.md, "Segmented rounds") trade one message
per device and round for one per ``segment-s`` of device time, plus an identity exchange and a
state file written at every reply. This script runs the same fleet through Flower's simulation
(the real SuperLink, ServerApp and ClientApps, replay devices on the virtual clock) both ways,
alternating, in one process, and reports the wall-time ratio and the message counts; it also
checks that both ways give the same rows (time, energy, samples, choice), since segments must
change when the coordinator learns things, never what the devices do.

    .venv/bin/python benchmarks/segments.py [--fleet F] [--segment-s 600] [--repeats 2]
    .venv/bin/python benchmarks/segments.py --deployment --pace 200 [--segment-s 600]

``--deployment``: the same comparison on a real SuperLink and one SuperNode per device on
127.0.0.1, each device paced (``pace`` device seconds per wall second), so the round takes wall
time as a real one does and the ratio is the segments' overhead on work that lasts.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.reports.roundstate import read_state  # noqa: E402
from simulations.flower_engine import run_flower  # noqa: E402

COLUMNS = ("status", "batch_size", "freq_mhz", "time_s", "energy_j", "samples")


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def one_run(fleet: Path, segment_s: float, tmp: Path, k: int) -> tuple[float, dict, int]:
    run_dir = tmp / f"run-{segment_s:g}-{k}"
    t0 = time.perf_counter()
    report = run_flower(fleet, run_dir, segment_s=segment_s)
    wall = time.perf_counter() - t0
    return wall, report, _segments(run_dir) if segment_s > 0 else (0, 0)


def _segments(run_dir: Path) -> tuple[int, int]:
    """(segments of the whole fleet, segments of the device that ran most): the round's wall
    time follows the latter, since devices run their segments side by side."""
    counts = [
        int(e["progress"].get("segments") or 0) for e in read_state(run_dir)["devices"].values()
    ]
    return sum(counts), max(counts, default=0)


def deployment_run(fleet: Path, segment_s: float, pace: float, tmp: Path, k: int) -> tuple:
    """One round on a loopback SuperLink with paced replay SuperNodes: (wall s, report, n)."""
    import uuid

    from deployment import daemons, flwr_cli, processes
    from fleet.config.fleetfile import load_fleet
    from fleet.reports.report import read_report

    base = tmp / f"dep-{segment_s:g}-{k}"
    run_dir, home = base / "run", base / "flwr"
    port = processes.free_port()
    procs = []
    try:
        link = processes.start_process(
            daemons.superlink_command("127.0.0.1", port, insecure=True),
            home / "superlink",
            base / "superlink.log",
        )
        procs.append(link)
        processes.wait_healthy("127.0.0.1", port, link)
        specs = load_fleet(fleet).devices
        for spec in specs:
            config = dict(spec.to_node_config(), client="replay", pace=pace)
            config["work-dir"] = str(base / "work" / spec.name)
            argv = daemons.supernode_command(
                f"127.0.0.1:{port}", processes.free_port(), config, insecure=True
            )
            procs.append(processes.start_process(argv, home / spec.name, base / spec.name))
        cli = home / "cli"
        flwr_cli.write_cli_config(cli, f"127.0.0.1:{port}")
        flwr_cli.wait_for_nodes(cli, len(specs), timeout_s=60)
        token = uuid.uuid4().hex
        config = {"fleet-path": str(fleet), "run-dir": str(run_dir), "run-token": token}
        config["segment-s"] = float(segment_s)
        t0 = time.perf_counter()
        run_id = flwr_cli.submit_run(cli, config)
        status, details = flwr_cli.wait_for_run(cli, run_id, timeout_s=1800, poll_s=0.2)
        wall = time.perf_counter() - t0
        if status != "finished:completed":
            raise SystemExit(f"run {status}: {details}")
        report = read_report(run_dir, token)
    finally:
        for p in procs:
            processes.stop_tree(p)
    return wall, report, _segments(run_dir) if segment_s > 0 else (0, 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", default=str(ROOT / "simulations" / "fleets" / "default.toml"))
    ap.add_argument("--segment-s", type=float, default=600.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--deployment", action="store_true", help="real SuperLink + SuperNodes")
    ap.add_argument("--pace", type=float, default=200.0, help="deployment: device s per wall s")
    args = ap.parse_args()
    fleet = Path(args.fleet).resolve()
    walls: dict[float, list[float]] = {0.0: [], args.segment_s: []}
    reports: dict[float, dict] = {}
    segments, longest = 0, 0
    with tempfile.TemporaryDirectory(prefix="powerfleet-bench-seg-") as tmp:
        for k in range(args.repeats):
            for seg in (0.0, args.segment_s):  # alternate: drift on this machine hits both
                if args.deployment:
                    wall, report, n = deployment_run(fleet, seg, args.pace, Path(tmp), k)
                else:
                    wall, report, n = one_run(fleet, seg, Path(tmp), k)
                walls[seg].append(wall)
                reports[seg] = report
                if n[0]:
                    segments, longest = n
    rows = {seg: {r["device"]: r for r in rep["devices"]} for seg, rep in reports.items()}
    diffs = [
        f"{dev}.{col}"
        for dev, row in rows[0.0].items()
        for col in COLUMNS
        if not _same(row.get(col), rows[args.segment_s].get(dev, {}).get(col))
    ]
    one, seg = statistics.median(walls[0.0]), statistics.median(walls[args.segment_s])
    devices = len(rows[0.0])
    result = {
        "fleet": str(fleet),
        "devices": devices,
        "segment_s": args.segment_s,
        "segments_total": segments,
        "one_request_wall_s": walls[0.0],
        "segmented_wall_s": walls[args.segment_s],
        "ratio_segmented_over_one_request": seg / one,
        "segments_longest_device": longest,
        # on the critical path: the device with the most segments pays one exchange per extra one
        "overhead_per_segment_s": (seg - one) / max(1, longest - 1),
        "overhead_share_of_a_real_time_segment": (seg - one) / max(1, longest - 1) / args.segment_s,
        "rows_differ": diffs,
    }
    result["mode"] = f"deployment, pace {args.pace:g}" if args.deployment else "simulation"
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(
            f"{result['mode']}: fleet {fleet.name}, {devices} devices, "
            f"segment {args.segment_s:g} s of device time"
        )
        print(f"one request per device: median {one:.2f} s  ({walls[0.0]})")
        print(f"segmented ({segments} segments): median {seg:.2f} s  ({walls[args.segment_s]})")
        print(f"ratio segmented / one-request: {seg / one:.3f}")
        per = result["overhead_per_segment_s"]
        print(
            f"overhead per extra segment on the longest device ({longest} segments): "
            f"{per:.2f} s of wall = {100 * per / args.segment_s:.2f} % of a {args.segment_s:g} s "
            "segment at a real device's clock"
        )
        print("rows identical both ways" if not diffs else f"rows differ: {diffs}")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
