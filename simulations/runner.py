"""Run a fleet scenario: through Flower's simulation engine, or directly for large what-ifs.

Both engines call the same device code (``fleet.rounds.virtual_clock.simulate_device``, the device
round on the virtual clock, or ``fleet.rounds.host_training.train_device`` for a device whose fleet
entry says ``learning = "train"``, fine-tuning the weights the coordinator would ship) and write
the same round report (``fleet.reports.report.write_report``), and both run the round itself
(segments of ``segment-s`` device seconds, the deadline re-planned, the statuses) through one
implementation (``fleet.planning.round_logic``), so a 1,000-device direct run answers the same
question a Flower run does, minus Flower's per-message cost. Flower is imported only when the
``flower`` engine is asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import simulations
from fleet.cli.common import note
from fleet.common.errors import InputError
from fleet.common.names import child_dir
from fleet.common.signals import Interrupted, name_of, signum_of
from fleet.config.fleetfile import Fleet, load_fleet
from fleet.planning.round_logic import SEGMENT_S
from fleet.reports import roundstate, runlife
from fleet.reports.report import write_report
from fleet.rounds import statuses
from fleet.rounds.preflight import check_devices
from fleet.rounds.virtual_clock import cached_efficiency, simulate_device

ENGINES = ("flower", "direct")
DEFAULT_FLEET = Path(simulations.__file__).resolve().parent / "fleets" / "default.toml"

Progress = Callable[[int, int, str], None]  # (done, total, device name)


def default_run_dir(fleet: Fleet, root: str | Path = "runs") -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return child_dir(root, f"{fleet.run.name}-{stamp}", fleet.path)  # never outside root


def run_meta(fleet: Fleet, engine: str) -> dict[str, object]:
    r = fleet.run
    return {
        "run": r.name,
        "fleet_file": fleet.path,
        "engine": engine,
        "model": r.model,
        "efficiency": r.efficiency,
        "target_accuracy": r.target_accuracy,
        "mode": r.mode,
        "objective": r.objective,
        "rounds": r.rounds,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class StateWriter:
    """The direct engine's round state (``fleet.reports.roundstate``): every device pending,
    then its final row as it finishes, ``finished`` at the end, so ``powerfleet status`` reads
    a direct run as it reads a Flower one. Written at most once per ``every_s`` of wall time
    (plus the first and the last write): a 1,000-device fleet finishes devices far faster than
    anyone reads them, and each write still writes every device's bytes (it renders only the
    devices that changed: ``roundstate.Writer``)."""

    def __init__(
        self, fleet: Fleet, run_dir: Path, every_s: float = 1.0, segment_s: float = SEGMENT_S
    ) -> None:
        self.run_dir, self.every_s = run_dir, every_s
        self.files = roundstate.Writer(run_dir)  # renders only the devices that changed
        devices = [(d.name, d.device_type, d.budget_w) for d in fleet.devices]
        digest = roundstate.fleet_sha256(fleet.path)
        self.state = roundstate.new_state(
            fleet.run.name, fleet.path, digest, "direct", "", 1, segment_s, devices
        )
        self.waiting: list[tuple[dict, str]] = []  # (row, when) finished since the last write
        self._write()

    def _write(self) -> None:
        for row, when in self.waiting:
            roundstate.record_row(self.state, row, when)
        self.waiting = []
        self.files.write(self.state)
        self.last = time.monotonic()

    def started_device(self, name: str) -> None:
        """A device that trains for real starts (minutes of work): shown running at once,
        with every row finished before it."""
        self.state["devices"][name]["status"] = "running"
        self._write()

    def interrupted(self, exc: BaseException) -> Interrupted:
        """The run stopped by a signal: recorded (``runlife.interrupt``: when, how far, every
        unfinished device ``interrupted``), and the exception that says it in one line."""
        for row, when in self.waiting:
            roundstate.record_row(self.state, row, when)
        self.waiting = []
        line = runlife.interrupt(self.state, name_of(exc))
        self.files.write(self.state)
        return Interrupted(f"{line}; state in {self.run_dir}", signum_of(exc))

    def finished_device(self, row: dict) -> None:
        self.waiting.append((row, roundstate.now_utc()))  # recorded when next written
        if time.monotonic() - self.last >= self.every_s:
            self._write()

    def finish(self, report: dict) -> None:
        when = {row["device"]: w for row, w in self.waiting}
        self.waiting, stamp = [], roundstate.now_utc()
        for row in report["devices"]:  # the report's rows: idle waits included
            seen = when.get(row["device"]) or self.state["devices"][row["device"]]["last_seen_utc"]
            roundstate.record_row(self.state, row, seen or stamp)
        if report.get("deadline_s") is not None:
            self.state["plan"]["deadline_s"] = report["deadline_s"]
        self.state["completed_rounds"] = [{"round": 1, "totals": report["fleet"]}]
        self.state["finished"] = True
        self._write()


def run_direct(
    fleet: Fleet, run_dir: Path, progress: Progress | None = None, segment_s: float | None = None
) -> dict:
    """Every device in this process: no Flower, no Ray, same rows.

    A replay fleet runs ``[run] rounds`` rounds, each shipped what the devices taught the
    efficiency store in the rounds before (``fleet.planning.learning_rounds``), as the Flower
    coordinator does; each round runs in segments of ``segment_s`` device seconds (None: the
    coordinator's default, 0: each device in one piece) through the round logic the Flower
    coordinator drives (``fleet.planning.round_logic``); the report holds the last round's
    rows. A fleet with a device that trains for real runs each device in one piece (host
    training cannot stop mid-round: Flower runs it in one segment too)."""
    seconds = SEGMENT_S if segment_s is None else float(segment_s)
    if all(d.learning == "trace" for d in fleet.devices):
        return _replay_rounds(fleet, run_dir, progress, seconds)
    shipped = cached_efficiency(fleet.run.efficiency)
    rows = []
    total = len(fleet.devices)
    weights = _shipped_weights(fleet)
    data_dir = fleet.run.data_dir or None
    state = StateWriter(
        fleet, run_dir, segment_s=0.0
    )  # after the checks above: bad input writes nothing
    try:
        for k, spec in enumerate(fleet.devices, start=1):
            if spec.learning == "train":
                from fleet.rounds.host_training import train_device  # torch only when one trains

                state.started_device(spec.name)
                res, _ = train_device(spec, shipped, fleet.run, weights, data_dir)
            else:
                res = simulate_device(spec, shipped, fleet.run)
            rows.append(res.to_dict())
            state.finished_device(rows[-1])
            if progress:
                progress(k, total, spec.name)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM under sigterm_as_interrupt
        raise state.interrupted(exc) from None
    report = write_report(run_dir, rows, run_meta(fleet, "direct"))
    state.finish(report)
    return report


def _replay_rounds(
    fleet: Fleet, run_dir: Path, progress: Progress | None, segment_s: float
) -> dict:
    """The direct engine's rounds of a replay fleet (every round plans its deadline)."""
    import tempfile

    from fleet.planning.learning_rounds import simulate_rounds
    from fleet.planning.whatif import deadline_vs_time
    from fleet.trust.efficiency_store import EfficiencyStore, store_path

    state = StateWriter(fleet, run_dir, segment_s=segment_s)
    store = store_path(fleet.run, str(fleet.path), run_dir)
    try:
        rounds = simulate_rounds(fleet, None, fleet.run.rounds, store, segment_s, progress)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM under sigterm_as_interrupt
        raise state.interrupted(exc) from None
    last = rounds[-1]
    for row in last.rows:
        state.finished_device(row)
    meta = run_meta(fleet, "direct")
    if segment_s > 0:  # as the Flower coordinator's report says it
        meta["segment_s"] = segment_s
    if last.plan is not None:
        meta["plan"] = last.plan
    if fleet.run.rounds > 1:
        meta["round_totals"] = [{"round": k, **r.totals} for k, r in enumerate(rounds, 1)]
    if fleet.run.objective == "deadline":
        with tempfile.TemporaryDirectory() as tmp:  # the time objective's rounds, for comparison
            ref = simulate_rounds(fleet, "time", fleet.run.rounds, tmp, segment_s)[-1]
        meta["deadline_s"] = last.deadline_s
        meta["deadline_vs_time"] = deadline_vs_time(ref.rows, last.rows)
    if EfficiencyStore(store).observations():
        meta["efficiency_store"] = str(store)
    report = write_report(run_dir, last.rows, meta)
    state.finish(report)
    return report


def refuse_unfinished(run_dir: Path, fleet: Fleet) -> None:
    """The direct engine starts every run afresh (it has no checkpoints to resume from, and
    reruns a fleet in seconds): a run directory holding an unfinished run, or another fleet
    file's finished one, is refused in one line rather than overwritten. A finished run of
    this fleet file (edited or not: a researcher iterating on it) is rerun in place."""
    if not (run_dir / roundstate.STATE_FILE).is_file():
        return
    state, _ = roundstate.read_run(run_dir)
    status = statuses.run_status(state)
    before = str(state.get("fleet_file") or "")
    if status == "finished" and not _same_fleet(state, before, fleet.path):
        raise InputError(
            f"{run_dir}: holds the finished run of another fleet file ({before}); use another "
            "--run-dir"
        )
    if status == "running":
        w = state.get("writer") or {}
        raise InputError(
            f"{run_dir}: a run is in progress there (pid {w.get('pid')} on {w.get('host')}); "
            "use another --run-dir"
        )
    if status == "interrupted":
        raise InputError(
            f"{run_dir}: holds an interrupted run ({runlife.interruption_line(state)}); the "
            "direct engine does not resume: use a new --run-dir (the flower engine and "
            "powerfleet coordinator resume theirs)"
        )


def _same_fleet(state: dict, before: str, path: str) -> bool:
    """Whether the run in ``state`` is of the fleet file at ``path``: the same file, or (a
    relative path is its cwd's) the same bytes."""
    try:
        if Path(before).resolve() == Path(path).resolve():
            return True
    except (OSError, RuntimeError):
        pass
    return state.get("fleet_sha256") == roundstate.fleet_sha256(path)


def with_deadline_comparison(
    fleet: Fleet, run_dir: Path, report: dict, segment_s: float | None = None
) -> dict:
    """A Flower run's report with the direct engine's comparison (``deadline_vs_time``): what
    the time objective would have given on the same fleet, rewritten into report.json."""
    from fleet.planning.whatif import deadline_vs_time, simulate_fleet

    meta = {k: v for k, v in report.items() if k not in ("devices", "fleet")}
    meta["deadline_vs_time"] = deadline_vs_time(
        simulate_fleet(fleet, "time", segment_s=segment_s).rows, report["devices"]
    )
    return write_report(run_dir, report["devices"], meta)


def _shipped_weights(fleet: Fleet) -> dict | None:
    """What the coordinator would ship (``fleet.training.task.initial_weights``), when a device
    trains for real and the fleet ships weights; None: each device starts from its seeded model."""
    if not any(d.learning == "train" for d in fleet.devices):
        return None
    from fleet.training.task import initial_weights

    return initial_weights(fleet) if fleet.run.ship_weights else None


def ignored_deadline(fleet: Fleet) -> str:
    """What is said when ``[run] deadline_s`` is set but the run's objective takes no deadline
    (empty otherwise). Said, not refused: the same file may serve ``whatif --objective
    deadline``, which reads it; a round that ignored it said nothing."""
    from fleet.core.objectives import get_objective

    run = fleet.run
    if run.deadline_s is None or "deadline_s" in get_objective(run.objective).context:
        return ""
    return (
        f"{fleet.path}: [run] deadline_s = {run.deadline_s:g} is not used: objective "
        f'{run.objective!r} takes no deadline (objective = "deadline" does)'
    )


def simulate(
    fleet_path: str | Path | None = None,
    engine: str = "flower",
    run_dir: str | Path | None = None,
    progress: Progress | None = None,
    segment_s: float | None = None,
    ray_address: str | None = None,
    device_cpus: int | None = None,
    device_gpus: float | None = None,
) -> dict:
    """Load the fleet, run one round on the chosen engine, return the report (also on disk).

    ``segment_s`` (either engine): device seconds per segment, None for the default
    (``round_logic.SEGMENT_S``), 0 for one request per device and round
    (docs/architecture.md, "Segmented rounds"). ``ray_address``, ``device_cpus``,
    ``device_gpus`` (flower engine only): a running Ray cluster and what each device holds
    there (``simulations.flower_engine.RayPlacement``); None: the fleet's ``[run] ray_*``."""
    fleet = load_fleet(fleet_path or DEFAULT_FLEET)
    notes = check_devices(fleet, every_device_replayed=False)  # a fleet's mistake: before work
    for said in [*notes, ignored_deadline(fleet)]:
        if said:
            note("simulate", f"warning: {said}")
    ray_given = [ray_address, device_cpus, device_gpus]
    if engine == "direct" and any(v is not None for v in ray_given):
        raise InputError("--ray-address, --device-cpus and --device-gpus need --engine flower")
    out = Path(run_dir) if run_dir else default_run_dir(fleet)
    t0 = time.perf_counter()
    if engine == "direct":
        refuse_unfinished(out, fleet)
        report = run_direct(fleet, out, progress, segment_s)
    elif engine == "flower":
        from simulations.flower_engine import run_flower

        report = run_flower(
            fleet.path,
            str(out),
            progress,
            segment_s=segment_s,
            ray_address=ray_address,
            device_cpus=device_cpus,
            device_gpus=device_gpus,
        )
        if fleet.run.objective == "deadline":
            report = with_deadline_comparison(fleet, out, report, segment_s)
    else:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    report["wall_s"] = time.perf_counter() - t0
    report["run_dir"] = str(out)
    return report
