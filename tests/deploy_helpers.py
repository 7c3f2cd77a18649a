"""Shared scaffolding of the deployment tests: real Flower daemons on 127.0.0.1, all stopped.

Every deployment test starts a SuperLink and SuperNodes as real processes, and must leave none
behind (SuperExec and flwr-*app children included, which run in their own sessions). The
bookkeeping for that lives here once: ``stopped_at_exit`` collects and stops every process the
test registers and asserts that none survives; ``start_superlink`` and ``run_loopback_round``
are the usual insecure loopback round (a SuperLink, one SuperNode per node config, one run).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deployment import daemons, flwr_cli, processes
from fleet.reports.roundstate import STATE_FILE

# Hang guards, not speed limits: the suite shares the cores with its other workers
HANG_GUARD_S = 300.0
LOOPBACK_SEGMENT_S = 4000.0  # device seconds: the reference devices' rounds in 1-2 segments


@contextmanager
def stopped_at_exit() -> Iterator[list[subprocess.Popen]]:
    """Yield a list to append started daemons to; on exit stop each with all it spawned.

    Descendants are collected before anything is stopped (a SuperNode's children may be
    re-parented once the SuperLink goes), then again just before each daemon is stopped.
    When the body succeeded, asserts that no collected process is still alive.
    """
    procs: list[subprocess.Popen] = []
    spawned: set[int] = set()
    try:
        yield procs
        for p in procs:
            spawned.update(processes.descendants(p.pid))
    finally:
        for p in procs:
            spawned.update(processes.descendants(p.pid))
            processes.stop_tree(p)
    left = [pid for pid in spawned | {p.pid for p in procs} if processes.is_alive(pid)]
    assert not left, f"processes left running: {left}"


def start_superlink(
    procs: list[subprocess.Popen],
    argv: list[str],
    home: Path,
    log: Path,
    port: int,
    tls: bool = False,
) -> subprocess.Popen:
    """Start a SuperLink (registered in ``procs`` at once) and wait until it serves on ``port``."""
    link = processes.start_process(argv, home, log)
    procs.append(link)
    processes.wait_healthy("127.0.0.1", port, link, tls=tls)
    return link


def run_loopback_round(
    procs: list[subprocess.Popen],
    tmp_path: Path,
    node_configs: dict[str, dict[str, object]],
    run_config: dict[str, object],
    timeout_s: float,
) -> tuple[str, str]:
    """An insecure SuperLink and one SuperNode per ``node_configs`` entry (name -> node config),
    Flower homes under ``tmp_path/flwr``, logs under ``tmp_path/logs``; submit one run with
    ``run_config`` once every node is online and return its final (status, details)."""
    home = tmp_path / "flwr"
    port = processes.free_port()
    start_superlink(
        procs,
        daemons.superlink_command("127.0.0.1", port, insecure=True),
        (home / "superlink").resolve(),
        tmp_path / "logs" / "superlink.log",
        port,
    )
    for name, config in node_configs.items():
        argv = daemons.supernode_command(
            f"127.0.0.1:{port}", processes.free_port(), config, insecure=True
        )
        procs.append(processes.start_process(argv, home / name, tmp_path / "logs" / name))
    cli = home / "cli"
    flwr_cli.write_cli_config(cli, f"127.0.0.1:{port}")
    flwr_cli.wait_for_nodes(cli, len(node_configs), timeout_s=HANG_GUARD_S)
    # Segments cost a Flower message each (a SuperNode idles 3 s between pulls): these rounds
    # run in few long ones unless the test asks; the fault suite runs many short ones.
    run_config = {"segment-s": LOOPBACK_SEGMENT_S, **run_config}
    run_id = flwr_cli.submit_run(cli, run_config)
    # waited for as the coordinator waits: polls slow down while its state file stands still
    run_dir = run_config.get("run-dir")
    state = Path(str(run_dir)) / STATE_FILE if run_dir is not None else None
    return flwr_cli.wait_for_run(
        cli, run_id, timeout_s=max(timeout_s, HANG_GUARD_S), progress_file=state
    )
