"""The coordinator's ServerApp: load the fleet, ship model + efficiency, write the round reports.

Settings (``ServerSettings``) come from ``context.run_config``: the app's config
(``[tool.flwr.app.config]`` in the root ``pyproject.toml`` and in ``deployment/flower_app``)
plus ``flwr run -c`` overrides. Keys: ``fleet-path`` (default: the default fleet),
``run-dir`` (empty: ``runs/<run name>-<UTC time>``, as ``powerfleet simulate``), ``num-nodes``
(0 = every device of the fleet), ``ship-weights`` ("fleet" = the fleet file's ``ship_weights``,
or true/false), ``segment-s`` (device-clock seconds per segment, default 600: rounds run in
segments, ``strategies/segmented.py``; 0 = one request and one reply per device and round, the
paper's round, bounded by ``round-timeout-s``), ``round-timeout-s`` (with segments: the first
segment's allowance), ``node-wait-s``, ``run-token`` (echoed into report.json so a launcher
knows the report is its own), ``engine`` (the report's engine name: "flower" in simulation,
"flower-deployment" on real SuperNodes) and ``progress-file`` (a launcher in another process
follows progress there). Relative paths resolve against the ServerApp's working directory: the
directory ``flwr run`` was started from. ``make_server_app(settings)`` binds
settings in code instead (a non-empty ``fleet-path`` in run_config still wins).

Run directory layout (all written with ``fleet.reports.report.write_report``):
    run_dir/report.json, devices.csv    the last round: meta (the direct engine's keys, plus
                                        ``round``, ``num_nodes``, ``ship_weights``,
                                        ``run_token``, ``wall_s``) + ``devices`` + ``fleet``
                                        totals, and ``round_totals``: every round's fleet totals
    run_dir/rounds/round-001/...        each round's own report.json + devices.csv
    run_dir/state.json, metrics.prom   (segmented rounds) the coordinator's book, rewritten at
                                        every change: ``powerfleet status`` reads it, a
                                        restarted coordinator resumes from it
The top-level report.json is written once, after the last round, so its presence (with the
launcher's ``run_token``) means the run finished.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, Context, Message, MessageType
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.segment_wire import node_of
from fleet.common.errors import InputError
from fleet.common.names import child_dir
from fleet.common.signals import noting_signals
from fleet.config.app_keys import check_run_config
from fleet.config.fleetfile import Fleet, load_fleet
from fleet.planning.round_logic import SEGMENT_S
from fleet.reports.report import write_report
from fleet.reports.roundstate import STATE_FILE
from fleet.reports.runlife import still_writer
from fleet.rounds.virtual_clock import cached_efficiency
from fleet.trust.store import store_from_fleet
from strategies import coordinator, flower_output, segmented_run
from strategies.efficiencies import EfficiencyKeeper
from strategies.profiles import ProfileKeeper
from strategies.segment_settings import SegmentSettings
from strategies.strategy import PowerAwareStrategy, ReportingGrid

flower_output.install()  # before Flower starts Ray in this process: its noise counted, plain lines

# (done, total, what): the runner's progress convention (simulations/runner.py); called with
# (0, total, "starting") first, once per device reply with its name, and (total, total, "done").
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ServerSettings:
    fleet_path: str
    run_dir: str
    num_nodes: int = 0  # 0: as many as the fleet has devices
    ship_weights: bool | None = None  # None: the fleet file's [run] ship_weights (default true)
    round_timeout_s: float = 600.0
    node_wait_s: float = 300.0
    segment_s: float = SEGMENT_S  # 0: one request per device and round
    engine: str = "flower"
    run_token: str = ""
    progress: ProgressFn | None = None  # simulation only: called from the ServerApp thread
    poll_s: float = 0.25  # the segmented loop's pause between polls of the grid
    overdue_slack_s: float = 30.0  # SegmentSettings': slack before a segment is overdue


def _as_bool(key: str, value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()  # the words check_run_config allows
    if text in ("", "fleet"):
        return None
    if text == "true":
        return True
    if text == "false":
        return False
    raise InputError(f"run config {key}={value!r}: expected true, false or 'fleet'")


def _resolved(path: str) -> str:
    """A run-config path, absolute: relative ones are relative to the ServerApp's working
    directory, which is the directory ``flwr run`` was started from (its local SuperLink
    inherits it); the fleet path then travels to the ClientApps, whose directory may differ."""
    return str(Path(path).expanduser().resolve()) if path else ""


def settings_from_run_config(run_config: dict[str, Any]) -> ServerSettings | None:
    """Settings from the app's run config (``[tool.flwr.app.config]`` + ``flwr run -c``);
    None when it names no fleet."""
    check_run_config(run_config)
    fleet_path = str(run_config.get("fleet-path", "") or "")
    if not fleet_path:
        return None
    try:
        return ServerSettings(
            fleet_path=_resolved(fleet_path),
            run_dir=_resolved(str(run_config.get("run-dir", "") or "")),
            num_nodes=int(run_config.get("num-nodes", 0)),
            ship_weights=_as_bool("ship-weights", run_config.get("ship-weights", "fleet")),
            round_timeout_s=float(run_config.get("round-timeout-s", 600.0)),
            node_wait_s=float(run_config.get("node-wait-s", 300.0)),
            segment_s=_segment_s(run_config.get("segment-s", SEGMENT_S)),
            engine=str(run_config.get("engine", "") or "flower-deployment"),
            run_token=str(run_config.get("run-token", "") or ""),
            progress=_progress_file(_resolved(str(run_config.get("progress-file", "") or ""))),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"run config: {exc}") from None


def _segment_s(value: float | str) -> float:
    seconds = float(value)
    if not (seconds == 0 or 1e-3 <= seconds <= 86400 * 30):
        raise InputError(f"run config segment-s={value!r}: expected 0 or seconds in [0.001, 2.6e6]")
    return seconds


def _progress_file(path: str) -> ProgressFn | None:
    """Progress for a launcher in another process: one JSON line [done, total, what] per event."""
    if not path:
        return None

    def write(done: int, total: int, what: str) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps([done, total, what]) + "\n")

    return write


def resolve_settings(context: Context, fallback: ServerSettings | None) -> ServerSettings:
    settings = settings_from_run_config(dict(context.run_config)) or fallback
    if settings is None:
        raise InputError(
            "no fleet: pass -c \"fleet-path='/abs/fleet.toml'\" to flwr run, "
            "or build the app with make_server_app(settings)"
        )
    if not settings.run_dir:
        # As `powerfleet simulate` does: runs/<run name>-<UTC time> under the working directory.
        name = load_fleet(settings.fleet_path).run.name
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        run_dir = child_dir("runs", f"{name}-{stamp}", settings.fleet_path)  # never outside runs/
        settings = replace(settings, run_dir=str(run_dir))
    return settings


def _emit(settings: ServerSettings, done: int, total: int, what: str) -> None:
    """Report progress; a failing progress display must not stop the fleet's run."""
    if settings.progress is None:
        return
    try:
        settings.progress(done, total, what)
    except Exception as exc:  # noqa: BLE001
        log(WARNING, "progress callback failed: %s", exc)


