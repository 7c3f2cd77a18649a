"""Flower's floor: nodes answer messages and do nothing else.

Two shapes, picked by the run config:
- ``steps`` empty (the default): one round, every connected node gets one empty message and
  answers with an empty one (``grid.send_and_receive``).
- ``steps`` = "1000,1000,668,...": powerfleet's segmented lock-step traffic without its work.
  First a ``query`` to every node (the identity exchange), then one step per entry: the first
  that many nodes get a ``train`` message and the next step starts when all have answered.
  Messages are pushed one at a time and pulled every ``poll-s``, with ``get_node_ids`` once per
  loop, as ``strategies/segmented.py`` drives the grid; a request carries ``request-bytes``
  of config (one ConfigRecord, six distinct contents per step as six device kinds give) and the
  reply ``reply-bytes`` in powerfleet's four records (metrics, report, progress, ran-on), sizes
  per step, comma-separated. ``benchmarks/fleet_scale.py --minimal same`` derives all of it
  from the fleet (``benchmarks/message_pattern.py``).

Why: the wall time of this app is what Flower and Ray cost for powerfleet's messages (SuperLink,
Ray, node start-up, message routing), measured the same way as the powerfleet app.
"""

from __future__ import annotations

import time

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()

KINDS = 6  # distinct request contents per step (powerfleet's fleet_scale fleet has six kinds)


def _ints(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x.strip()]


def _request(step: int, kind: int, size: int, reply_size: int) -> RecordDict:
    """A config of about ``size`` bytes: twenty short keys plus padding, as an instruction."""
    cfg = ConfigRecord({f"key-{i:02d}": float(i) for i in range(20)})
    cfg["pad"] = f"{step}/{kind}:" + "x" * max(0, size - 473)
    cfg["reply-bytes"] = int(reply_size)
    return RecordDict({"config": cfg})


def _reply(node: int, size: int) -> RecordDict:
    """powerfleet's segment reply shape: 19 metrics, 12 report strings, a progress JSON text
    that carries the rest of ``size`` bytes, where it ran."""
    metrics = MetricRecord({f"metric-{i:02d}": float(node + i) for i in range(19)})
    report = ConfigRecord({f"report-{i:02d}": f"device-{node}" for i in range(12)})
    progress = ConfigRecord({"progress": "p" * max(0, size - 900)})
    return RecordDict(
        {
            "metrics": metrics,
            "report": report,
            "progress": progress,
            "ran-on": ConfigRecord({"node": "127.0.0.1/0123456789ab"}),
        }
    )


def _wait_nodes(grid: Grid, wanted: int, deadline: float) -> list[int]:
    nodes = sorted(grid.get_node_ids())
    while len(nodes) < wanted and time.monotonic() < deadline:  # as powerfleet's strategy waits
        time.sleep(0.2)
        nodes = sorted(grid.get_node_ids())
    return nodes


def _lockstep(grid: Grid, nodes: list[int], batches: list[list[Message]], poll_s: float) -> int:
    """Every batch pushed one message at a time, pulled until all answered; the replies."""
    got = 0
    for batch in batches:
        grid.get_node_ids()  # the driver's loop asks once per pass
        pending: set[str] = set()
        for msg in batch:
            ids = list(grid.push_messages([msg]))
            if not ids or not ids[0]:
                raise RuntimeError("a push failed")
            pending.add(ids[0])
        while pending:
            for reply in grid.pull_messages(list(pending)):
                if reply.has_error():
                    raise RuntimeError(f"a node failed: {reply.error.reason}")
                pending.discard(reply.metadata.reply_to_message_id)
                got += 1
            if pending:
                time.sleep(poll_s)
                grid.get_node_ids()
    return got


@server.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    timeout = float(cfg.get("round-timeout-s", 600.0))
    wanted = max(1, int(cfg.get("num-nodes", 0)))
    nodes = _wait_nodes(grid, wanted, time.monotonic() + timeout)
    steps = _ints(str(cfg.get("steps", "")))
    if not steps:
        messages = [Message(RecordDict(), dst_node_id=n, message_type="train") for n in nodes]
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        expected, got = len(nodes), len(replies)
    else:
        req, rep = _ints(str(cfg.get("request-bytes", ""))), _ints(str(cfg.get("reply-bytes", "")))
        if not (len(req) == len(rep) == len(steps)) or max(steps) > len(nodes):
            raise RuntimeError("steps, request-bytes, reply-bytes: one entry per step, <= nodes")
        identify = [
            Message(_request(0, k % KINDS, req[0], 100), dst_node_id=n, message_type="query")
            for k, n in enumerate(nodes)
        ]
        batches = (
            [identify]
            + [
                [
                    Message(
                        _request(s + 1, k % KINDS, req[s], rep[s]),
                        dst_node_id=n,
                        message_type="train",
                    )  # fmt: skip
                    for k, n in enumerate(nodes[:count])
                ]
                for s, count in enumerate(steps)
            ]
        )
        expected = sum(len(b) for b in batches)
        got = _lockstep(grid, nodes, batches, float(cfg.get("poll-s", 0.25)))
    if got != expected:
        raise RuntimeError(f"{got} of {expected} messages answered")
    done = str(cfg.get("done-file", ""))
    if done:  # the benchmark counts a run only when every message was answered
        with open(done, "w", encoding="utf-8") as fh:
            fh.write(str(got))


@client.train()
def train(msg: Message, context: Context) -> Message:
    cfg = msg.content.config_records.get("config")
    size = cfg.get("reply-bytes", 0) if cfg is not None else 0
    if not size:
        return Message(RecordDict(), reply_to=msg)
    return Message(_reply(int(context.node_id) % 100000, int(size)), reply_to=msg)


@client.query()
def query(msg: Message, context: Context) -> Message:
    """The identity exchange: a short answer."""
    return Message(RecordDict({"identity": ConfigRecord({"device": "d"})}), reply_to=msg)
