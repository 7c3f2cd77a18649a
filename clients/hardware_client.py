"""A hardware node's round: drives a real board through the on-device agent.

``clients.client_app`` hands a node whose config says ``client = "hardware"`` here. One round
on a board: start the agent (``python -m fleet.agent`` under the interpreter the node config
names, e.g. JetPack's Python 3.6), say hello, get a profile (the node config's ``profile`` CSV
when it exists, else the agent profiles the model with the staircase plan under the budget and
writes the CSV there), then the device round (``fleet.rounds.device_round.run_device``: align, check
the device type, select under the budget with the shipped efficiency) on the ``AgentRunner``.
When the agent's hello lists ``train`` and the node config names ``data``, the agent runs the
closed loop on the board (``fleet/agent/closedloop.py``) with the device's whole budget (a
schedule, a fixed budget, or the live ``budget-file``), the profile rows and the shipped
efficiency: it re-selects and re-locks at every budget change and steps the clock down when
the rail runs over; the row gets the measured time, energy and power, every segment and guard
event. Otherwise the choice is only locked and the reply says ``status = "selected"`` with no
time or energy. The agent is shut down (which restores the clocks) or killed on every exit
path.

Weights travel as files beside the agent (``TrainFiles``): the received ArrayRecord is written
as a state_dict the agent loads, the fine-tuned one comes back in federated mode, and the
trainer checkpoints beside them so a board that loses power resumes instead of restarting.
The device's ``data`` for a hardware node is a ``.pt`` file of ``{"train": (x, y), "test":
(x, y)}`` tensors on the board.

Node config keys (besides the device's own: device-name, device-type, budget-w, profile...):
``backend`` (default jetson), ``agent-python``, ``agent-timeout-s`` (per long command, default
3600), ``work-dir`` (this node's and its agent's private 0700 directory: the agent reads and
writes only there, so a hardware node's ``data`` and ``budget-file`` lie inside it), and the
chosen backend's own options under their public names (``clients.agent_link.AgentSettings``,
generated from the backend registry: e.g. ``sysfs-root``, ``state-dir``, ``rail``,
``gpu-index``, ``allow-clock-changes``, ``profile-csv``), and ``budget-file`` (a file an operator
or a battery/solar controller rewrites; the board re-reads it every second, and it takes the
place of the fleet's budget).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, RecordDict

from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings, ProgressCallback
from fleet.agent.confine import ConfineError, default_work_dir, owned_dir
from fleet.agent.profile_io import atomic_write_text, read_rows, write_rows
from fleet.budgets.codec import format_budget, format_schedule
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency, scaled_lr
from fleet.core.profile import Profile, load_profile
from fleet.rounds.device_round import TRAINED, DeviceResult, Round, Segment, run_device
from fleet.training.task import read_weights, write_weights


def work_dir_for(settings: AgentSettings) -> Path:
    """This node's private directory, shared with the agent it starts: the node config's
    ``work-dir``, else the agent's own default (``confine.default_work_dir``, so the two agree
    when none is given); created 0700, ownership checked (never a predictable path under a
    world-writable /tmp)."""
    try:
        return Path(owned_dir(settings.work_dir or default_work_dir()))
    except ConfineError as exc:
        raise InputError(f"node config work-dir: {exc}") from None


def profile_path_for(
    spec: DeviceSpec, ins: records.TrainInstruction, settings: AgentSettings
) -> str:
    """Where this device's profile lives (or will be written)."""
    if spec.profile:
        return spec.profile
    return str(work_dir_for(settings) / f"{spec.name}_{ins.run.model or 'model'}.csv")