def run_fleet(grid: Grid, settings: ServerSettings) -> dict[str, Any]:
    """All rounds of one fleet run on this grid; returns the final report (also on disk)."""
    t0 = time.time()
    fleet: Fleet = load_fleet(settings.fleet_path)
    run = fleet.run
    shipped = cached_efficiency(run.efficiency)
    n = settings.num_nodes or len(fleet.devices)
    ship = coordinator.ship_weights(run, settings.ship_weights)
    arrays = coordinator.fleet_arrays(fleet) if ship else ArrayRecord()
    run_dir = Path(settings.run_dir)
    keeper = ProfileKeeper(fleet, store_from_fleet(fleet.path), run_dir)
    learnt = EfficiencyKeeper(fleet, shipped, run_dir)

    def round_config(server_round: int) -> dict[str, str]:
        """Per-round instruction keys: stored profiles and each device's learnt efficiency."""
        return {**keeper.round_config(server_round), **learnt.round_config(server_round)}

    summaries: list[dict[str, Any]] = []
    base_meta: dict[str, Any] = {  # the direct engine's keys (simulations/runner.py), and more
        "run": run.name,
        "fleet_file": str(fleet.path),
        "engine": settings.engine,
        "model": run.model,
        "efficiency": run.efficiency,
        "target_accuracy": run.target_accuracy,
        "mode": run.mode,
        "objective": run.objective,
        "rounds": run.rounds,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "num_nodes": n,
        "ship_weights": ship,
        "run_token": settings.run_token,
    }
    if keeper.types:  # hardware devices without a profile file: the store serves them
        base_meta["profile_store"] = str(keeper.store)
    total = n * run.rounds
    replies = {"done": 0}
    plan = run.objective == "deadline" and run.deadline_s is None
    deadlines: dict[int, float | None] = {}  # the planned deadline per round

    def on_round(
        server_round: int, rows: list[dict[str, object]], deadline_s: float | None = None
    ) -> None:
        if deadline_s is not None:
            deadlines[server_round] = deadline_s
        learnt.absorb(server_round, rows)
        summaries.append(coordinator.round_summary(server_round, rows))
        meta = {**base_meta, "round": server_round}
        if plan:
            meta["deadline_s"] = deadlines.get(server_round)
        write_report(run_dir / "rounds" / f"round-{server_round:03d}", rows, meta)

    ran_on: dict[str, list[str]] = {}  # device -> the nodes its replies came from, in order

    def on_reply(msg: Message, row: dict[str, object] | None = None) -> None:
        """Every train reply (``row``: decoded already by the segmented loop, not twice)."""
        if msg.metadata.message_type == MessageType.QUERY:
            return  # a planning reply: progress counts training replies
        if keeper.absorb(msg) is not None:
            log(INFO, "powerfleet: stored the profile of %s in %s", keeper.stored[-1], keeper.store)
        if row is None:
            row = coordinator.row_from_reply(msg)
        node = None if msg.has_error() else node_of(msg.content)  # an error has no content
        seen = ran_on.setdefault(str(row.get("device")), [])
        if node is not None and node not in seen and len(seen) < 16:
            seen.append(node)
        if row.get("status") == "running":
            return  # a segment: progress counts devices that finished
        replies["done"] += 1
        _emit(settings, min(replies["done"], total), total, str(row.get("device")))

    log(INFO, "powerfleet: %s, %d devices, %d round(s), mode %s", run.name, n, run.rounds, run.mode)
    _emit(settings, 0, total, "starting")
    train_config = coordinator.train_config(fleet, shipped)
    if settings.segment_s > 0:
        state, resumed = segmented_run.open_state(
            run_dir, fleet, settings.engine, settings.run_token, settings.segment_s
        )
        if resumed:
            log(INFO, "powerfleet: resuming %s at round %s", run_dir, state.get("round"))
            summaries.extend(
                {"round": r["round"], **r.get("totals", {})}
                for r in state.get("completed_rounds", [])
            )
        base_meta["segment_s"] = settings.segment_s
        seg = SegmentSettings(
            segment_s=settings.segment_s,
            node_wait_s=settings.node_wait_s,
            identify_wait_s=settings.node_wait_s / 5,  # up to five asks while devices connect
            first_allowance_s=settings.round_timeout_s,
            lockstep=settings.engine == "flower",  # Flower's simulation: one virtual clock
            poll_s=settings.poll_s,
            overdue_slack_s=settings.overdue_slack_s,
        )
        seen: list[int] = []  # the signal that stops this ServerApp, if one does
        try:
            record = lambda signum: segmented_run.interrupted(run_dir, state, seen)  # noqa: E731
            with noting_signals(seen, record):
                done_rows = segmented_run.run_rounds(
                    ReportingGrid(grid),
                    fleet,
                    run_dir,
                    state,
                    seg,
                    arrays=arrays,
                    train_config=train_config,
                    round_config=round_config,
                    expected=n,
                    on_round=lambda r, rows: on_round(
                        r, rows, state.get("plan", {}).get("deadline_s")
                    ),
                    on_reply=on_reply,
                    plan=plan,
                )
        except (KeyboardInterrupt, SystemExit):  # SIGINT/SIGTERM (Flower's handler exits)
            segmented_run.interrupted(run_dir, state, seen)
            raise
        last = run.rounds
        rows = done_rows.get(last) or _round_rows_on_disk(run_dir, last)
        final_arrays = None  # federated: segmented_run keeps run_dir/global_model.pt
        if run.mode == "federated" and (run_dir / "global_model.pt").exists():
            base_meta["global_model"] = str(run_dir / "global_model.pt")
        base_meta["plan"] = state.get("plan") if plan else None
    else:
        strategy = PowerAwareStrategy(
            num_nodes=n,
            mode=run.mode,
            device_order=[d.name for d in fleet.devices],
            node_wait_s=settings.node_wait_s,
            on_round=on_round,
            plan=plan,
            plan_timeout_s=settings.round_timeout_s,
            round_config=round_config,
        )
        strategy.deadlines = deadlines  # one dict: each round's report names its deadline
        result = strategy.start(
            grid=ReportingGrid(grid, on_reply),
            initial_arrays=arrays,
            num_rounds=run.rounds,
            timeout=settings.round_timeout_s,
            train_config=train_config,
        )
        last = max(strategy.rounds) if strategy.rounds else 0
        rows = strategy.rounds.get(last, [])
        final_arrays = result.arrays if result is not None else None
    if learnt.store.observations():  # the devices taught the store: say where it is
        base_meta["efficiency_store"] = str(learnt.store.root)
    meta = {**base_meta, "round": last, "round_totals": summaries, "wall_s": time.time() - t0}
    order = [d.name for d in fleet.devices]  # where each device ran (Ray node or host)
    meta["ran_on"] = {name: ran_on[name] for name in order if ran_on.get(name)}
    if meta.get("plan") is None:
        meta.pop("plan", None)
    if plan:
        meta["deadline_s"] = deadlines.get(last)
    if run.mode == "federated" and final_arrays is not None and len(final_arrays) > 0:
        # the federated outcome is a model: keep it beside the report it came with
        from clients.records import state_dict_of
        from fleet.training.task import write_weights

        path = run_dir / "global_model.pt"
        run_dir.mkdir(parents=True, exist_ok=True)
        write_weights(state_dict_of(final_arrays), str(path))
        meta["global_model"] = str(path)
    if settings.segment_s > 0:  # superseded by a restarted coordinator: its report, not ours
        still_writer(run_dir / STATE_FILE)
    report = write_report(run_dir, rows, meta)
    if settings.segment_s > 0:
        segmented_run.finish(run_dir, state)
    log(INFO, "powerfleet: report written to %s", run_dir / "report.json")
    # `flwr run` ends with the table `powerfleet simulate` prints (a display never fails a run)
    try:
        flower_output.print_result({**report, "run_dir": str(run_dir)})
    except Exception as exc:  # noqa: BLE001
        log(WARNING, "powerfleet: the result table could not be printed: %s", exc)
    filtered = flower_output.summary()
    if filtered:
        log(INFO, "powerfleet: %s", filtered)
    _emit(settings, total, total, "done")
    return report


def _round_rows_on_disk(run_dir: Path, server_round: int) -> list[dict[str, object]]:
    """A round closed before a coordinator restart: its rows as its report wrote them."""
    from fleet.reports.report import read_report

    try:
        devices = read_report(run_dir / "rounds" / f"round-{server_round:03d}")["devices"]
        return list(devices) if isinstance(devices, list) else []
    except (InputError, KeyError, TypeError):
        return []


def make_server_app(settings: ServerSettings | None = None) -> ServerApp:
    """A ServerApp bound to ``settings`` (simulation); with None it reads run_config."""
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        run_fleet(grid, resolve_settings(context, settings))

    return server_app


# The component `flwr run` loads (root pyproject.toml, deployment/flower_app): run_config settings.
app = make_server_app()
