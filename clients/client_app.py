"""The ClientApp: one Flower app for every node, simulated or on a board.

Why it is thin: a device's round (align, check the type, select, run) lives in
``fleet.rounds.device_round.run_device``, which the direct engine calls too, so a Flower run and a
1,000-device direct run give the same rows. This module only finds out which device it is,
rebuilds the instruction (the shipped efficiency and the fleet's run settings) from the
message, hands the round to the runner the node asks for, and encodes the reply.

Which device am I: in deployment the SuperNode's ``--node-config`` describes it
(``device-name``, ``device-type``, ``budget-w``, ``profile``, ``data``...); in simulation Flower
gives only ``partition-id``, which indexes the fleet file whose path the coordinator puts in the
instruction (``fleet-path``), so the client needs no run config.

Which runner: a node whose config says ``client = "hardware"`` drives its board through the
agent (``clients.hardware_client``); any other node is simulated and its fleet entry's
``learning`` picks the runner: "trace" runs the virtual clock on the device's convergence trace
(``fleet.rounds.virtual_clock``), "train" fine-tunes the shipped weights on this host's CPU
(``fleet.rounds.host_training``) while time and energy still come from the device's profile; its
fine-tuned weights go back in federated mode.

Segmented rounds (``clients.segments``): ``query.identify`` answers which device this node is;
``train.segment`` runs one bounded segment of the round (the virtual clock from the resume
point, or ``clients.hardware_client.hardware_segment`` on a board) and replies the cumulative
row plus a ``progress`` record. The default ``train`` message still runs the whole round.
"""

from __future__ import annotations

import functools
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients import content as rc
from clients import records, segments
from clients import segment_wire as wire
from clients.handler_timings import timed
from fleet.common.errors import InputError
from fleet.config.app_keys import check_node_config
from fleet.config.fleetfile import DeviceSpec
from fleet.rounds.device_round import TRAINED
from fleet.rounds.virtual_clock import cached_profile, simulate_device


class LearningUnavailable(InputError):
    """The device asks for a kind of learning this client cannot do."""


@dataclass(frozen=True)
class Received:
    """What the coordinator sent this round."""

    instruction: records.TrainInstruction
    arrays: ArrayRecord


Learned = tuple[dict[str, object], ArrayRecord | None]  # (report row, weights to send back)


def learn_from_trace(spec: DeviceSpec, received: Received) -> Learned:
    """Virtual clock: the device's own convergence trace says how many samples it needs."""
    ins = received.instruction
    return simulate_device(
        spec, ins.efficiency_for(spec.name), ins.run
    ).to_dict(), None  # a trace trains nothing


def learn_by_training(spec: DeviceSpec, received: Received) -> Learned:
    """Real training (CPU) on the device's data, timed and charged on the device's clock."""
    from fleet.rounds.host_training import train_device

    ins = received.instruction
    weights = None
    if records.has_weights(received.arrays):
        weights = records.state_dict_of(received.arrays)
    data_dir = ins.run.data_dir or None
    row, trained = train_device(spec, ins.efficiency_for(spec.name), ins.run, weights, data_dir)
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


def simulated_round(node_config: dict, content: RecordDict) -> RecordDict:
    """Everything a simulated device does with one instruction, as a plain function.

    Never raises for a problem of this device (bad node config, missing file, unavailable
    learner): the reply is then an ``error`` row naming the device, so the round goes on.
    """
    arrays = rc.arrays(content, records.ARRAYS) or ArrayRecord()
    label = records.node_label(node_config)
    try:
        ins = records.decode_instruction(rc.need(content, records.CONFIG, ConfigRecord))
        spec = records.device_spec_for(node_config, ins.fleet_path)
    except KeyError:
        return records.reply_content(records.error_row(label, "no train instruction"))
    except InputError as exc:
        return records.reply_content(records.error_row(label, str(exc)))
    trained = None
    try:
        pace = segments.NodeSettings.from_node_config(node_config)
        row, trained = learn(spec, Received(ins, arrays))
    except InputError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
        row.update(budget_w=spec.budget_w, profile=spec.profile, learning=spec.learning)
    else:
        time_s = row.get("time_s")
        wait = pace.wait_s(float(time_s) if isinstance(time_s, (int, float)) else 0.0)
        if wait > 0:
            time.sleep(wait)  # a paced device lives its clock: the whole round in one piece
    # Federated mode: a device sends its weights back (fine-tuned, or unchanged by a trace).
    out = trained if trained is not None else arrays
    trained_ok = row.get("status") in TRAINED
    send = ins.run.mode == "federated" and trained_ok and records.has_weights(out)
    return records.reply_content(row, out if send else None)


