"""Our ClientApp's own work per message, recorded for the Flower engine's time split.

Why in the product and not in the benchmark: the work to price runs inside Flower's Ray actors
(a simulation) or a SuperNode's ClientApp process, which ``benchmarks/fleet_scale.py`` cannot
reach into. Off unless the environment names a file (``POWERFLEET_CLIENT_TIMINGS``, which the
Ray workers inherit from the SuperLink's environment); then every handled message appends one
JSON line: the handler, the process, and the thread CPU and wall seconds from the message
entering our handler to its reply built. What Flower does around it (carrying the message,
the actor pool, pickling) is not in it: that is Flower's floor, priced by the minimal app
(``benchmarks/minimal_flower_app``) with the same messages. Table: docs/deploy-load.md.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import TypeVar

ENV = "POWERFLEET_CLIENT_TIMINGS"

Handler = TypeVar("Handler", bound=Callable)


def timed(handler: Handler) -> Handler:
    """The handler, recording its cost per message when ``POWERFLEET_CLIENT_TIMINGS`` is set
    (one ``os.environ`` lookup per message otherwise)."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        path = os.environ.get(ENV)
        if not path:
            return handler(*args, **kwargs)
        wall, cpu = time.perf_counter(), time.thread_time()
        reply = handler(*args, **kwargs)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        item = {"handler": handler.__name__, "pid": os.getpid(), "cpu_s": cpu, "wall_s": wall}
        line = (json.dumps(item) + "\n").encode()
        # one write of a short line on O_APPEND: the two actors' lines never interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return reply

    return wrapper  # type: ignore[return-value]


def read_timings(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Per handler: messages, CPU and wall seconds summed, and how many processes ran it."""
    out: dict[str, dict[str, float]] = {}
    pids: dict[str, set[int]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            name = str(item["handler"])
            agg = out.setdefault(name, {"messages": 0, "cpu_s": 0.0, "wall_s": 0.0})
            agg["messages"] += 1
            agg["cpu_s"] += float(item["cpu_s"])
            agg["wall_s"] += float(item["wall_s"])
            pids.setdefault(name, set()).add(int(item["pid"]))
    for name, agg in out.items():
        agg["processes"] = len(pids[name])
    return out
