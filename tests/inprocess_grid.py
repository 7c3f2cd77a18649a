"""Flower's grid in this process: the coordinator's own code over the ClientApp, without Ray.

Why: a Flower simulation costs ~40-50 s a run here, mostly Ray starting, so a test cannot run
every shipped fleet under every objective through it. What makes the two engines agree or not
is not Ray but the coordinator (``strategies/server_app.run_fleet``, the segmented message loop
``strategies/segmented.py``, its book) and the ClientApp (``clients/client_app.app``: identify,
plan, one segment); this grid hands every message the ServerApp pushes to the real ClientApp
(Flower's own dispatch, ``ClientApp.__call__``) of the node it is addressed to, and returns
its reply on the next pull. Nodes are the fleet's partitions, as in Flower's simulation
(``partition-id`` indexes the fleet file). Nothing is mocked: only the transport is short.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from uuid import uuid4

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from clients.client_app import app as client_app


@contextmanager
def app_identity(node_id: int = 0, run_id: int = 1) -> Iterator[None]:
    """Who is sending (``Message()`` reads it): the ServerApp (node 0) or a ClientApp's node,
    as Flower's runtime sets it for the app it runs."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, node_id, 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


class InProcessGrid(Grid):
    """``nodes`` simulated SuperNodes (ids 1..nodes, partition ids 0..nodes-1); run the
    ServerApp inside ``app_identity()``."""

    def __init__(self, nodes: int) -> None:
        self.contexts = {
            k + 1: Context(1, k + 1, {"partition-id": k, "num-partitions": nodes}, RecordDict(), {})
            for k in range(nodes)
        }
        self.replies: dict[str, Message] = {}
        self.messages = 0  # how many messages the coordinator sent

    def set_run(self, run):  # type: ignore[no-untyped-def]
        pass

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return None

    def create_message(self, *a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the coordinator builds its messages itself")

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid  # as Flower's grids stamp it
            node = msg.metadata.dst_node_id
            with app_identity(node):
                self.replies[mid] = client_app(msg, self.contexts[node])
            self.messages += 1
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        return self.pull_messages(self.push_messages(messages))
