"""The coordinator's cost per segment reply, recorded for the deployment load test.

Why in the product and not in the benchmark: the cost to measure is inside the ServerApp
process that the SuperLink's SuperExec starts (``benchmarks/deploy_load.py`` cannot reach into
it), and a reply's way to ``state.json`` ends in the driver's throttled write. Off unless the
environment names a file (``POWERFLEET_REPLY_TIMINGS``, inherited from the SuperLink); then
each reply appends one JSON line when the state write that publishes it is done: the device,
when the device created the reply (Flower's ``metadata.created_at``), the wall and CPU seconds
the driver spent on it, and the wall and CPU seconds of that write with how many replies it
published. Nothing is kept once written: the cost of recording is flat in the fleet's size.
"""

from __future__ import annotations

import json
import os
import time

ENV = "POWERFLEET_REPLY_TIMINGS"


class ReplyTimings:
    """Timings of replies handled since the last state write (none kept when off)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.pending: list[dict[str, object]] = []

    @classmethod
    def from_env(cls) -> ReplyTimings:
        return cls(os.environ.get(ENV) or None)

    @property
    def on(self) -> bool:
        return self.path is not None

    def handled(self, device: str, created_at: float, wall_s: float, cpu_s: float) -> None:
        if self.path is not None:
            item = {"device": device, "created": created_at, "handled": time.time()}
            self.pending.append({**item, "wall_s": wall_s, "cpu_s": cpu_s})

    def written(self, wall_s: float, cpu_s: float) -> None:
        """The state write that published every pending reply is done."""
        if self.path is None or not self.pending:
            return
        now, n = time.time(), len(self.pending)
        share = {"written": now, "write_wall_s": wall_s, "write_cpu_s": cpu_s, "batch": n}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(json.dumps({**p, **share}) + "\n" for p in self.pending)
        self.pending = []


def write_gap(took_s: float, every_s: float, share: float) -> float:
    """Wall seconds from one state write's start to the next: ``every_s``, or longer when the
    last write took more than ``share`` of that. Why: a write renders only the devices that
    changed (``roundstate.Writer``) but still fingerprints every device and writes every byte of
    state.json and metrics.prom, so its cost grows with the fleet; a fixed gap would
    let it take the whole loop at a thousand devices and make every reply wait behind it.
    Bounded this way the coordinator's writing stays under ``share`` of its time and its cost
    per reply flat in N; what grows is how stale ``powerfleet status`` may be (the gap)."""
    return max(every_s, took_s / share)