def obtain_profile(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
    info: dict[str, Any] | None = None,
) -> Profile:
    """The profile this round starts from; ``info`` says where it came from (``origin``).

    In order: the coordinator's store shipped it back (``stored``: this board's own, written to
    the profile path, no probe; ``sibling``: a board of the same type's, every row unverified,
    used when this board has no file, so the device round probes its choice before training),
    the profile CSV on this board (``local``), else first contact: the agent profiles in
    predict mode (a small design of probes, the rest predicted; ``profiled``), falling back to
    the staircase under the highest budget it faces (or the full grid) when the grid is too
    small to predict. Batch sizes are the shipped efficiency's.
    """
    info = {} if info is None else info
    path = profile_path_for(spec, ins, settings)
    shipped = ins.profiles.get(spec.name) or {}
    text, origin = shipped.get("csv"), shipped.get("origin")
    if text and (origin == "stored" or not Path(path).is_file()):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, str(text))
        info.update(origin=str(origin or "stored"), probes=0)
        return load_profile(path)
    if Path(path).is_file():
        info.update(origin="local", probes=0)
        return load_profile(path)
    if not ins.run.model:
        raise InputError(f"device {spec.name}: no profile at {path} and no model to profile")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the agent writes only inside its work dir: a profile wanted elsewhere is copied out after
    work = work_dir_for(settings)
    inside = Path(path).resolve().parent == work
    out = path if inside else str(work / f"{spec.name}_{ins.run.model}.profile.csv")
    args: dict[str, Any] = {
        "model": ins.run.model,
        "batch_sizes": ins.efficiency.batch_sizes,
        "out": out,
        "rows": False,
    }
    timeout = settings.long_timeout_s
    try:
        reply = link.request(
            "profile", timeout_s=timeout, on_progress=on_progress, predict=True, **args
        )
    except AgentError as exc:
        if "too few" not in str(exc):
            raise
        highest = highest_budget(spec)
        if highest is not None:
            args["budget_w"] = highest
        reply = link.request("profile", timeout_s=timeout, on_progress=on_progress, **args)
    if not inside:
        shutil.copyfile(out, path)
    info.update(origin="profiled", probes=int(reply.get("probes") or 0))
    return load_profile(path)


def highest_budget(spec: DeviceSpec) -> float | None:
    """The highest budget the device will face (None: unlimited): the staircase plan profiles
    the frontier under it, which covers every lower step of a schedule too."""
    steps = [s.budget_w for s in spec.schedule] or [spec.budget_w]
    return None if any(b is None for b in steps) else max(b for b in steps if b is not None)


@dataclass
class AgentRunner:
    """Runner of the device round on a board: the agent's closed loop trains under the budget.

    With ``train`` in the agent's hello and ``data`` in the node config, the agent gets the
    device's whole budget (its schedule, or its fixed budget; and the node config's live
    ``budget-file`` when it names one), the aligned profile rows and the shipped efficiency,
    and runs the closed loop (``fleet/agent/closedloop.py``): it selects, locks, re-selects at
    every budget change and guards the rail; the row takes its measured time, energy and power,
    every segment and every guard event. Otherwise the round's choice is only locked and the
    row says ``selected`` (no time or energy).
    """

    link: AgentLink
    settings: AgentSettings
    commands: frozenset[str] = frozenset()
    files: TrainFiles | None = None
    on_progress: ProgressCallback | None = None
    learning: str | None = None
    truth: Efficiency | None = None
    probes: int = 0  # points measured by ``probe`` this round

    def run(self, rnd: Round, res: DeviceResult) -> None:
        try:
            if "train" in self.commands and rnd.spec.data:
                self._train(rnd, res)
            else:
                self._lock_only(rnd, res)
        except (AgentError, OSError) as exc:
            res.status, res.message = "error", " ".join(str(exc).split())

    def _lock_only(self, rnd: Round, res: DeviceResult) -> None:
        choice, run = rnd.first, rnd.run
        lr = scaled_lr(choice.batch_size, run.lr_ref_batch, run.lr_ref, run.optimizer)
        self.link.request("lock", timeout_s=self.settings.timeout_s, freq_mhz=choice.freq_mhz)
        res.status = "selected"
        res.message = f"locked {choice.freq_mhz:g} MHz for batch {choice.batch_size} (lr {lr:.3g})"
        if "train" not in self.commands:
            res.message += (
                "; training on the device needs the trainer: this agent has no 'train' command"
            )
        else:
            res.message += "; no data to train on (the device's node config names no 'data')"

    def probe(self, run: RunSettings, batch_size: int, freq_mhz: float) -> dict[str, Any]:
        """Measure one point on the board (the agent's ``profile`` on that point alone): the
        device round's verify-before-trust and coverage fill (``fleet.trust.gate``) call this."""
        if not run.model:
            raise InputError("probing a point needs the run's model")
        try:
            out = self.link.request(
                "profile",
                timeout_s=self.settings.long_timeout_s,
                on_progress=self.on_progress,
                model=run.model,
                batch_sizes=[int(batch_size)],
                freqs=[float(freq_mhz)],
            )
        except (AgentError, OSError) as exc:
            raise InputError(
                f"probe {batch_size}@{freq_mhz:g}: {' '.join(str(exc).split())}"
            ) from None
        rows = out.get("rows") or []
        if len(rows) != 1:
            raise InputError(
                f"probe {batch_size}@{freq_mhz:g}: the agent returned {len(rows)} rows"
            )
        self.probes += 1
        return dict(rows[0])

    def _train(self, rnd: Round, res: DeviceResult) -> None:
        """The agent's closed-loop ``train``; its reply fills the row (``fill_from_train``)."""
        run = rnd.run
        out = self.link.request(
            "train",
            timeout_s=self.settings.long_timeout_s,
            on_progress=self.on_progress,
            model=run.model,
            batch_size=run.lr_ref_batch,  # the learning-rate reference pair: the agent scales
            lr=run.lr_ref,
            optimizer=run.optimizer,
            target_accuracy=run.target_accuracy,
            data=rnd.spec.data,
            seed=run.seed,
            **budget_args(rnd, self.settings),
            **train_extras(run),
            **(self.files.agent_args() if self.files else {}),
        )
        fill_from_train(res, out, run.target_accuracy)
        refreshed = out.get("refreshed_profile_csv")
        if isinstance(refreshed, str) and refreshed.strip() and rnd.spec.profile:
            merge_refreshed(rnd.spec.profile, refreshed)


