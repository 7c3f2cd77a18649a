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
replays the device's convergence trace; "train" fine-tunes the shipped weights on the device's
data on this host's CPU (``fleet.learning.train_device``) while time and energy still come from
the device's profile; its fine-tuned weights go back in federated mode.

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
from fleet.fleetconfig import DeviceSpec, RunSettings
from fleet.replay import simulate_device


class LearningUnavailable(InputError):
    """The device asks for a kind of learning this client cannot do (yet)."""


@dataclass(frozen=True)
class Received:
    """What the coordinator sent this round."""

    instruction: records.TrainInstruction
    arrays: ArrayRecord


Learned = tuple[dict[str, object], ArrayRecord | None]  # (report row, weights to send back)


def learn_from_trace(spec: DeviceSpec, received: Received) -> Learned:
    """Replay: the device's own convergence trace says how many samples it needs."""
    ins = received.instruction
    row = simulate_device(spec, ins.efficiency, ins.target_accuracy, ins.objective).to_dict()
    return row, None  # weights unchanged: a trace does not train


def learn_by_training(spec: DeviceSpec, received: Received) -> Learned:
    """Real training (CPU) on the device's data, timed and charged on the device's clock."""
    from fleet.learning import train_device

    ins = received.instruction
    extra: dict[str, object] = {}
    if ins.fleet_path:
        extra = dict(records.fleet_for(ins.fleet_path).run.extra)
    run = RunSettings(
        name=ins.run_name,
        model=ins.model,
        efficiency=ins.efficiency.source,
        target_accuracy=ins.target_accuracy,
        objective=ins.objective,
        optimizer=ins.optimizer,
        lr_ref_batch=ins.lr_ref_batch,
        lr_ref=ins.lr_ref,
        seed=ins.seed,
        extra=extra,
    )
    weights = None
    if records.has_weights(received.arrays):
        weights = received.arrays.to_torch_state_dict()
    data_dir = extra.get("data_dir")
    row, trained = train_device(spec, ins.efficiency, run, weights, str(data_dir or "") or None)
    return row.to_dict(), ArrayRecord(trained) if trained is not None else None


LEARNERS: dict[str, Callable[[DeviceSpec, Received], Learned]] = {
    "trace": learn_from_trace,
    "train": learn_by_training,
}


def learn(spec: DeviceSpec, received: Received) -> Learned:
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
    trained = None
    try:
        row, trained = learn(spec, Received(ins, arrays))
    except InputError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
        row.update(budget_w=spec.budget_w, profile=spec.profile, learning=spec.learning)
    # Federated mode: a device sends its weights back (fine-tuned, or unchanged by a trace).
    out = trained if trained is not None else arrays
    send = ins.mode == "federated" and row.get("status") == "ok" and records.has_weights(out)
    return records.reply_content(row, out if send else None)


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    node_config = dict(context.node_config)
    if str(node_config.get("client", "replay")) == "hardware":
        from clients import hardware_client  # only hardware nodes pay for the agent link

        return Message(hardware_client.hardware_round(node_config, msg.content), reply_to=msg)
    return Message(replay_round(node_config, msg.content), reply_to=msg)