def simulated_plan(node_config: dict, content: RecordDict) -> RecordDict:
    """The planning exchange on a simulated node: its fastest predicted finish for the round's
    work, from its profile and the shipped efficiency
    (``fleet.planning.deadline_plan.plan_for_device``); nothing is trained. A problem becomes the
    reply's message (the device does not count)."""
    from fleet.planning.deadline_plan import plan_for_device

    label = records.node_label(node_config)
    try:
        ins = records.decode_instruction(rc.need(content, records.CONFIG, ConfigRecord))
        spec = records.device_spec_for(node_config, ins.fleet_path)
        label = spec.name
        profile, _ = cached_profile(spec.profile)
    except KeyError:
        return records.plan_content(label, None, message="no instruction to plan")
    except InputError as exc:
        return records.plan_content(label, None, message=str(exc))
    plan = plan_for_device(spec, profile, ins.efficiency_for(spec.name))
    return records.plan_content(label, plan.fastest_finish_s, plan.energy_j, plan.message)


def _refused(node_config: dict) -> RecordDict | None:
    """An ``error`` row when the node config holds a key no reader knows (a misspelt
    ``--node-config`` key would otherwise be dropped silently), else None."""
    try:
        check_node_config(node_config)
    except InputError as exc:
        return records.reply_content(records.error_row(records.node_label(node_config), str(exc)))
    return None


def _answer(
    msg: Message,
    context: Context,
    hardware: str,
    simulated: Callable[[dict, RecordDict], RecordDict],
) -> Message:
    """The reply from ``clients.hardware_client.<hardware>`` on a ``client = "hardware"`` node,
    else from ``simulated``; (node config, message content) -> reply content either way."""
    node_config = dict(context.node_config)
    refused = _refused(node_config)
    if refused is not None:
        return Message(refused, reply_to=msg)
    handle = simulated
    if str(node_config.get("client", "simulated")) == "hardware":
        from clients import hardware_client  # only hardware nodes pay for the agent link

        handle = getattr(hardware_client, hardware)
    return Message(handle(node_config, msg.content), reply_to=msg)


@functools.cache
def ran_on() -> str:
    """Where this ClientApp computes: in a Ray worker (Flower's simulation) the Ray node, as
    ``IP/node-id[:12]`` (two nodes on one host share the IP); elsewhere this host's name.
    Ray is never imported here: a SuperNode's ClientApp has not loaded it and needs nothing
    of it. Cached: a process does not move."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        node_id = ray.get_runtime_context().get_node_id()
        return f"{ray.util.get_node_ip_address()}/{node_id[:12]}"
    return socket.gethostname()


app = ClientApp()


@app.train()
@timed
def train(msg: Message, context: Context) -> Message:
    reply = _answer(msg, context, "hardware_round", simulated_round)
    wire.attach_node(reply.content, ran_on())
    return reply


@app.query()
@timed
def query(msg: Message, context: Context) -> Message:
    """The coordinator's planning query (deadline objective): a plan, no training."""
    return _answer(msg, context, "hardware_plan", simulated_plan)


def segment_round(node_config: dict, content: RecordDict, sleep=time.sleep) -> RecordDict:
    """One segment of this node's round (``clients.segments``): a board's through
    ``clients.hardware_client.hardware_segment`` when that client has one, else the virtual
    clock's (host training runs its whole round in one segment)."""
    refused = _refused(node_config)
    if refused is not None:
        return refused
    if str(node_config.get("client", "simulated")) == "hardware":
        from clients import hardware_client

        handle = getattr(hardware_client, "hardware_segment", None)
        if handle is None:
            row = records.error_row(
                records.node_label(node_config),
                "this client cannot run a board in segments (no hardware_segment)",
            )
            return records.reply_content(row)
        return handle(node_config, content)
    return segments.simulated_segment(
        node_config, content, sleep=sleep, whole_round=simulated_round
    )


@app.train("segment")
@timed
def train_segment(msg: Message, context: Context) -> Message:
    """``train.segment``: one bounded segment of the round, resumed where it was."""
    content = segment_round(dict(context.node_config), msg.content)
    return Message(wire.attach_node(content, ran_on()), reply_to=msg)


@app.query("identify")
@timed
def identify(msg: Message, context: Context) -> Message:
    """``query.identify``: which device this node is (its node id may change on restart)."""
    return Message(segments.identify(dict(context.node_config), msg.content), reply_to=msg)
