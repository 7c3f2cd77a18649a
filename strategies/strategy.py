"""PowerAwareStrategy: ships the model and the efficiency vector, collects time/energy/accuracy.

Why a FedAvg subclass with its own configure/aggregate: FedAvg's defaults do not fit a fleet
report. Its ``aggregate_train`` averages every metric and raises unless all replies carry
weights, while here energy adds up, a round lasts as long as its slowest device, infeasible and
failed devices are normal rows, and in ``local`` mode nothing but metrics travels back. Its node
sampling waits forever for missing nodes; here the wait is bounded and says who is missing.

Modes (the fleet's ``[run] mode``):
- ``local``: devices keep what they learn; only metrics come back; the global model is unchanged.
- ``federated``: devices that trained (status ok) return weights; their example-weighted mean
  (FedAvg) becomes the next round's global model.

Deadline planning (``plan=True``: the fleet's objective is ``deadline`` and ``[run]`` sets no
``deadline_s``): before each round's train messages every device gets a ``query`` message with
the instruction and replies its fastest predicted finish for the round's work without training;
the round's deadline is the slowest of them and travels in the train instruction
(``coordinator.with_deadline``). Per round, so federated rounds plan on each round's work.

Rows per round are kept in ``self.rounds`` and handed to ``on_round`` as each round closes (the
ServerApp writes the round's report there). Evaluation rounds are off (``fraction_evaluate=0``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log
from flwr.supercore.run import Run

from clients import records
from strategies import coordinator

RoundCallback = Callable[[int, list[dict[str, object]]], None]
ReplyCallback = Callable[[Message], None]


class NodesMissing(RuntimeError):
    """Fewer devices connected than the fleet expects, within the wait allowed."""


def wait_for_nodes(grid: Grid, expected: int, wait_s: float, poll_s: float = 0.5) -> list[int]:
    """Block until ``expected`` nodes are online (or fail after ``wait_s``); all online, sorted."""
    deadline = time.monotonic() + wait_s
    last = -1
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= expected:
            return nodes
        if time.monotonic() >= deadline:
            raise NodesMissing(
                f"only {len(nodes)} of {expected} devices connected after {wait_s:g} s; "
                "start the missing SuperNodes or lower num-nodes"
            )
        if len(nodes) != last:
            log(INFO, "Waiting for devices: %d of %d connected", len(nodes), expected)
            last = len(nodes)
        time.sleep(poll_s)


class PowerAwareStrategy(FedAvg):
    """One train message per device; a fleet report per round."""

    def __init__(
        self,
        num_nodes: int,
        mode: str = "local",
        device_order: Iterable[str] = (),
        node_wait_s: float = 300.0,
        on_round: RoundCallback | None = None,
        plan: bool = False,
        plan_timeout_s: float = 300.0,
        round_config: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        super().__init__(
            fraction_train=1.0,
            fraction_evaluate=0.0,  # no evaluate round: the devices report in their train reply
            min_train_nodes=num_nodes,
            min_evaluate_nodes=num_nodes,
            min_available_nodes=num_nodes,
        )
        self.mode = mode
        self.device_order = list(device_order)
        self.node_wait_s = float(node_wait_s)
        self.on_round = on_round
        self.round_config = round_config  # per-round instruction keys (e.g. shipped profiles)
        self.rounds: dict[int, list[dict[str, object]]] = {}
        self._sent: dict[int, list[int]] = {}
        self.plan = plan
        self.plan_timeout_s = float(plan_timeout_s)
        self.deadlines: dict[int, float | None] = {}  # planned deadline per round

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every connected device (at least ``min_available_nodes``) gets the instruction."""
        nodes = wait_for_nodes(grid, self.min_available_nodes, self.node_wait_s)
        self._sent[server_round] = nodes
        extra = self.round_config(server_round) if self.round_config is not None else {}
        log(INFO, "configure_train: round %d to %d devices", server_round, len(nodes))
        if self.plan:
            config = self.plan_round(server_round, config, grid, nodes)
        messages = []
        for node_id in nodes:
            cfg = ConfigRecord(dict(config))  # a copy per device: never mutate the caller's
            cfg["server-round"] = server_round
            if self.round_config is not None:
                cfg.update(extra)
            content = RecordDict({records.ARRAYS: arrays, records.CONFIG: cfg})
            messages.append(
                Message(content=content, dst_node_id=node_id, message_type=MessageType.TRAIN)
            )
        return messages

    def plan_round(
        self, server_round: int, config: ConfigRecord, grid: Grid, nodes: list[int]
    ) -> ConfigRecord:
        """The planning exchange (see the module docstring); the config with the deadline."""
        messages = []
        for node_id in nodes:
            cfg = ConfigRecord(dict(config))
            cfg["server-round"] = server_round
            messages.append(
                Message(
                    content=RecordDict({records.CONFIG: cfg}),
                    dst_node_id=node_id,
                    message_type=MessageType.QUERY,
                )
            )
        replies = list(grid.send_and_receive(messages, timeout=self.plan_timeout_s))
        deadline, notes = coordinator.deadline_from_plans(replies)
        for note in notes:
            log(WARNING, "planning: %s", note)
        if len(replies) < len(nodes):
            log(WARNING, "planning: %d of %d devices replied", len(replies), len(nodes))
        self.deadlines[server_round] = deadline
        log(INFO, "planning: round %d deadline %s s", server_round, deadline)
        return coordinator.with_deadline(config, deadline)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Rows for the report; FedAvg of returned weights in federated mode, else None."""
        rows, weights = coordinator.rows_from_replies(replies, self._sent.get(server_round, []))
        rows = coordinator.order_rows(rows, self.device_order)
        self.rounds[server_round] = rows
        for row in rows:
            if row.get("status") in ("error", "lost"):
                log(WARNING, "device %s: %s: %s", row["device"], row["status"], row["message"])
        arrays = coordinator.average_weights(weights) if self.mode == "federated" else None
        metrics = coordinator.round_metrics(rows)
        if self.on_round is not None:
            self.on_round(server_round, rows)
        return arrays, metrics


class ReportingGrid(Grid):
    """A Grid that tells a callback about each reply as it arrives, and polls briskly.

    Why: Strategy.start only calls ``send_and_receive``, which returns when the round is over, so
    progress would otherwise be visible only per round. Flower's HTTP grid also sleeps 3 s between
    pulls, which adds up to 3 s to every round; 0.25 s is cheap on a SuperLink.
    """

    def __init__(
        self, inner: Grid, on_reply: ReplyCallback | None = None, poll_s: float = 0.25
    ) -> None:
        self.inner = inner
        self.on_reply = on_reply
        self.poll_s = poll_s

    # Delegation -------------------------------------------------------------------------
    def set_run(self, run: Run) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        return self.inner.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    # The one change -----------------------------------------------------------------------
    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        messages = list(messages)
        if not messages:
            return []
        pending = set(self.inner.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while pending and (end is None or time.monotonic() < end):
            got = list(self.inner.pull_messages(pending))
            for msg in got:
                pending.discard(msg.metadata.reply_to_message_id)
                replies.append(msg)
                if self.on_reply is not None:
                    try:
                        self.on_reply(msg)
                    except Exception as exc:  # noqa: BLE001 - progress must not stop a round
                        log(WARNING, "progress callback failed: %s", exc)
            if pending:
                time.sleep(self.poll_s)
        return replies
