"""One empty round: every connected node gets an empty message and answers with an empty one.

Why: the lower bound on what one Flower round costs on N simulated nodes (SuperLink, Ray, node
start-up, message routing), measured the same way as the powerfleet app.
"""

from __future__ import annotations

import time

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    timeout = float(context.run_config.get("round-timeout-s", 600.0))
    wanted = max(1, int(context.run_config.get("num-nodes", 0)))
    deadline = time.monotonic() + timeout
    nodes = list(grid.get_node_ids())
    while len(nodes) < wanted and time.monotonic() < deadline:  # as powerfleet's strategy waits
        time.sleep(0.2)
        nodes = list(grid.get_node_ids())
    messages = [Message(RecordDict(), dst_node_id=n, message_type="train") for n in nodes]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    if len(replies) != len(nodes):
        raise RuntimeError(f"{len(replies)} of {len(nodes)} nodes replied")
    done = str(context.run_config.get("done-file", ""))
    if done:  # the benchmark counts a run only when every node answered
        with open(done, "w", encoding="utf-8") as fh:
            fh.write(str(len(replies)))


@client.train()
def train(msg: Message, context: Context) -> Message:
    return Message(RecordDict(), reply_to=msg)
