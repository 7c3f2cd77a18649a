"""The hardware ClientApp: drives a real board through the on-device agent.

One round on a board: start the agent (``python -m fleet.agent`` under the interpreter the node
config names, e.g. JetPack's Python 3.6), say hello, get a profile (the node config's ``profile``
CSV when it exists, else the agent profiles the model with the staircase plan under the budget
and writes the CSV there), select (b, f) under the budget with ``fleet.selection`` and the
shipped efficiency, lock the chosen frequency, then train if the agent can: when its hello lists
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
``backend`` (jetson | nvml | cpu | replay; default jetson), ``agent-python``, ``sysfs-root``,
``rail``, ``profile-csv`` (replay backend), ``agent-timeout-s`` (per long command, default 3600),
``work-dir`` (where a profile is written when the node config names none).

A budget schedule is honoured only in its first step here: re-selecting mid-training needs the
trainer, which owns the training loop.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients import records
from clients.agent_link import AgentError, AgentLink, ProgressCallback, agent_command
from fleet.efficiency import scaled_lr
from fleet.errors import InfeasibleError, InputError
from fleet.fleetconfig import DeviceSpec
from fleet.profile import Profile, load_profile
from fleet.replay import DeviceResult
from fleet.selection import Choice, align, select


@dataclass(frozen=True)
class AgentSettings:
    """How to start and talk to this board's agent (from the node config)."""

    backend: str = "jetson"
    python: str | None = None
    sysfs_root: str | None = None
    rail: str | None = None
    profile_csv: str | None = None
    timeout_s: float = 60.0  # hello, lock, shutdown
    long_timeout_s: float = 3600.0  # profile, train
    work_dir: str = ""

    @classmethod
    def from_node_config(cls, nc: dict) -> AgentSettings:
        def text(key: str) -> str | None:
            value = nc.get(key)
            return str(value) if value not in (None, "") else None

        raw_timeout = nc.get("agent-timeout-s", 3600.0)
        try:
            long_timeout = float(raw_timeout)
        except (TypeError, ValueError):
            raise InputError(
                f"node config: agent-timeout-s={raw_timeout!r} is not a number of seconds"
            ) from None
        return cls(
            backend=text("backend") or "jetson",
            python=text("agent-python"),
            sysfs_root=text("sysfs-root"),
            rail=text("rail"),
            profile_csv=text("profile-csv"),
            long_timeout_s=long_timeout,
            work_dir=text("work-dir") or "",
        )

    def argv(self) -> list[str]:
        return agent_command(
            self.python, self.backend, self.sysfs_root, self.rail, self.profile_csv
        )


def profile_path_for(
    spec: DeviceSpec, ins: records.TrainInstruction, settings: AgentSettings
) -> str:
    """Where this device's profile lives (or will be written)."""
    if spec.profile:
        return spec.profile
    base = Path(settings.work_dir or Path(tempfile.gettempdir()) / "powerfleet")
    return str(base / f"{spec.name}_{ins.model or 'model'}.csv")


def obtain_profile(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
) -> tuple[Profile, bool]:
    """Reuse the profile CSV if it exists, else ask the agent to measure it. (profile, measured)

    Under a budget the agent runs the staircase plan (only the points near the budget's
    frontier); without one it measures the full grid. Batch sizes are the shipped efficiency's.
    """
    path = profile_path_for(spec, ins, settings)
    if Path(path).is_file():
        return load_profile(path), False
    if not ins.model:
        raise InputError(f"device {spec.name}: no profile at {path} and no model to profile")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    args: dict[str, Any] = {
        "model": ins.model,
        "batch_sizes": ins.efficiency.batch_sizes,
        "out": path,
        "rows": False,
    }
    if spec.budget_w is not None:
        args["budget_w"] = spec.budget_w
    link.request("profile", timeout_s=settings.long_timeout_s, on_progress=on_progress, **args)
    return load_profile(path), True


def choose(profile: Profile, spec: DeviceSpec, ins: records.TrainInstruction) -> Choice:
    """Algorithm 1 on this board's profile with the shipped efficiency (raises if infeasible)."""
    prof, eff, _ = align(profile, ins.efficiency)
    return select(prof, eff, spec.budget_w, ins.objective)


@dataclass
class Prepared:
    """A board after hello, profile, select and lock: the row so far and what was chosen."""

    result: DeviceResult
    commands: frozenset[str] = frozenset()
    choice: Choice | None = None
    lr: float | None = None
    measured: bool = False  # the agent measured a new profile (vs. reusing the CSV)


