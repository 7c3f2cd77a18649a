"""What a deployed fleet round does under each fault (issue 20's BEFORE table, taken before the
segmented rounds, and its AFTER with ``--after`` on the current code): real SuperLink and
SuperNodes on 127.0.0.1, replay devices, one slow board.

    python benchmarks/fault_today.py [--cases a,b,c0,c1,d,e,f] [--guard-s 180] [--out FILE]
                                     [--after]

``--after`` changes one step, the one the segmented rounds added: in case c the restarted
coordinator is a new run submitted on the same run directory and fleet (the current resume
flow); without it case c waits on the killed run, as the BEFORE table did.

Why a script and not a test: it measures and prints, it asserts nothing about the outcome
(today's outcome is what issue 20 changes). Each case is bounded (every wait has a hang guard,
``tests/fault_helpers.wait_until``) and stops every process it started
(``tests/deploy_helpers.stopped_at_exit``). One line per case (and per hostile reply): what
the coordinator reported (run status, report rows and statuses, whether report.json exists),
the wall time from the fault to that outcome, and for the board case whether clocks stay pinned.

The replay devices answer at once, so a round lasts only while its slow device trains: a
hardware node whose agent is ``tests/hostile_agent.py`` in honest mode, answering train after
``--delay-s``; each fault lands once that agent has marked itself ``training``.

Cases: (a) the slow SuperNode SIGKILLed (its whole tree) mid-round; (b) the same, restarted at
once with its node config and Flower home; (c0) the SuperLink tree (ServerApp included)
SIGKILLed mid-round and restarted on the same port, state in memory (the coordinator's default
before this branch); (c1) the same with ``--database`` (the new default, run_dir/superlink.db);
(d) the SuperLink SIGSTOPped for 25 s mid-round, then SIGCONT; (e) hostile train replies, one
hardware node per kind; (f) a virtual Jetson's real agent SIGKILLed while its clock is locked.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.deploy_helpers import stopped_at_exit  # noqa: E402
from tests.fault_helpers import (  # noqa: E402
    HangGuard,
    Loopback,
    board_node_config,
    fleet_of_replay_devices,
    hostile_agent_python,
    hostile_node_config,
    kill_tree,
    read_json,
    reference_devices,
    replay_node_configs,
    wait_for_json,
    wait_for_process,
    wait_until,
)
from tests.hostile_agent import MODES  # noqa: E402

TOKEN = "fault-today"
# --after: case c submits a new run on the same run dir once the SuperLink is back (how the
# current coordinator resumes; before the segmented rounds nothing could, so --before waits
# on the killed run as it did)
RESUBMIT = False
HOSTILE = tuple(m for m in MODES if m not in ("ok", "hang"))  # every way of answering badly


class Case:
    """One fault case's fleet and daemons: ``replay`` replay devices and a slow board."""

    def __init__(
        self,
        procs,
        tmp: Path,
        *,
        delay_s: float,
        database: bool = True,
        hostile: tuple[str, ...] = (),
        replay: int = 3,
    ) -> None:
        self.tmp, self.run_dir = tmp, tmp / "run"
        slow = dict(reference_devices()[0], name="slow-1")
        extra = [slow] + [dict(slow, name=f"hostile-{m}") for m in hostile]
        self.fleet = fleet_of_replay_devices(tmp, replay, extra_devices=extra)
        self.lb = Loopback(procs, tmp, self.run_dir / "superlink.db" if database else None)
        self.lb.start_link()
        replays = [f"dev-{i + 1}" for i in range(replay)]
        for name, config in replay_node_configs(self.fleet, replays).items():
            self.lb.start_node(name, config)
        for name, mode in [("slow-1", "ok"), *((f"hostile-{m}", m) for m in hostile)]:
            agent = hostile_agent_python(tmp / "bin", mode, delay_s if mode == "ok" else 0.0)
            self.lb.start_node(name, hostile_node_config(self.fleet, name, agent, self.work(name)))
        self.lb.wait_nodes(replay + 1 + len(hostile))

    def work(self, name: str) -> Path:
        return self.tmp / "work" / name

    def submit(self, round_timeout_s: float) -> int:
        return self.lb.submit(
            {
                "fleet-path": str(self.fleet),
                "run-dir": str(self.run_dir),
                "run-token": TOKEN,
                "round-timeout-s": round_timeout_s,
            }
        )

    def slow_training(self, timeout_s: float = 60.0) -> None:
        mark = self.work("slow-1") / "hostile-agent.json"
        wait_for_json(mark, lambda d: d.get("state") == "training", timeout_s)