def budget_args(rnd: Round, settings: AgentSettings) -> dict[str, Any]:
    """The closed loop's inputs: the budget (live file, else schedule, else fixed), the aligned
    profile's rows and the shipped efficiency, and the objective when the board's chooser has it
    (``deadline`` with the round's ``deadline_s``, from ``[run]`` or the planning exchange: the
    board then keeps every re-selection on the deadline, ``fleet/agent/deadline.py``).
    """
    args: dict[str, Any] = {}
    if settings.budget_file:
        args["budget_file"] = settings.budget_file
    elif len(rnd.schedule) > 1:
        args["budget_schedule"] = format_schedule(rnd.schedule)
    else:
        args["budget_w"] = format_budget(rnd.schedule[0].budget_w)
    args["profile"] = [
        {
            "batch_size": p.batch_size,
            "freq_mhz": p.freq_mhz,
            "time_per_batch_s": p.time_per_batch_s,
            "peak_power_w": _finite(p.peak_power_w),
            "mean_power_w": _finite(p.mean_power_w),
        }
        for p in rnd.profile.points
    ]
    args["efficiency"] = {str(b): _finite(n) for b, n in rnd.shipped.samples.items()}
    objective = rnd.run.objective
    if objective == "deadline":
        deadline = rnd.context.get("deadline_s")  # run_device refuses a deadline run without
        if deadline is not None:
            args["objective"], args["deadline_s"] = objective, float(deadline)
    elif objective in BOARD_OBJECTIVES:
        args["objective"] = objective
    return args


# The objectives the board's closed loop knows (fleet/agent/closedloop.py); others keep its
# default (time).
BOARD_OBJECTIVES = ("time", "energy", "deadline")


def train_extras(run: RunSettings) -> dict[str, Any]:
    """``[run]`` keys the agent's trainer takes as they are (``max_samples``...)."""
    keys = ("max_samples", "eval_every_samples", "guard_window_s")
    return {k: run.extra[k] for k in keys if run.extra.get(k) is not None}


def merge_refreshed(path: str, refreshed_csv: str) -> None:
    """The board's drift-refreshed table (``fleet.agent.driftwatch``) into this device's profile
    file: its rows replace the same (batch size, clock) rows, the rest of the file (batch sizes
    the round did not ship, the header) stays. ``run_on_agent`` then sees the file changed and
    sends it to the coordinator's store."""
    import tempfile

    header, rows, comments = read_rows(path)
    with tempfile.TemporaryDirectory(prefix="powerfleet-refresh-") as tmp:
        new_file = Path(tmp) / "refreshed.csv"
        new_file.write_text(refreshed_csv)
        _h, new_rows, new_comments = read_rows(str(new_file))
    fresh = {(int(r["batch_size"]), float(r["freq_mhz"])): r for _n, r in new_rows}
    merged = [fresh.pop((int(r["batch_size"]), float(r["freq_mhz"])), r) for _n, r in rows]
    merged += list(fresh.values())
    notes = [c for c in new_comments if c not in comments]
    columns = list(header) + [c for c in _h if c not in header]
    write_rows(path, merged, list(comments) + notes, columns)


