"""The coordinator's plain functions: what goes out to the devices, what comes back, and totals.

Why separate from the strategy and the ServerApp: everything here is testable by calling it
(no Flower processes, no grid). The strategy and the ServerApp only move records between these
functions and Flower. The wire format itself is ``clients/records.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord

from clients import content as rc
from clients import records
from fleet.common.errors import InputError
from fleet.config.fleetfile import Fleet, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.reports.report import fleet_totals
from fleet.rounds.device_round import TRAINED

# ----------------------------------------------------------------------------- outgoing


def instruction_for(
    fleet: Fleet, shipped: Efficiency, server_round: int = 0
) -> records.TrainInstruction:
    """The round's instruction from the fleet's run settings and the shipped efficiency."""
    return records.TrainInstruction(shipped, fleet.run, fleet.path, server_round)


def train_config(fleet: Fleet, shipped: Efficiency) -> ConfigRecord:
    """The ConfigRecord every device gets (the strategy stamps the server round on a copy)."""
    return records.encode_instruction(instruction_for(fleet, shipped))


def ship_weights(run: RunSettings, override: bool | None = None) -> bool:
    """Whether the model travels: the override, else the fleet's ``ship_weights`` (default true).

    A trace-replay fleet of 1,000 devices sets it false: the replay never reads the weights and
    a ResNet18 copy per device would only cost memory and serialisation time.
    """
    return bool(override) if override is not None else run.ship_weights


def initial_arrays(model: str, seed: int = 0) -> ArrayRecord:
    """The pre-trained model's weights as an ArrayRecord (torch is imported only here)."""
    from fleet.agent.models.registry import build_model

    try:
        net = build_model(model, seed=seed)
    except ValueError as exc:
        raise InputError(f"[run] model: {exc}") from None
    return ArrayRecord(net.state_dict())


def with_deadline(config: ConfigRecord, deadline_s: float | None) -> ConfigRecord:
    """A copy of the train config whose run settings carry the planned deadline
    (``run-settings`` -> ``deadline_s``: the context the device round hands the deadline
    objective)."""
    cfg = ConfigRecord(dict(config))
    if deadline_s is not None:
        more = json.loads(str(cfg.get(records.RUN_SETTINGS, "{}")))
        more["deadline_s"] = float(deadline_s)
        cfg[records.RUN_SETTINGS] = json.dumps(more)
    return cfg


def deadline_from_plans(replies: Iterable[Message]) -> tuple[float | None, list[str]]:
    """The planning exchange's outcome: the slowest fastest finish among the devices that can
    finish (``fleet.planning.deadline_plan.plan_deadline``), and a note per device that cannot or
    failed."""
    from fleet.planning.deadline_plan import plan_deadline

    finishes: list[float | None] = []
    notes: list[str] = []
    for msg in replies:
        if msg.has_error():
            notes.append(f"node-{msg.metadata.src_node_id}: {msg.error.reason}")
            continue
        device, fastest, message = records.decode_plan(msg.content)
        finishes.append(fastest)
        if fastest is None:
            notes.append(f"{device or f'node-{msg.metadata.src_node_id}'}: {message}")
    return plan_deadline(finishes), notes


class ShippedEfficiency:
    """The samples-to-target per batch size a device was shipped (what the plan priced its
    work with): its own learnt efficiency when the round's config sends one, else the fleet's;
    the config decoded once, each device's table once."""

    def __init__(self, config: ConfigRecord) -> None:
        self.config = config
        self.instruction: records.TrainInstruction | None = None
        self.tables: dict[str, dict[int, float]] | None = None

    def __call__(self, name: str) -> dict[int, float]:
        if self.tables is None:
            try:
                self.instruction = records.decode_instruction(self.config)
            except InputError:
                self.instruction = None
            self.tables = {}
        if name not in self.tables:
            ins = self.instruction
            self.tables[name] = {} if ins is None else dict(ins.efficiency_for(name).reached)
        return self.tables[name]


def fleet_arrays(fleet: Fleet) -> ArrayRecord:
    """Round 1's weights: the fleet's ``[run] weights`` (pre-trained), else a fresh model built
    for the devices' data (``fleet.training.task.initial_weights``), as an ArrayRecord."""
    from fleet.training.task import initial_weights

    return ArrayRecord(initial_weights(fleet))


# ----------------------------------------------------------------------------- incoming