def report_of(run_dir: Path) -> dict | None:
    rep = read_json(run_dir / "report.json")
    return rep if isinstance(rep, dict) and rep.get("run_token") == TOKEN else None


def rows_text(rep: dict | None, width: int = 60) -> str:
    if rep is None:
        return "no report.json"
    out = []
    for r in rep.get("devices", []):
        msg = " ".join(str(r.get("message") or "").split())
        out.append(f"{r['device']}={r['status']}" + (f"({msg[:width]})" if msg else ""))
    return "rows: " + " ".join(out)


def line(case: str, what: str, status: str, run_dir: Path, wall_s: float, extra: str = "") -> str:
    rep = report_of(run_dir)
    head = f"{case:<3} {what:<44} run={status:<22} report.json={'yes' if rep else 'no':<3}"
    return f"{head} t={wall_s:6.1f}s  {rows_text(rep)}" + (f"  [{extra}]" if extra else "")


def timeline(seen) -> str:
    return " -> ".join(f"{s}@{t:g}s" for t, s in seen)


# ------------------------------------------------------------------------------ cases


def case_a(tmp: Path, guard_s: float, restart: bool) -> list[str]:
    with stopped_at_exit() as procs:
        c = Case(procs, tmp, delay_s=30.0)
        rid = c.submit(round_timeout_s=guard_s)
        c.slow_training()
        t0 = time.monotonic()
        killed = c.lb.kill_node("slow-1")
        if restart:
            c.lb.restart_node("slow-1")
            wait_until(lambda: c.lb.online() >= 4, 90.0, "the restarted node online", 0.5)
            back = f"node back online after {time.monotonic() - t0:.1f}s"
        status, details, seen = c.lb.wait_run(rid, guard_s, max_poll_s=0.5)
        wall = time.monotonic() - t0
        mark = read_json(c.work("slow-1") / "hostile-agent.json") or {}
    what = "SuperNode SIGKILL mid-round" + (" + restart" if restart else "")
    extra = f"killed {len(killed)} procs; {timeline(seen)}"
    if restart:
        fresh = mark.get("pid") not in killed  # a new agent marks itself with its own pid
        extra += f"; {back}; a new agent started on the restarted node: {fresh}"
    return [line("b" if restart else "a", what, status, c.run_dir, wall, extra)]


def case_c(tmp: Path, guard_s: float, database: bool) -> list[str]:
    with stopped_at_exit() as procs:
        c = Case(procs, tmp, delay_s=20.0, database=database)
        rid = c.submit(round_timeout_s=guard_s)
        c.slow_training()
        wait_for_process(c.lb.link.proc, "flwr-serverapp", 30.0)
        t0 = time.monotonic()
        killed = c.lb.kill_link()
        c.lb.start_link()
        up = time.monotonic() - t0
        nodes = "nodes back: " + _nodes_back(c.lb, 4, 75.0, t0)
        if RESUBMIT:  # the current code's resume: a new run on the same run dir and fleet
            try:
                rid = c.submit(round_timeout_s=guard_s)
                nodes += f"; resubmitted as a new run after {time.monotonic() - t0:.1f}s"
            except Exception as exc:  # noqa: BLE001 - a measurement: say it, go on
                nodes += f"; resubmitting failed: {' '.join(str(exc).split())[:80]}"
        status, details, seen = c.lb.wait_run(rid, min(guard_s, 120.0), max_poll_s=0.5)
        wall = time.monotonic() - t0
        mark = read_json(c.work("slow-1") / "hostile-agent.json") or {}
    what = "SuperLink+ServerApp SIGKILL, restart " + ("--database" if database else "in memory")
    extra = (
        f"killed {len(killed)} procs; link up {up:.1f}s; {nodes}; {timeline(seen)}; "
        f"{details[:90]}; slow agent state={mark.get('state')}"
    )
    return [line("c1" if database else "c0", what, status, c.run_dir, wall, extra)]


