"""A hardware node's private work directory and the round's tensor files in it.

The node and the agent it starts share one directory (the node config's ``work-dir``, else the
agent's own default), created 0700 with its ownership checked: the agent reads and writes only
there. Weights travel as files in it (:class:`TrainFiles`): the received ArrayRecord is written
as a state_dict the agent loads, the fine-tuned one comes back in federated mode, and the
trainer checkpoints beside them so a board that loses power resumes instead of restarting.

Separate from ``hardware_client.py`` (the round on the agent) because both the profile files
(``board_profile.py``) and the round's weight files live here, and neither needs the round.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flwr.app import ArrayRecord

from clients import records
from clients.agent_link import AgentSettings
from fleet.agent.protocol.confine import ConfineError, default_work_dir, owned_dir
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec
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
        keep_weights: bool = False,
    ) -> TrainFiles:
        """The round's files: one stem per device, run and round, so every segment of a round
        (``keep_weights``: a later segment may come without the weights) finds the same
        checkpoint and the same starting weights, which the checkpoint's fingerprint holds."""
        base = work_dir_for(settings)
        stem = base / f"{spec.name}_{ins.run.name or 'run'}_r{ins.server_round}"
        weights = None
        if records.has_weights(arrays):
            weights = f"{stem}_in.pt"
            write_weights(records.state_dict_of(arrays), weights)
        elif keep_weights and Path(f"{stem}_in.pt").is_file():
            weights = f"{stem}_in.pt"  # this round's, written by its first segment
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
