"""The real deployment under load on loopback: one SuperLink, N SuperNodes, one coordinator.

    python benchmarks/deploy_load.py [--nodes 5,10,25] [--segment-s 600] [--pace 300]
                                     [--out docs/deploy-load.md]

For each N: a generated replay fleet of N devices (benchmarks/fleet_scale.py's mix: Nanos and
TX2 NX boards, MobileNetV2, budgets 4.5 W / 7 W / none), an insecure SuperLink on 127.0.0.1 with
its SQLite database, one ``flower-supernode`` per device (node config as ``powerfleet device``
builds it: the fleet entry, ``pace`` device seconds per wall second, a work dir for the segment
checkpoints) and one run of the powerfleet app (``flwr run``) in segments of ``segment-s``
device seconds. Every process is stopped at the end of each N, whatever happens.

Measured (the coordinator is the ``flwr-serverapp`` process the SuperLink's SuperExec starts):
- per reply: the driver's wall and CPU seconds on it (decode, check, book, callbacks) plus its
  share of the ``state.json``/``metrics.prom`` write that published it, median and p99, from
  ``strategies.reply_timings`` (``POWERFLEET_REPLY_TIMINGS``, set on the SuperLink);
- the coordinator process's whole CPU (``/proc``: gRPC, polling, imports) per reply;
- reply -> state: from the device creating its reply (Flower's ``metadata.created_at``) to the
  state write that shows it, median and p99;
- the SuperLink database's growth (file + WAL) per segment reply;
- peak RSS: the coordinator, the SuperLink (with its SuperExec), one SuperNode with everything
  it started, all SuperNodes together;
- exactness: every report row equals the direct engine's for the same fleet and segments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from fleet_scale import fleet_file  # noqa: E402

from deployment import daemons, flwr_cli, processes, supernode  # noqa: E402
from fleet.config.fleetfile import load_fleet  # noqa: E402
from fleet.planning.learning_rounds import simulate_rounds  # noqa: E402
from fleet.reports.report import json_safe, read_report, runner_row  # noqa: E402
from strategies.reply_timings import ENV as TIMINGS_ENV  # noqa: E402
from tests.row_compare import diff  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
FIRST_ALLOWANCE_S = 120.0
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) of one process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _tree_rss(pid: int) -> int:
    return sum((_stat(p) or (0, 0))[1] for p in [pid, *processes.descendants(pid)])


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


NODE_MB = 500  # one SuperNode with its SuperExec and a ClientApp, measured (peak ~500 MB)
SPARE_MB = 3000  # left to everyone else on a shared machine


def available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def run_one(n: int, segment_s: float, pace: float, root: Path, timeout_s: float) -> dict:
    """One load run of ``n`` SuperNodes; the measurements as a dict. Skipped when the machine
    lacks the memory, stopped when it runs short meanwhile (a shared machine)."""
    if available_mb() < n * NODE_MB + SPARE_MB:
        return {"n": n, "status": f"skipped: {available_mb():.0f} MB available"}
    where = root / f"n{n}"
    where.mkdir()
    fleet_path = fleet_file(n, where)
    fleet = load_fleet(fleet_path)
    want = simulate_rounds(fleet, None, 1, where / "direct-store", segment_s)[-1].rows
    run_dir, home, logs = where / "run", where / "flwr", where / "logs"
    run_dir.mkdir()
    timings = where / "timings.jsonl"
    db = run_dir / "superlink.db"
    port = processes.free_port()
    procs: list[subprocess.Popen] = []
    node_argv: list[tuple[list[str], Path, Path]] = []  # to start a node again, as `device` does
    out: dict = {"n": n, "node_restarts": 0}
    try:
        link = processes.start_process(
            daemons.superlink_command("127.0.0.1", port, insecure=True, database=db),
            home / "superlink",
            logs / "superlink.log",
            {TIMINGS_ENV: str(timings)},
        )
        procs.append(link)
        processes.wait_healthy("127.0.0.1", port, link, timeout_s=120.0)
        for spec in fleet.devices:
            config = daemons.device_node_config(
                dict(spec.to_node_config()), "replay", work_dir=str(where / "work"), pace=pace
            )
            argv = daemons.supernode_command(
                f"127.0.0.1:{port}", processes.free_port(), config, insecure=True
            )
            procs.append(processes.start_process(argv, home / spec.name, logs / spec.name))
            node_argv.append((argv, home / spec.name, logs / spec.name))
        (where / "work").mkdir(mode=0o700, exist_ok=True)
        cli = home / "cli"
        flwr_cli.write_cli_config(cli, f"127.0.0.1:{port}")
        flwr_cli.wait_for_nodes(cli, n, timeout_s=300.0)
        time.sleep(2.0)  # the nodes' first pulls settle before the idle baseline
        db0 = _db_bytes(db)
        token = uuid.uuid4().hex
        run_config = {
            "fleet-path": str(fleet_path),
            "run-dir": str(run_dir),
            "num-nodes": n,
            "run-token": token,
            "segment-s": segment_s,
            # a first segment's allowance (agent start, profiling on a board): a replay node
            # has neither, so a first segment lost inside a loaded SuperLink is sent again in
            # minutes, not after 2 x the default 600 s
            "round-timeout-s": FIRST_ALLOWANCE_S,
        }
        t0 = time.monotonic()
        run_id = flwr_cli.submit_run(cli, run_config)
        peak = {"coordinator": 0, "superlink": 0, "one_node": 0, "all_nodes": 0}
        node_parts: dict[str, int] = {}  # one SuperNode's processes by program: peak RSS
        coordinator_pid, coordinator_cpu, cpu_at_first = None, 0.0, None
        db_at_first: tuple[int, int] | None = None  # (bytes, replies) once replies flow
        last_check = time.monotonic()
        status = "running"
        while time.monotonic() - t0 < timeout_s:
            if coordinator_pid is None:
                for pid in processes.descendants(link.pid):
                    if "flwr-serverapp" in _cmdline(pid):
                        coordinator_pid = pid
            if coordinator_pid is not None:
                got = _stat(coordinator_pid)
                if got is not None:
                    coordinator_cpu = got[0]
                    peak["coordinator"] = max(peak["coordinator"], got[1])
            link_rss = _tree_rss(link.pid) - (
                (_stat(coordinator_pid) or (0, 0))[1] if coordinator_pid else 0
            )
            peak["superlink"] = max(peak["superlink"], link_rss)
            for i, (argv, node_home, node_log) in enumerate(node_argv, start=1):
                if procs[i].poll() == supernode.CONNECTION_ENDED:  # as `powerfleet device` does
                    procs[i] = processes.start_process(argv, node_home, node_log)
                    out["node_restarts"] += 1
            nodes = [_tree_rss(p.pid) for p in procs[1:]]
            for pid in [procs[1].pid, *processes.descendants(procs[1].pid)]:
                words = _cmdline(pid).split()
                prog = next((Path(w).name for w in words if "flwr" in w or "flower" in w), "?")
                rss = (_stat(pid) or (0, 0))[1]
                node_parts[prog] = max(node_parts.get(prog, 0), rss)
            if timings.exists():
                seen = timings.read_text().count("\n")
                if cpu_at_first is None:
                    cpu_at_first = coordinator_cpu
                if db_at_first is None and seen:
                    db_at_first = (_db_bytes(db), seen)
            peak["one_node"] = max(peak["one_node"], max(nodes))
            peak["all_nodes"] = max(peak["all_nodes"], sum(nodes))
            if available_mb() < SPARE_MB / 2:
                status = f"stopped: {available_mb():.0f} MB available"
                break
            if (run_dir / "report.json").exists():
                try:
                    report = read_report(run_dir, token)
                    status = "completed"
                    break
                except Exception:  # noqa: BLE001 - being written
                    pass
            if time.monotonic() - last_check > 15.0:  # `flwr ls` costs a Python start: rarely
                last_check = time.monotonic()
                try:
                    st, details = flwr_cli.run_status(cli, run_id)
                except processes.DeployError:  # a SuperLink too busy to answer: ask later
                    st, details = "unknown", ""
                if st.startswith("finished") and not (run_dir / "report.json").exists():
                    status = f"{st}: {details}"
                    break
            time.sleep(0.5)
        out["wall_s"] = time.monotonic() - t0
        out["status"] = status
        if status != "completed":
            return out
        rows = {r["device"]: r for r in report["devices"]}
        bad = []
        for spec, expected in zip(fleet.devices, want, strict=True):
            bad += diff(runner_row(rows.get(spec.name, {})), json_safe(expected), spec.name)
        out["rows_equal"] = not bad
        out["row_diffs"] = bad[:5]
        lines = [json.loads(x) for x in timings.read_text().splitlines()]
        per_wall = [x["wall_s"] + x["write_wall_s"] / x["batch"] for x in lines]
        per_cpu = [x["cpu_s"] + x["write_cpu_s"] / x["batch"] for x in lines]
        latency = [x["written"] - x["created"] for x in lines]
        transport = [x["handled"] - x["created"] for x in lines]  # Flower + the poll interval
        publish = [x["written"] - x["handled"] for x in lines]  # ours: the write gap and write
        writes = {(x["written"], x["write_wall_s"]) for x in lines}
        out.update(
            replies=len(lines),
            reply_wall_ms=(1e3 * statistics.median(per_wall), 1e3 * _pct(per_wall, 0.99)),
            reply_cpu_ms=(1e3 * statistics.median(per_cpu), 1e3 * _pct(per_cpu, 0.99)),
            write_ms=(
                1e3 * statistics.median(w for _, w in writes),
                1e3 * _pct([w for _, w in writes], 0.99),
            ),
            latency_s=(statistics.median(latency), _pct(latency, 0.99)),
            transport_s=(statistics.median(transport), _pct(transport, 0.99)),
            publish_s=(statistics.median(publish), _pct(publish, 0.99)),
            writes=len(writes),
            process_cpu_per_reply_ms=1e3
            * (coordinator_cpu - (cpu_at_first or 0.0))
            / max(1, len(lines) - 1),
            db_bytes_per_reply=(_db_bytes(db) - db_at_first[0])
            / max(1, len(lines) - db_at_first[1])
            if db_at_first
            else float("nan"),
            db_bytes_before_run=db0,
            node_parts_mb={k: v / 2**20 for k, v in node_parts.items()},
            db_bytes=_db_bytes(db),
            state_bytes=(run_dir / "state.json").stat().st_size,
            peak_mb={k: v / 2**20 for k, v in peak.items()},
        )
        return out
    finally:
        for p in procs:
            processes.stop_tree(p)


def markdown(results: list[dict], argv: str) -> str:
    head = [
        "# The deployment under load (loopback)",
        "",
        "One SuperLink, N SuperNodes (replay devices, paced), one coordinator, on this project's "
        "2-core machine, shared with other work. Produced by:",
        "",
        f"    {argv}",
        "",
        "| N | replies | wall s | per reply wall ms p50 / p99 | per reply CPU ms p50 / p99 "
        "| coordinator process CPU ms / reply | reply -> state.json s p50 / p99 "
        "| of which reply -> coordinator s p50 / p99 | coordinator -> state.json s p50 / p99 "
        "| state write ms p50 / p99 | SuperLink DB bytes / reply | RSS MB: coordinator "
        "| SuperLink | one SuperNode | all SuperNodes | SuperNodes started again | rows = direct |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for r in results:
        if r.get("status") != "completed":
            rows.append(f"| {r['n']} | {r.get('status')} | {r.get('wall_s', 0):.0f} |" + " |" * 14)
            continue
        m = r["peak_mb"]
        rows.append(
            f"| {r['n']} | {r['replies']} | {r['wall_s']:.0f} "
            f"| {r['reply_wall_ms'][0]:.2f} / {r['reply_wall_ms'][1]:.2f} "
            f"| {r['reply_cpu_ms'][0]:.2f} / {r['reply_cpu_ms'][1]:.2f} "
            f"| {r['process_cpu_per_reply_ms']:.0f} "
            f"| {r['latency_s'][0]:.2f} / {r['latency_s'][1]:.2f} "
            f"| {r['transport_s'][0]:.2f} / {r['transport_s'][1]:.2f} "
            f"| {r['publish_s'][0]:.2f} / {r['publish_s'][1]:.2f} "
            f"| {r['write_ms'][0]:.1f} / {r['write_ms'][1]:.1f} "
            f"| {r['db_bytes_per_reply']:.0f} "
            f"| {m['coordinator']:.0f} | {m['superlink']:.0f} | {m['one_node']:.0f} "
            f"| {m['all_nodes']:.0f} | {r['node_restarts']} "
            f"| {'yes' if r['rows_equal'] else 'NO'} |"
        )
    return "\n".join(head + rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="5,10,25", help="comma-separated N")
    ap.add_argument("--segment-s", type=float, default=600.0, help="device seconds per segment")
    ap.add_argument("--pace", type=float, default=300.0, help="device seconds per wall second")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per N")
    ap.add_argument("--out", help="write the Markdown table here too")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    os.environ.update(processes.QUIET_ENV)
    root = Path(tempfile.mkdtemp(prefix="powerfleet-load-"))
    results = []
    try:
        for n in [int(x) for x in args.nodes.split(",") if x.strip()]:
            results.append(run_one(n, args.segment_s, args.pace, root, args.timeout_s))
            print(json.dumps(results[-1]), flush=True)
    finally:  # kept when a run went wrong: its logs and run dirs say why
        if results and all(r.get("rows_equal") for r in results):
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root} (a run did not equal the direct engine's rows)", file=sys.stderr)
    argv = "python benchmarks/deploy_load.py " + " ".join(sys.argv[1:])
    page = markdown(results, argv.strip())
    print(page)
    if args.out:
        Path(args.out).write_text(page)
    return 0 if all(r.get("rows_equal") for r in results) else 1


if __name__ == "__main__":
    from fleet.common.signals import Interrupted, sigterm_as_interrupt

    try:  # a SIGTERM (e.g. from `timeout`) unwinds through run_one's clean-up: no orphan nodes
        with sigterm_as_interrupt():
            sys.exit(main())
    except Interrupted:
        sys.exit(143)
