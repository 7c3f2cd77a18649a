"""The messages powerfleet's Flower engine exchanges for a fleet, without Flower.

Why: the minimal Flower app (``benchmarks/minimal_flower_app``) prices Flower and Ray for a
traffic only when it sends the same traffic: how many nodes each lock-step of segments reaches,
and how large requests and replies are at each step. Both follow from the fleet: every device of
one kind (the same fleet entry but for the name) makes the same round, so each kind's
segments are chained once here through the ClientApp's own handler
(``clients.client_app.segment_round``) on the coordinator's own messages
(``strategies.coordinator.train_config``, ``clients.segment_wire.segment_config``), as the
coordinator's lock-step (``strategies/segmented.py``, ``lockstep``) sends them. The CPU those
calls take is the ClientApp's work per segment measured outside Ray (a cross-check of what
``clients/handler_timings.py`` records inside the actors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from flwr.app import RecordDict
from flwr.common.serde import recorddict_to_proto

from clients import client_app, records
from clients import segment_wire as wire
from fleet.config.fleetfile import load_fleet
from fleet.planning.round_logic import SEGMENT_S
from fleet.rounds.progress import Progress
from fleet.rounds.virtual_clock import cached_efficiency
from strategies import coordinator

MAX_STEPS = 10_000


@dataclass(frozen=True)
class Pattern:
    """``steps[s]``: nodes that get step s's segment; sizes: device-weighted mean bytes of a
    step's request and reply (Flower's protobuf of the RecordDict)."""

    steps: list[int]
    request_bytes: list[int]
    reply_bytes: list[int]
    identify_bytes: int
    segments: int  # sum(steps): segment replies
    cpu_s_per_segment: float  # the ClientApp's handler, in this process

    def run_config(self) -> dict[str, object]:
        """The minimal app's run-config keys for this traffic."""
        join = lambda xs: ",".join(str(x) for x in xs)  # noqa: E731
        return {
            "steps": join(self.steps),
            "request-bytes": join(self.request_bytes),
            "reply-bytes": join(self.reply_bytes),
        }


def _size(content: RecordDict) -> int:
    return len(recorddict_to_proto(content).SerializeToString())


def message_pattern(fleet_path: str | Path, segment_s: float = SEGMENT_S) -> Pattern:
    fleet = load_fleet(fleet_path)
    base = coordinator.train_config(fleet, cached_efficiency(fleet.run.efficiency))
    kinds: dict[object, list[int]] = {}
    for i, spec in enumerate(fleet.devices):
        kinds.setdefault(replace(spec, name=""), []).append(i)
    per_kind: list[tuple[int, list[tuple[int, int]]]] = []  # (devices, [(req, rep) per step])
    cpu, calls = 0.0, 0
    for members in kinds.values():
        node = {"partition-id": members[0]}
        prog, sizes = Progress(), []
        for _ in range(MAX_STEPS):
            content = RecordDict({records.CONFIG: wire.segment_config(base, segment_s, prog)})
            t0 = time.process_time()
            reply = wire.attach_node(client_app.segment_round(node, content), "127.0.0.1/0" * 2)
            cpu, calls = cpu + time.process_time() - t0, calls + 1
            sizes.append((_size(content), _size(reply)))
            row = records.decode_reply(
                reply.metric_records[records.METRICS], reply.config_records[records.REPORT]
            )
            prog = wire.progress_of(reply, str(row.get("device")))
            if row.get("status") != wire.RUNNING:
                break
        per_kind.append((len(members), sizes))
    depth = max(len(sizes) for _, sizes in per_kind)
    steps, req, rep = [], [], []
    for s in range(depth):
        here = [(n, sizes[s]) for n, sizes in per_kind if len(sizes) > s]
        count = sum(n for n, _ in here)
        steps.append(count)
        req.append(round(sum(n * q for n, (q, _) in here) / count))
        rep.append(round(sum(n * p for n, (_, p) in here) / count))
    ident = _size(RecordDict({records.CONFIG: base}))
    return Pattern(steps, req, rep, ident, sum(steps), cpu / max(1, calls))
