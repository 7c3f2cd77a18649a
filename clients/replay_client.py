"""The replay ClientApp: a simulated device that replays its recorded profile on a virtual clock.

Why it is thin: the device's behaviour (select under the budget, advance the clock, charge
energy, follow a budget schedule) lives in ``fleet.replay.simulate_device``, which the direct
engine calls too, so a Flower run and a 1,000-device direct run give the same rows. This module
only finds out which device it is, rebuilds the shipped efficiency from the message, calls the
learner, and encodes the reply.

Which device am I: in deployment the SuperNode's ``--node-config`` describes it
(``device-name``, ``device-type``, ``budget-w``, ``profile``, ``data``...); in simulation Flower
gives only ``partition-id``, which indexes the fleet file whose path the coordinator puts in the
instruction (``fleet-path``), so the client needs no run config.

The learning seam: ``learn(spec, received)`` picks a learner by ``spec.learning``. "trace"
replays the device's convergence trace; "train" (real training) is not available in this client
yet and says so, as an error row for that device, without stopping the round.

The same app serves hardware devices: a SuperNode started with ``client="hardware"`` in its node
config is handed to ``clients.hardware_client`` (one Flower app, one ``clientapp`` component).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients import records
from fleet.errors import InputError
from fleet.fleetconfig import DeviceSpec
from fleet.replay import simulate_device


class LearningUnavailable(InputError):
    """The device asks for a kind of learning this client cannot do (yet)."""


@dataclass(frozen=True)
class Received:
    """What the coordinator sent this round."""

    instruction: records.TrainInstruction
    arrays: ArrayRecord


def learn_from_trace(spec: DeviceSpec, received: Received) -> dict[str, object]:
    """Replay: the device's own convergence trace says how many samples it needs."""
    ins = received.instruction
    return simulate_device(spec, ins.efficiency, ins.target_accuracy, ins.objective).to_dict()


def learn_by_training(spec: DeviceSpec, received: Received) -> dict[str, object]:
    """Real training on the replayed clock: the seam a later issue fills in."""
    raise LearningUnavailable(
        f"device {spec.name}: learning = 'train' (real training) is not available in the replay "
        "client yet; use learning = 'trace' for this device"
    )


LEARNERS: dict[str, Callable[[DeviceSpec, Received], dict[str, object]]] = {
    "trace": learn_from_trace,
    "train": learn_by_training,
}


def learn(spec: DeviceSpec, received: Received) -> dict[str, object]:
    """Run this device's round with the learner its fleet entry names; returns a report row."""
    learner = LEARNERS.get(spec.learning)
    if learner is None:
        raise LearningUnavailable(
            f"device {spec.name}: unknown learning {spec.learning!r}; expected one of "
            f"{', '.join(LEARNERS)}"
        )
    return learner(spec, received)


def replay_round(node_config: dict, content: RecordDict) -> RecordDict:
    """Everything a replay device does with one instruction, as a plain function.

    Never raises for a problem of this device (bad node config, missing file, unavailable
    learner): the reply is then an ``error`` row naming the device, so the round goes on.
    """
    arrays = content.array_records.get(records.ARRAYS, ArrayRecord())
    label = records.node_label(node_config)
    try:
        ins = records.decode_instruction(content.config_records[records.CONFIG])
        spec = records.device_spec_for(node_config, ins.fleet_path)
    except KeyError:
        return records.reply_content(records.error_row(label, "no train instruction"))
    except InputError as exc:
        return records.reply_content(records.error_row(label, str(exc)))
    try:
        row = learn(spec, Received(ins, arrays))
    except InputError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
        row.update(budget_w=spec.budget_w, profile=spec.profile, learning=spec.learning)
    # Federated mode: a device that trained sends its weights back (unchanged by a trace).
    send = ins.mode == "federated" and row.get("status") == "ok" and records.has_weights(arrays)
    return records.reply_content(row, arrays if send else None)


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    node_config = dict(context.node_config)
    if str(node_config.get("client", "replay")) == "hardware":
        from clients import hardware_client  # only hardware nodes pay for the agent link

        return Message(hardware_client.hardware_round(node_config, msg.content), reply_to=msg)
    return Message(replay_round(node_config, msg.content), reply_to=msg)