def row_from_reply(msg: Message) -> dict[str, object]:
    """One reply -> one report row; an error reply or a malformed one becomes an error row."""
    node = f"node-{msg.metadata.src_node_id}"
    if msg.has_error():
        return records.error_row(node, f"device failed: {msg.error.reason}")
    content = msg.content
    try:
        metrics = rc.need(content, records.METRICS, MetricRecord)
        report = rc.need(content, records.REPORT, ConfigRecord)
    except KeyError:
        return records.error_row(node, "reply without metrics/report records")
    row = records.decode_reply(metrics, report)
    if not row.get("device"):
        row["device"] = node
    return row


def rows_from_replies(
    replies: Iterable[Message], sent_to: Iterable[int] = ()
) -> tuple[list[dict[str, object]], list[tuple[ArrayRecord, float]]]:
    """Rows for every reply plus a ``lost`` row per node that never answered; and the weights.

    Weights come back only from devices that trained (status ok) in federated mode, each with
    its number of examples for FedAvg.
    """
    rows: list[dict[str, object]] = []
    weights: list[tuple[ArrayRecord, float]] = []
    replied: set[int] = set()
    for msg in replies:
        replied.add(int(msg.metadata.src_node_id))
        row = row_from_reply(msg)
        rows.append(row)
        if msg.has_error() or row.get("status") not in TRAINED:
            continue
        arrays = rc.arrays(msg.content, records.ARRAYS)
        if records.has_weights(arrays):
            n = rc.need(msg.content, records.METRICS, MetricRecord).get("num-examples", 0)
            if isinstance(n, (int, float)):  # a list here is no count: no weights from it
                weights.append((arrays, float(n)))
    for node in sent_to:
        if int(node) not in replied:
            rows.append(
                records.error_row(
                    f"node-{node}", "no reply within the round timeout", status="lost"
                )
            )
    return rows, weights


def order_rows(rows: list[dict[str, object]], device_order: list[str]) -> list[dict[str, object]]:
    """Fleet-file order (then anything unknown, by name), so reports diff cleanly."""
    rank = {name: i for i, name in enumerate(device_order)}
    return sorted(rows, key=lambda r: (rank.get(str(r.get("device")), len(rank)), str(r["device"])))


def average_weights(weighted: list[tuple[ArrayRecord, float]]) -> ArrayRecord | None:
    """FedAvg: the example-weighted mean of the returned weights, each array in its own dtype.

    Integer buffers (BatchNorm's num_batches_tracked) are rounded back instead of turning into
    floats; equal weights are used if no device reports examples. None if nothing came back.
    """
    if not weighted:
        return None
    total = sum(w for _, w in weighted)
    factors = (
        [w / total for _, w in weighted] if total > 0 else [1.0 / len(weighted)] * len(weighted)
    )
    keys = list(weighted[0][0].keys())
    out: dict[str, Array] = {}
    for key in keys:
        first = weighted[0][0][key].numpy()
        acc = np.zeros(first.shape, dtype=np.float64)
        for (arrays, _), f in zip(weighted, factors, strict=True):
            if key not in arrays:
                raise InputError(f"federated average: a device returned no array {key!r}")
            acc += arrays[key].numpy().astype(np.float64) * f
        if np.issubdtype(first.dtype, np.integer):
            acc = np.rint(acc)
        out[key] = Array(np.array(acc, dtype=first.dtype))  # np.array keeps 0-d shapes
    return ArrayRecord(out)


# ----------------------------------------------------------------------------- totals


def round_metrics(rows: list[dict[str, object]]) -> MetricRecord:
    """The fleet totals (fleet.reports.report.fleet_totals) as a MetricRecord for Flower's
    history."""
    totals = fleet_totals(rows)
    metrics = MetricRecord()
    for key, value in totals.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            metrics[records.wire_key(key)] = value
    violations, counts = totals["budget_violations"], totals["status_counts"]
    assert isinstance(violations, list) and isinstance(counts, dict)  # fleet_totals' types
    metrics["budget-violations"] = len(violations)
    for status in ("ok", "late", "infeasible", "error", "lost", "selected"):
        metrics[f"status-{status}"] = int(counts.get(status, 0))
    return metrics


def round_summary(server_round: int, rows: list[dict[str, object]]) -> dict[str, object]:
    """One entry of the report's ``rounds`` list: the round number and its fleet totals."""
    return {"round": server_round, **fleet_totals(rows)}
