"""A fleet run in segmented rounds, persisted so that a coordinator restart loses nothing.

Why separate from ``server_app.py``: the ServerApp reads settings and writes reports; this is the
run's life across rounds and restarts. At start it reads ``run_dir/state.json``
(``fleet.reports.roundstate``): none, and the run starts at round 1; one from an unfinished run
of the *same* fleet file (same SHA-256), and the run resumes: rounds already closed are not run
again (their reports are on disk), devices that finished the current round keep their rows and
are not trained again, and every other device resumes from its progress and its own checkpoint
once its node identifies. A finished run, or another fleet's, is refused in one line: a run
directory holds one run.

Federated runs keep the global model after each closed round in ``run_dir/global_model.pt``, so
a restart in round k starts from round k-1's aggregate.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from flwr.supercore import log

from clients import segment_wire as wire
from fleet.config.fleetfile import Fleet
from fleet.reports import roundstate, runlife
from strategies import coordinator
from strategies import round_book as book
from strategies.segment_settings import SegmentSettings
from strategies.segmented import ReplyHook, SegmentedRound

RoundHook = Callable[[int, list[dict[str, object]]], None]


def open_state(
    run_dir: Path, fleet: Fleet, engine: str, token: str, segment_s: float
) -> tuple[dict, bool]:
    """(state, resumed): the run's book, read back when it is an unfinished run of this fleet."""
    state = roundstate.resumable(run_dir, fleet.path)
    if state is not None:
        state["run_token"] = token
        book.resume_after_restart(state)
        return state, True
    state = roundstate.new_state(
        run=fleet.run.name,
        fleet_file=str(fleet.path),
        fleet_sha256=roundstate.fleet_sha256(fleet.path),
        engine=engine,
        run_token=token,
        rounds=fleet.run.rounds,
        segment_s=segment_s,
        devices=[],
    )
    state["run_uid"] = uuid.uuid4().hex  # kept across restarts: the devices' checkpoint key
    return state, False


def run_rounds(
    grid: Grid,
    fleet: Fleet,
    run_dir: Path,
    state: dict,
    settings: SegmentSettings,
    *,
    arrays: ArrayRecord,
    train_config: ConfigRecord,
    round_config: Callable[[int], dict[str, Any]],
    expected: int,
    on_round: RoundHook,
    on_reply: ReplyHook | None = None,
    plan: bool = False,
) -> dict[int, list[dict[str, object]]]:
    """Every round not yet closed, in segments; returns the rows of the rounds run here."""
    run = fleet.run
    model_path = run_dir / "global_model.pt"
    if run.mode == "federated" and model_path.exists() and state.get("completed_rounds"):
        arrays = _read_model(model_path)
    first = int(state.get("round") or 1)
    if any(int(r.get("round", 0)) == first for r in state.get("completed_rounds", [])):
        first += 1
    out: dict[int, list[dict[str, object]]] = {}
    files = roundstate.Writer(run_dir)  # one for the run: each write renders what changed
    for server_round in range(first, run.rounds + 1):
        if int(state.get("round") or 0) != server_round:
            book.start_round(state, server_round)
            state["plan"] = {"deadline_s": None, "revisions": []}
        config = ConfigRecord(dict(train_config))
        config["server-round"] = server_round
        config[wire.RUN_TOKEN] = str(state.get("run_uid") or "")
        config.update(round_config(server_round))
        log(INFO, "segments: round %d of %d", server_round, run.rounds)
        driver = SegmentedRound(
            grid,
            state,
            run_dir,
            settings,
            config,
            arrays,
            devices=[d.name for d in fleet.devices],
            describe={d.name: (d.device_type, d.budget_w) for d in fleet.devices},
            expected=expected,
            mode=run.mode,
            on_reply=on_reply,
            plan=plan,
            files=files,
        )
        rows, weights = driver.run()
        rows = coordinator.order_rows(rows, [d.name for d in fleet.devices])
        out[server_round] = rows
        on_round(server_round, rows)
        if run.mode == "federated":
            averaged = coordinator.average_weights(weights)
            if averaged is not None:
                arrays = averaged
                _write_model(model_path, arrays)
        summary = coordinator.round_summary(server_round, rows)
        totals = {k: v for k, v in summary.items() if k != "round"}
        state.setdefault("completed_rounds", []).append({"round": server_round, "totals": totals})
        files.write(state)
    return out


def interrupted(run_dir: Path, state: dict, seen: list[int]) -> None:
    """The ServerApp stopped by a signal (``seen``: which, when known): the run's state says
    ``interrupted``, with when and how far it got, before the process exits; a coordinator
    started again on the run directory resumes it. Best effort: the process is on its way
    out, and a reader finds a writer that is gone anyway (``roundstate.read_run``)."""
    import signal

    if state.get("interrupted"):
        return  # recorded already, by the signal handler
    why = signal.Signals(seen[0]).name if seen else "the ServerApp was stopped"
    try:
        line = runlife.interrupt(state, why)
        roundstate.write_state(run_dir, state)
        log(INFO, "powerfleet: %s", line)
    except Exception as exc:  # noqa: BLE001 - never mask the exit with a second error
        log(WARNING, "powerfleet: could not record the interruption: %s", exc)


def finish(run_dir: Path, state: dict) -> None:
    state["finished"] = True
    roundstate.write_state(run_dir, state)


def _write_model(path: Path, arrays: ArrayRecord) -> None:
    from clients.records import state_dict_of
    from fleet.training.task import write_weights

    path.parent.mkdir(parents=True, exist_ok=True)
    write_weights(state_dict_of(arrays), str(path))


def _read_model(path: Path) -> ArrayRecord:
    from fleet.training.task import read_weights

    return ArrayRecord(read_weights(str(path)))