def fill_from_train(res: DeviceResult, out: dict[str, Any], target: float) -> None:
    """The agent's closed-loop reply -> the row: measured time, energy and power, the first
    segment's (b, f), every segment and guard event, and the status.

    Measured power replaces the profile's, so a board that ran over its budget shows up in the
    report's budget violations. ``over-budget``: the guard ran out of clocks and stopped
    training (the checkpoint is kept on the board).
    """
    for key in ("time_s", "energy_j", "peak_power_w", "mean_power_w", "accuracy", "samples"):
        value = out.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            setattr(res, key, float(value))
    segments = [s for s in out.get("segments") or [] if isinstance(s, dict)]
    res.segments = [segment_of(s) for s in segments]
    res.guard_events = [dict(e) for e in out.get("guard_events") or [] if isinstance(e, dict)]
    first = next((s for s in res.segments if s.batch_size is not None), None)
    if first is not None:
        res.batch_size, res.freq_mhz = first.batch_size, first.freq_mhz
    status = out.get("status")
    late = out.get("late") is True  # the board's deadline plan missed from the start
    if status == "over-budget":
        res.status = "over-budget"
        res.message = str(out.get("stop_reason") or "the guard ran out of clocks under the budget")
    elif status == "reached" or (status is None and out.get("reached")):
        res.status, res.message = ("late" if late else "ok"), ""
    else:
        res.status = "not reached"
        res.message = f"target {target:g} not reached within {out.get('samples')} samples"
    notes = [str(n) for n in out.get("notes") or []]
    if notes:
        res.message = "; ".join(([res.message] if res.message else []) + notes)


def segment_of(s: dict[str, Any]) -> Segment:
    """One of the agent's segments as the row's ``Segment`` (its samples are not counted)."""

    def num(key: str) -> float | None:
        v = s.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    b = s.get("batch_size")
    return Segment(
        start_s=num("start_s") or 0.0,
        end_s=num("end_s") or 0.0,
        budget_w=num("budget_w"),
        batch_size=int(b) if isinstance(b, (int, float)) else None,
        freq_mhz=num("freq_mhz"),
        samples=math.nan,
        energy_j=num("energy_j") if num("energy_j") is not None else math.nan,
        peak_power_w=num("peak_power_w"),
        reason=str(s.get("reason") or ""),
    )


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def run_on_agent(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
    files: TrainFiles | None = None,
    profile_info: dict[str, Any] | None = None,
) -> dict[str, object]:
    """hello -> profile -> the device round on the agent runner; returns the report row.

    ``profile_info`` (filled in): where the profile came from (``origin``), probes measured
    this round, the board's provenance, and ``csv`` when the profile is new or changed.

    Infeasible budgets and agent failures become the row's status and message, never an
    exception, so one board cannot stop the fleet's round.
    """
    path = profile_path_for(spec, ins, settings)
    info = {} if profile_info is None else profile_info
    try:
        hello = link.request("hello", timeout_s=settings.timeout_s)
        commands = frozenset(hello.get("capabilities", {}).get("commands", []))
        profile = obtain_profile(link, spec, ins, settings, on_progress, info)
    except (AgentError, InputError, OSError) as exc:
        res = DeviceResult.for_device(spec, ins.efficiency.source, profile=path)
        res.message = " ".join(str(exc).split())
        return res.to_dict()
    before = _read_text(path)
    runner = AgentRunner(link, settings, commands, files, on_progress)
    row = run_device(spec, profile, ins.efficiency, ins.run, runner)
    row.profile = path
    after = _read_text(path)
    board = hello.get("device") if isinstance(hello.get("device"), dict) else {}
    info.update(
        probes=int(info.get("probes") or 0) + runner.probes,
        board_type=spec.device_type,
        l4t=str(board.get("l4t") or ""),
        serial=str(board.get("serial") or ""),
        path=path,
    )
    if after and (info.get("origin") in ("profiled", "sibling") or after != before):
        info["csv"] = after  # new or changed on this board: the coordinator stores it
    if info.get("origin") != "local":  # say where a profile not from this board's file came from
        head = f"profile {info.get('origin')} ({info['probes']} probe(s))"
        row.message = f"{head}; {row.message}" if row.message else head
    return row.to_dict()