def _nodes_back(lb: Loopback, count: int, timeout_s: float, t0: float) -> str:
    try:
        wait_until(lambda: lb.online() >= count, timeout_s, "nodes online", 0.5)
        return f"{count} online after {time.monotonic() - t0:.1f}s"
    except HangGuard:
        return f"only {max(lb.online(), 0)} of {count} online after {timeout_s:g}s"


def case_d(tmp: Path, guard_s: float, pause_s: float = 25.0) -> list[str]:
    with stopped_at_exit() as procs:
        c = Case(procs, tmp, delay_s=10.0)
        rid = c.submit(round_timeout_s=guard_s)
        c.slow_training()
        t0 = time.monotonic()
        c.lb.freeze_link()
        try:
            time.sleep(pause_s)
        finally:
            c.lb.thaw_link()
        status, details, seen = c.lb.wait_run(rid, guard_s, max_poll_s=0.5)
        wall = time.monotonic() - t0
    extra = f"paused {pause_s:g}s (slow reply due at ~10s, while frozen); {timeline(seen)}"
    return [line("d", "SuperLink SIGSTOP 25s then SIGCONT", status, c.run_dir, wall, extra)]


def case_e(tmp: Path, guard_s: float) -> list[str]:
    with stopped_at_exit() as procs:
        c = Case(procs, tmp, delay_s=0.0, hostile=HOSTILE, replay=1)
        t0 = time.monotonic()
        rid = c.submit(round_timeout_s=guard_s)
        status, details, seen = c.lb.wait_run(rid, guard_s, max_poll_s=0.5)
        wall = time.monotonic() - t0
    rep = report_of(c.run_dir)
    fleet = rep.get("fleet", {}) if rep else {}
    size = (c.run_dir / "report.json").stat().st_size if rep else 0
    out = [
        line(
            "e",
            "hostile train replies (one node per kind)",
            status,
            c.run_dir,
            wall,
            f"{timeline(seen)}; fleet energy_j={fleet.get('energy_j')} samples="
            f"{fleet.get('samples')} trained={fleet.get('trained')}; report.json {size} B",
        )
    ]
    rows = {r["device"]: r for r in (rep or {}).get("devices", [])}
    for mode in HOSTILE:
        r = rows.get(f"hostile-{mode}")
        if r is None:
            out.append(f"e.{mode:<17} no row")
            continue
        msg = " ".join(str(r.get("message") or "").split())
        out.append(
            f"e.{mode:<17} status={r['status']:<12} energy_j={r.get('energy_j')!r:<24} "
            f"samples={r.get('samples')!r:<10} time_s={r.get('time_s')!r:<20} "
            f"message({len(msg)} chars)={msg[:70]!r}"
        )
    return out


