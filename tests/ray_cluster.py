"""A two-node Ray cluster on 127.0.0.1 for tests: a head and a second node, each with its own
temp dir, ports and one CPU, stopped on the way out (every process whose command line names
the node's temp dir).

Why every port is given: two raylets on one host would otherwise meet on Ray's fixed defaults
(the dashboard agent's 52365, the client server's 10001) and on another user's cluster; a temp
dir of our own keeps ``/tmp/ray/ray_current_cluster`` (which a bare ``ray.init()`` would join)
untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from deployment import processes

RAY = str(Path(sys.executable).parent / "ray")
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's floor is 75 MiB; a replay fleet moves kilobytes


def _ports(head: bool) -> list[str]:
    names = ["node-manager-port", "object-manager-port", "dashboard-agent-listen-port"]
    names += ["dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port"]
    if head:
        names += ["ray-client-server-port", "dashboard-port"]
    return [f"--{name}={processes.free_port()}" for name in names]


def _start(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}): {tail}")


def _stop(temp_dir: Path) -> None:
    """Every process of the node whose temp dir this is (its command line names the dir:
    nobody else's), SIGTERM then SIGKILL. Not ``ray stop``: it stops every Ray process of
    this user on the machine, other people's runs included."""
    mine = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(temp_dir).encode() in cmdline:
            mine.append(int(entry.name))
    processes.signal_all(mine, 10.0)


@contextlib.contextmanager
def two_node_cluster(extra_resources: str = '{"node2": 1}') -> Iterator[str]:
    """Yield the head's address (127.0.0.1:PORT) of a head + one worker node, one CPU each;
    the worker also holds ``extra_resources``."""
    root = Path(tempfile.mkdtemp(prefix="pfray-", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, **processes.QUIET_ENV, "RAY_ADDRESS": ""}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    port = processes.free_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus=1", "--num-gpus=0", f"--object-store-memory={OBJECT_STORE_BYTES}"]
    common += ["--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    heads, nodes = root / "h", root / "n"
    try:
        _start(
            [RAY, "start", "--head", f"--port={port}", f"--temp-dir={heads}"]
            + ["--include-dashboard=false", *common, *_ports(head=True)],
            env,
        )
        _start(
            [RAY, "start", f"--address={address}", f"--temp-dir={nodes}"]
            + [f"--resources={extra_resources}", *common, *_ports(head=False)],
            env,
        )
        yield address
    finally:
        _stop(nodes)
        _stop(heads)
        shutil.rmtree(root, ignore_errors=True)
