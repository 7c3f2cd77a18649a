"""A hardware node's round: drives a real board through the on-device agent.

``clients.client_app`` hands a node whose config says ``client = "hardware"`` here. One round
on a board: start the agent (``python -m fleet.agent`` under the interpreter the node config
names, e.g. JetPack's Python 3.6), say hello, get a profile (the node config's ``profile`` CSV
when it exists, else the agent profiles the model with the staircase plan under the budget and
writes the CSV there), then the device round (``fleet.device_round.run_device``: align, check
the device type, select under the budget with the shipped efficiency) on the ``AgentRunner``,
which locks the chosen frequency, then trains if the agent can: when its hello lists
``train`` and the node config names ``data``, the agent fine-tunes at the choice with the
batch-size-scaled learning rate and the row gets its time, energy and accuracy. Otherwise the
reply says ``status = "selected"`` with the choice and no time or energy. The agent is shut down
(which restores the clocks) or killed on every exit path.

Weights travel as files beside the agent (``TrainFiles``): the received ArrayRecord is written
as a state_dict the agent loads, the fine-tuned one comes back in federated mode, and the
trainer checkpoints beside them so a board that loses power resumes instead of restarting.
The device's ``data`` for a hardware node is a ``.pt`` file of ``{"train": (x, y), "test":
(x, y)}`` tensors on the board.

Node config keys (besides the device's own: device-name, device-type, budget-w, profile...):
``backend`` (default jetson), ``agent-python``, ``agent-timeout-s`` (per long command, default
3600), ``work-dir`` (where a profile is written when the node config names none), and the
chosen backend's own options under their public names (``clients.agent_link.AgentSettings``,
generated from the backend registry: e.g. ``sysfs-root``, ``rail``, ``gpu-index``,
``allow-clock-changes``, ``profile-csv``).

A budget schedule is honoured only in its first step here: re-selecting mid-training needs the
trainer, which owns the training loop.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, RecordDict

from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings, ProgressCallback
from fleet.agent.profile_io import atomic_write_text
from fleet.device_round import DeviceResult, Round, run_device
from fleet.efficiency import Efficiency, scaled_lr
from fleet.errors import InputError
from fleet.fleetconfig import DeviceSpec, RunSettings
from fleet.profile import Profile, load_profile


def profile_path_for(
    spec: DeviceSpec, ins: records.TrainInstruction, settings: AgentSettings
) -> str:
    """Where this device's profile lives (or will be written)."""
    if spec.profile:
        return spec.profile
    base = Path(settings.work_dir or Path(tempfile.gettempdir()) / "powerfleet")
    return str(base / f"{spec.name}_{ins.run.model or 'model'}.csv")


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
    the staircase under the budget (or the full grid) when the grid is too small to predict.
    Batch sizes are the shipped efficiency's.
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
    args: dict[str, Any] = {
        "model": ins.run.model,
        "batch_sizes": ins.efficiency.batch_sizes,
        "out": path,
        "rows": False,
    }
    timeout = settings.long_timeout_s
    try:
        out = link.request(
            "profile", timeout_s=timeout, on_progress=on_progress, predict=True, **args
        )
    except AgentError as exc:
        if "too few" not in str(exc):
            raise
        if spec.budget_w is not None:
            args["budget_w"] = spec.budget_w
        out = link.request("profile", timeout_s=timeout, on_progress=on_progress, **args)
    info.update(origin="profiled", probes=int(out.get("probes") or 0))
    return load_profile(path)