def prepare_on_agent(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
) -> Prepared:
    """hello -> profile -> select -> lock. The row's status says how far it got: ``selected``
    (locked at the choice), ``infeasible`` (nothing fits the budget) or ``error`` (agent/input).
    """
    res = DeviceResult(
        spec.name,
        spec.device_type,
        spec.budget_w,
        profile_path_for(spec, ins, settings),
        ins.efficiency.source,
        "error",
        learning=spec.learning,
    )
    prepared = Prepared(res)
    try:
        hello = link.request("hello", timeout_s=settings.timeout_s)
        prepared.commands = frozenset(hello.get("capabilities", {}).get("commands", []))
        profile, prepared.measured = obtain_profile(link, spec, ins, settings, on_progress)
        try:
            choice = choose(profile, spec, ins)
        except InfeasibleError as exc:
            res.status, res.message = "infeasible", str(exc)
            return prepared
        res.batch_size, res.freq_mhz = choice.batch_size, choice.freq_mhz
        res.predicted_time_s = choice.predicted_time_s
        res.peak_power_w, res.mean_power_w = choice.peak_power_w, choice.mean_power_w
        link.request("lock", timeout_s=settings.timeout_s, freq_mhz=choice.freq_mhz)
        prepared.choice = choice
        prepared.lr = scaled_lr(choice.batch_size, ins.lr_ref_batch, ins.lr_ref, ins.optimizer)
        res.status = "selected"
        res.message = (
            f"locked {choice.freq_mhz:g} MHz for batch {choice.batch_size} (lr {prepared.lr:.3g})"
        )
    except (AgentError, InputError, OSError) as exc:
        res.status, res.message = "error", " ".join(str(exc).split())
    return prepared


def run_on_agent(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
    files: TrainFiles | None = None,
) -> dict[str, object]:
    """prepare_on_agent, then train if the agent can; returns the device's report row.

    Infeasible budgets and agent failures become the row's status and message, never an
    exception, so one board cannot stop the fleet's round.
    """
    prepared = prepare_on_agent(link, spec, ins, settings, on_progress)
    res, choice = prepared.result, prepared.choice
    if choice is None or prepared.lr is None:
        return res.to_dict()
    if "train" not in prepared.commands:
        res.message += (
            "; training on the device needs the trainer: this agent has no 'train' command"
        )
    elif not spec.data:
        res.message += "; no data to train on (the device's node config names no 'data')"
    else:
        try:
            _train(link, res, spec, ins, settings, choice, prepared.lr, on_progress, files)
        except (AgentError, OSError) as exc:
            res.status, res.message = "error", " ".join(str(exc).split())
    return res.to_dict()


def _train(
    link: AgentLink,
    res: DeviceResult,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    choice: Choice,
    lr: float,
    on_progress: ProgressCallback | None,
    files: TrainFiles | None = None,
) -> None:
    """The agent's ``train`` command (fleet/agent/protocol.py, being added with the trainer).

    Sends the choice, the scaled lr and the data file; reads back ``time_s`` (training time,
    evaluation excluded), ``energy_j``, measured peak/mean power, ``accuracy`` (final),
    ``samples`` and ``reached``. Measured power replaces the profile's in the row, so a board
    that ran over its budget shows up in the report's budget violations.
    """
    out = link.request(
        "train",
        timeout_s=settings.long_timeout_s,
        on_progress=on_progress,
        model=ins.model,
        batch_size=choice.batch_size,
        freq_mhz=choice.freq_mhz,
        lr=lr,
        optimizer=ins.optimizer,
        target_accuracy=ins.target_accuracy,
        data=spec.data,
        seed=ins.seed,
        **(files.agent_args() if files else {}),
    )
    for key in ("time_s", "energy_j", "peak_power_w", "mean_power_w", "accuracy", "samples"):
        value = out.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            setattr(res, key, float(value))
    res.status = "ok" if out.get("reached", True) else "not reached"


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
    try:
        link.start()
        row = run_on_agent(link, spec, ins, settings, files=files)
    except AgentError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
    finally:
        link.close()
    back = files.trained() if ins.mode == "federated" and row.get("status") == "ok" else None
    return records.reply_content(row, back)


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
        stem = base / f"{spec.name}_{ins.run_name or 'run'}_r{ins.server_round}"
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


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    return Message(hardware_round(dict(context.node_config), msg.content), reply_to=msg)
