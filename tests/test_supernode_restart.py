"""A SuperNode whose connection to the SuperLink ended is started again by ``powerfleet device``.

Reproduces what 40 SuperNodes on one machine met (docs/deploy-load.md): the SuperLink's SQLite
state locked longer than its busy timeout answers a node's ``pull-messages`` with HTTP 500,
Flower's SuperNode gives up its connection (node deactivated) but its process stays alive. Here
the lock is taken by the test on the SuperLink's real database file, the SuperNode is the real
one under the real ``powerfleet device``; the device's node must be online again, under a new
node id, once the lock is gone.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from deployment import daemons, flwr_cli, processes, supernode
from tests.deploy_helpers import HANG_GUARD_S, start_superlink, stopped_at_exit
from tests.fault_helpers import wait_until
from tests.test_flower_deploy import FLEET, ROOT


def online_ids(cli_home: Path) -> set[int]:
    data = flwr_cli.flwr(["supernode", "list", flwr_cli.CONNECTION], cli_home)
    return {int(n["node-id"]) for n in data.get("nodes", []) if n.get("status") == "online"}


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_supernode_whose_connection_ended_is_started_again(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET)
    db = tmp_path / "superlink.db"
    port = processes.free_port()
    with stopped_at_exit() as procs:
        start_superlink(
            procs,
            daemons.superlink_command("127.0.0.1", port, insecure=True, database=db),
            tmp_path / "flwr" / "superlink",
            tmp_path / "logs" / "superlink.log",
            port,
        )
        cli_home = tmp_path / "flwr" / "cli"
        flwr_cli.write_cli_config(cli_home, f"127.0.0.1:{port}")
        err = tmp_path / "device.err"
        with open(err, "wb") as sink:
            device = subprocess.Popen(
                [sys.executable, "-m", "fleet", "device", "--fleet", str(fleet),
                 "--name", "tx2-b", "--superlink", f"127.0.0.1:{port}", "--insecure",
                 "--work-dir", str(tmp_path / "work")],
                stdout=sink, stderr=sink, cwd=str(ROOT),
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
            )  # fmt: skip
        procs.append(device)
        first = wait_until(
            lambda: online_ids(cli_home), HANG_GUARD_S, "the device's node online", 0.5,
            max_period_s=flwr_cli.NODES_MAX_POLL_S,
        )  # fmt: skip

        # the SuperLink's state locked past its 5 s busy timeout: its next pull is a 500
        lock = sqlite3.connect(db, timeout=30.0, isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            wait_until(
                lambda: "connection to the SuperLink ended" in err.read_text(),
                HANG_GUARD_S, "the SuperNode's connection ended", 0.5,
            )  # fmt: skip
        finally:
            lock.execute("COMMIT")
            lock.close()

        again = wait_until(
            lambda: online_ids(cli_home) - first, HANG_GUARD_S, "a node online again", 0.5,
            max_period_s=flwr_cli.NODES_MAX_POLL_S,
        )  # fmt: skip
        assert len(again) == 1 and device.poll() is None
        text = err.read_text()
        assert "starting it again in 1 s" in text, text
        logs = list((tmp_path / "work" / "logs").glob("supernode-*.log"))
        (log,) = logs
        body = log.read_text()
        assert f"exiting with code {supernode.CONNECTION_ENDED}" in body
        assert body.count("SuperNode ID:") == 2  # the same log: a second start, a new node

        device.send_signal(signal.SIGTERM)
        assert device.wait(timeout=HANG_GUARD_S) == 0
        assert "stopping" in err.read_text()