def case_f(tmp: Path, guard_s: float) -> list[str]:
    from fleet.agent.models.registry import build_model
    from fleet.training.task import write_weights
    from simulations.virtual_jetson import build_board
    from tests.hardware_helpers import BATCH, board_profile, tiny_pt_data

    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the agent: no thread thrash
    board = build_board(tmp / "nano", "nano", workload="small_cnn")
    original = board.bounds()
    board.set_load(BATCH)
    board_profile(board, tmp / "nano.csv")
    (tmp / "work").mkdir(mode=0o700)
    tiny_pt_data(tmp / "work" / "nano.pt", seed=1)
    (tmp / "eff.csv").write_text(f"batch_size,samples_to_accuracy\n{BATCH},4000\n")
    write_weights(
        build_model("small_cnn", input_shape="1x8x8", seed=7).state_dict(), str(tmp / "w.pt")
    )
    fleet = fleet_of_replay_devices(
        tmp,
        0,
        name="fault-board",
        run={
            "model": "small_cnn",
            "efficiency": str(tmp / "eff.csv"),
            "weights": str(tmp / "w.pt"),
            "target_accuracy": 1.0,
            "lr_ref_batch": BATCH,
            "lr_ref": 0.001,
            "max_samples": 24000,
            "eval_every_samples": 2000,
            "ship_weights": True,
        },
        extra_devices=[
            {
                "name": "nano-1",
                "type": "jetson-nano",
                "budget_w": 5.0,
                "profile": str(tmp / "nano.csv"),
                "data": str(tmp / "work" / "nano.pt"),
            }
        ],
    )
    config = board_node_config(fleet, board.root, tmp, 300.0)
    run_dir = tmp / "run"
    with board.kernel(process=True, lag_s=0.02), stopped_at_exit() as procs:
        lb = Loopback(procs, tmp, run_dir / "superlink.db")
        lb.start_link()
        lb.start_node("nano-1", config)
        lb.wait_nodes(1)
        rid = lb.submit(
            {
                "fleet-path": str(fleet),
                "run-dir": str(run_dir),
                "run-token": TOKEN,
                "round-timeout-s": guard_s,
            }
        )
        agent = wait_for_process(lb.node_proc("nano-1"), "fleet.agent", 90.0)
        wait_until(lambda: _pinned(board), 90.0, "the board's clock locked", 0.05)
        time.sleep(1.0)  # training, clock locked
        locked = board.clocks()
        t0 = time.monotonic()
        kill_tree(agent)
        try:
            wait_until(lambda: _bounds(board) == original, 60.0, "originals back", 0.05)
            restored = f"originals back {time.monotonic() - t0:.1f}s after the kill"
        except HangGuard:
            restored = "originals not back within 60s of the kill"
        status, details, seen = lb.wait_run(rid, guard_s, max_poll_s=0.5)
        wall = time.monotonic() - t0
        time.sleep(2.0)  # let anything that would restore do so
        after = board.bounds()
    state = sorted(p.name for p in (tmp / "state").glob("*")) if (tmp / "state").exists() else []
    pinned = after["min_freq"] == after["max_freq"]
    back = "back" if after == original else "NOT back"
    extra = (
        f"locked at {locked['max_freq'] / 1e6:g} MHz; after: min={after['min_freq'] / 1e6:g} "
        f"max={after['max_freq'] / 1e6:g} MHz governor={after['governor']} -> clocks "
        f"{'PINNED' if pinned else 'free'} (originals {back}:"
        f" min={original['min_freq'] / 1e6:g} max={original['max_freq'] / 1e6:g}); state-dir "
        f"{state}; {restored}; {timeline(seen)}"
    )
    return [line("f", "virtual Jetson agent SIGKILL, clock locked", status, run_dir, wall, extra)]


def _bounds(board) -> dict | None:
    try:
        return board.bounds()
    except (OSError, ValueError):
        return None


def _pinned(board) -> bool:
    try:
        c = board.clocks()
    except (OSError, ValueError):
        return False
    return c["min_freq"] == c["max_freq"]


CASES = {
    "a": lambda tmp, g: case_a(tmp, g, restart=False),
    "b": lambda tmp, g: case_a(tmp, g, restart=True),
    "c0": lambda tmp, g: case_c(tmp, g, database=False),
    "c1": lambda tmp, g: case_c(tmp, g, database=True),
    "d": case_d,
    "e": case_e,
    "f": case_f,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: a,b,c0,c1,d,e,f")
    ap.add_argument("--guard-s", type=float, default=180.0, help="hang guard per wait (s)")
    ap.add_argument("--out", help="also append the lines to this file")
    ap.add_argument(
        "--after",
        action="store_true",
        help="the AFTER measurement: case c resubmits on the same run dir (the resume flow)",
    )
    args = ap.parse_args(argv)
    global RESUBMIT
    RESUBMIT = args.after
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        print(f"--cases: unknown case(s) {unknown}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    for name in names:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"fault-{name}-") as tmp:
            try:
                lines = CASES[name](Path(tmp), args.guard_s)
            except (HangGuard, AssertionError, Exception) as exc:  # noqa: BLE001 - report, go on
                tail = traceback.format_exc().strip().splitlines()[-1]
                lines = [f"{name:<3} FAILED: {type(exc).__name__}: {exc} ({tail})"]
        lines.append(f"{name:<3} case wall time {time.monotonic() - t0:.1f}s (setup included)")
        for text in lines:
            print(text, flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as fh:
                    fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