def _instruction_for(
    node_config: dict, content: RecordDict
) -> tuple[records.TrainInstruction, DeviceSpec, AgentSettings]:
    """The message's instruction, this board's fleet entry and its agent settings (KeyError:
    the message has no instruction; InputError: the node config or fleet is wrong)."""
    ins = records.decode_instruction(content.config_records[records.CONFIG])
    spec = records.device_spec_for(node_config, ins.fleet_path)
    return ins, spec, AgentSettings.from_node_config(node_config)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def hardware_round(node_config: dict, content: RecordDict) -> RecordDict:
    """One round on this board, from the node config and the instruction, as reply content."""
    label = records.node_label(node_config)
    try:
        ins, spec, settings = _instruction_for(node_config, content)
        settings = replace(settings, work_dir=str(work_dir_for(settings)))  # the agent's too
    except KeyError:
        return records.reply_content(records.error_row(label, "no train instruction"))
    except InputError as exc:
        return records.reply_content(records.error_row(label, str(exc)))
    arrays = content.array_records.get(records.ARRAYS)
    files = TrainFiles.for_round(settings, spec, ins, arrays)
    link = AgentLink(settings.argv(), timeout_s=settings.timeout_s)
    info: dict[str, Any] = {}
    try:
        link.start()
        row = run_on_agent(link, spec, ins, settings, files=files, profile_info=info)
    except AgentError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
    finally:
        link.close()
    send = ins.run.mode == "federated" and row.get("status") in TRAINED
    content = records.reply_content(row, files.trained() if send else None)
    csv_text = info.pop("csv", None)
    if csv_text:
        records.attach_profile(content, csv_text, info)
    return content


def hardware_plan(node_config: dict, content: RecordDict) -> RecordDict:
    """The planning exchange on a board: its fastest predicted finish from its profile (the
    node config's CSV; measured by the agent first when there is none yet, as the round would),
    without training."""
    from fleet.planning.deadline_plan import plan_for_device

    label = records.node_label(node_config)
    try:
        ins, spec, settings = _instruction_for(node_config, content)
    except KeyError:
        return records.plan_content(label, None, message="no instruction to plan")
    except InputError as exc:
        return records.plan_content(label, None, message=str(exc))
    try:
        path = profile_path_for(spec, ins, settings)
        if Path(path).is_file():
            profile = load_profile(path)
        else:
            link = AgentLink(settings.argv(), timeout_s=settings.timeout_s)
            try:
                link.start()
                profile = obtain_profile(link, spec, ins, settings)
            finally:
                link.close()
    except (AgentError, InputError, OSError) as exc:
        return records.plan_content(spec.name, None, message=" ".join(str(exc).split()))
    plan = plan_for_device(spec, profile, ins.efficiency)
    return records.plan_content(spec.name, plan.fastest_finish_s, plan.energy_j, plan.message)


@dataclass(frozen=True)
class TrainFiles:
    """Where this round's tensors live on the board: JSON lines carry paths, not weights.

    ``weights``: the shipped global model (absent: the agent's seeded initial weights, which
    equal round 1's); ``out_weights``: the fine-tuned model the agent writes back; ``checkpoint``:
    the trainer's atomic checkpoint, so a board that loses power mid-round resumes from its last
    evaluation when the round is retried, instead of starting over.
    """

    weights: str | None
    out_weights: str
    checkpoint: str

    @classmethod
    def for_round(
        cls,
        settings: AgentSettings,
        spec: DeviceSpec,
        ins: records.TrainInstruction,
        arrays: ArrayRecord | None,
    ) -> TrainFiles:
        base = work_dir_for(settings)
        stem = base / f"{spec.name}_{ins.run.name or 'run'}_r{ins.server_round}"
        weights = None
        if records.has_weights(arrays):
            weights = f"{stem}_in.pt"
            write_weights(records.state_dict_of(arrays), weights)
        return cls(weights, f"{stem}_out.pt", f"{stem}.ckpt")

    def agent_args(self) -> dict[str, str]:
        args = {"out_weights": self.out_weights, "checkpoint": self.checkpoint}
        if self.weights:
            args["weights"] = self.weights
        return args

    def trained(self) -> ArrayRecord | None:
        if not Path(self.out_weights).exists():
            return None
        return ArrayRecord(read_weights(self.out_weights))