@dataclass
class AgentRunner:
    """Runner of the device round on a board: lock the chosen clock, train through the agent.

    The row says ``selected`` (locked at the choice, no time or energy) when the agent cannot
    train (its hello lists no ``train``) or the node config names no ``data``; otherwise the
    agent's measured time, energy, power and accuracy fill it. Only the schedule's first budget
    is honoured here: re-selecting mid-training is the trainer's closed loop.
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
        choice, run = rnd.first, rnd.run
        lr = scaled_lr(choice.batch_size, run.lr_ref_batch, run.lr_ref, run.optimizer)
        try:
            self.link.request("lock", timeout_s=self.settings.timeout_s, freq_mhz=choice.freq_mhz)
        except (AgentError, OSError) as exc:
            res.status, res.message = "error", " ".join(str(exc).split())
            return
        res.status = "selected"
        res.message = f"locked {choice.freq_mhz:g} MHz for batch {choice.batch_size} (lr {lr:.3g})"
        if "train" not in self.commands:
            res.message += (
                "; training on the device needs the trainer: this agent has no 'train' command"
            )
        elif not rnd.spec.data:
            res.message += "; no data to train on (the device's node config names no 'data')"
        else:
            try:
                self._train(rnd, res, lr)
            except (AgentError, OSError) as exc:
                res.status, res.message = "error", " ".join(str(exc).split())

    def probe(self, run: RunSettings, batch_size: int, freq_mhz: float) -> dict[str, Any]:
        """Measure one point on the board (the agent's ``profile`` on that point alone): the
        device round's verify-before-trust and coverage fill (``fleet.trust``) call this."""
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

    def _train(self, rnd: Round, res: DeviceResult, lr: float) -> None:
        """The agent's ``train`` command at the choice with the batch-size-scaled lr.

        Reads back ``time_s`` (training time, evaluation excluded), ``energy_j``, measured
        peak/mean power, ``accuracy`` (final), ``samples`` and ``reached``. Measured power
        replaces the profile's in the row, so a board that ran over its budget shows up in the
        report's budget violations.
        """
        choice, run = rnd.first, rnd.run
        out = self.link.request(
            "train",
            timeout_s=self.settings.long_timeout_s,
            on_progress=self.on_progress,
            model=run.model,
            batch_size=choice.batch_size,
            freq_mhz=choice.freq_mhz,
            lr=lr,
            optimizer=run.optimizer,
            target_accuracy=run.target_accuracy,
            data=rnd.spec.data,
            seed=run.seed,
            **(self.files.agent_args() if self.files else {}),
        )
        for key in ("time_s", "energy_j", "peak_power_w", "mean_power_w", "accuracy", "samples"):
            value = out.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                setattr(res, key, float(value))
        res.status = "ok" if out.get("reached", True) else "not reached"


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


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def hardware_round(node_config: dict, content: RecordDict) -> RecordDict:
    """One round on this board, from the node config and the instruction, as reply content."""
    label = records.node_label(node_config)
    try:
        ins = records.decode_instruction(content.config_records[records.CONFIG])
        spec = records.device_spec_for(node_config, ins.fleet_path)
        settings = AgentSettings.from_node_config(node_config)
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
    send = ins.run.mode == "federated" and row.get("status") == "ok"
    content = records.reply_content(row, files.trained() if send else None)
    csv_text = info.pop("csv", None)
    if csv_text:
        records.attach_profile(content, csv_text, info)
    return content


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
        base = Path(settings.work_dir or Path(tempfile.gettempdir()) / "powerfleet")
        stem = base / f"{spec.name}_{ins.run.name or 'run'}_r{ins.server_round}"
        base.mkdir(parents=True, exist_ok=True)
        weights = None
        if records.has_weights(arrays):
            from fleet.agent import tensorfile

            weights = f"{stem}_in.pt"
            tensorfile.save(arrays.to_torch_state_dict(), weights, "weights")
        return cls(weights, f"{stem}_out.pt", f"{stem}.ckpt")

    def agent_args(self) -> dict[str, str]:
        args = {"out_weights": self.out_weights, "checkpoint": self.checkpoint}
        if self.weights:
            args["weights"] = self.weights
        return args

    def trained(self) -> ArrayRecord | None:
        if not Path(self.out_weights).exists():
            return None
        from fleet.agent import tensorfile

        return ArrayRecord(tensorfile.load(self.out_weights))
