"""Deployment on real machines: the coordinator's whole role, start to report.

Why plain functions over subprocesses: the same steps serve `powerfleet coordinator`,
`powerfleet device` and the integration test, and each is a short, checkable action (start,
wait until healthy, submit, poll, stop). The steps live by job: the daemons' command lines
(``daemons.py``), starting and stopping processes (``processes.py``), the `flwr` CLI
(``flwr_cli.py``), what the deployment trusts (``security.py``); this module strings them
together for the coordinator. Flower 1.41 facts this relies on (see the scouting notes): the
SuperLink serves the Fleet, Control and Runtime APIs on one ``--host/--port``; ``flwr run``
exits 0 even when the run fails, so success is ``finished:completed`` from ``flwr ls`` *and*
the ServerApp's report with our run token.

Security (checks in ``deployment/security.py``): TLS is the default and the production path:
the SuperLink takes ``--ssl-certfile``, ``--ssl-keyfile`` and ``--ssl-ca-certfile``; SuperNodes
and the `flwr` CLI verify it with the CA certificate (``--root-certificates``, and
``root-certificates`` in the CLI's config.toml). With TLS, SuperNode authentication: the
SuperLink runs with ``--enable-supernode-auth``, each authorised public key is registered with
``flwr supernode register`` right after it is healthy, and each SuperNode signs with
``--auth-supernode-private-key``. Plaintext needs an explicit ``insecure=True`` and an address
that resolves to loopback only; Flower then gets the resolved IP literal. Every daemon and `flwr`
call runs with ``FLWR_HOME`` and ``TMPDIR`` inside a private per-run directory.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployment import security
from deployment.daemons import superlink_command
from deployment.flwr_cli import register_supernodes, submit_run, wait_for_run, write_cli_config
from deployment.processes import signal_all, start_process, stop_tree, wait_healthy
from deployment.security import Tls
from fleet.common.errors import InputError
from fleet.method import liveness
from fleet.reports import report as fleet_report
from fleet.reports.roundstate import STATE_FILE, resumable


@dataclass
class CoordinatorResult:
    status: str
    details: str
    run_id: int | None
    report: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed" and self.report is not None


# The SuperLink's state file, relative to the run directory (run_coordinator's default).
SUPERLINK_DB = "superlink.db"


def superlink_database(run_dir: Path, database: str | Path | None) -> Path | None:
    """Where the SuperLink keeps its state: None (in memory), or ``database`` resolved against
    ``run_dir`` (created 0700 when missing: the file holds the run's messages)."""
    if database is None:
        return None
    if not str(database).strip():
        raise InputError("database: empty path (pass None to keep the state in memory)")
    path = run_dir / Path(database).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def read_report(run_dir: Path, token: str) -> dict[str, Any] | None:
    """This run's report, or None when the run wrote none (``fleet.reports.report.read_report``)."""
    try:
        return fleet_report.read_report(run_dir, token)
    except InputError:
        return None


def missing_report(run_dir: Path, token: str) -> str:
    """Why this run has no report (not written; another run's), in the reader's words."""
    try:
        fleet_report.read_report(run_dir, token)
    except InputError as exc:
        return str(exc)
    return ""


def stop_previous_writer(run_dir: Path, state: dict[str, Any], timeout_s: float = 20.0) -> None:
    """A coordinator restarted on its run directory takes the run over from a ServerApp that
    still writes it: one left by a coordinator that was killed (its SuperLink SIGKILLed with
    it; where nobody reaps the dead SuperLink, Flower's parent watch never fires, and the
    orphan reconnects to the new SuperLink and finishes the round under its old run token, so
    the new run's report was sometimes the old one's: issue 31, finding 10). It is stopped
    (SIGTERM: it records ``interrupted``; SIGKILL after ``timeout_s``), with the
    ``flower-superexec`` that launched it. A live writer that is no ServerApp is refused."""
    writer = state.get("writer")
    if not isinstance(writer, dict) or liveness.holder(writer) != liveness.ALIVE:
        return
    pid = int(writer["pid"])
    if "flwr-serverapp" not in _cmdline(pid):
        raise InputError(
            f"{run_dir / STATE_FILE}: its run is being written by a live process (pid {pid}: "
            f"{_cmdline(pid)[:80] or '?'}); stop it first or use another run directory"
        )
    pids = [pid]
    parent = _ppid(pid)
    if parent and "flower-superexec" in _cmdline(parent):
        pids.append(parent)
    try:
        signal_all(pids, timeout_s)
    except PermissionError:
        raise InputError(
            f"{run_dir / STATE_FILE}: its run is being written by pid {pid}, which this user "
            "may not stop; stop it first or use another run directory"
        ) from None


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def run_coordinator(
    fleet_path: str | Path,
    run_dir: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 9091,
    num_nodes: int = 0,
    tls: Tls | None = None,
    insecure: bool = False,
    auth_public_keys: list[Path] | None = None,
    ship_weights: bool | None = None,
    timeout_s: float = 3600.0,
    work_dir: str | Path | None = None,
    keep_work_dir: bool = False,
    on_status: Callable[[str], None] | None = None,
    database: str | Path | None = SUPERLINK_DB,
    segment_s: float | None = None,
) -> CoordinatorResult:
    """Start a SuperLink, run the fleet's rounds through `flwr run`, stop it; the report.

    ``database``: the SuperLink's state file (``--database``); a relative path lies in
    ``run_dir`` (default ``run_dir/superlink.db``). It is what makes a SuperLink killed
    mid-run restartable with its runs and nodes (a restart on the same file knows them); None
    keeps the state in memory, as Flower does by default.

    Rounds run in segments of ``segment_s`` device seconds (None: the app's default; 0: one
    request per device and round). ``run_dir`` may hold an unfinished run of the same fleet:
    the coordinator then resumes it (``fleet.reports.roundstate.resumable``; a finished run or
    another fleet's is refused). ``timeout_s`` counts from the run's last progress
    (``run_dir/state.json``), so a round of hours that keeps reporting is never cut short.

    ``auth_public_keys`` (checked with ``security.public_keys``) turns on SuperNode
    authentication and registers them before the run is submitted. The SuperLink's and the
    CLI's Flower homes live in a fresh 0700 directory under ``work_dir`` (default
    ``security.state_base()``), removed at the end unless ``keep_work_dir``; the SuperLink's log
    goes to ``run_dir/logs``.
    """
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    state = resumable(run_dir, fleet_path)  # a finished run's directory: refused before anything
    if state is not None:
        stop_previous_writer(run_dir, state)
    keys = list(auth_public_keys or [])
    db = superlink_database(run_dir, database)
    argv = superlink_command(
        host, port, tls, insecure=insecure, supernode_auth=bool(keys), database=db
    )
    home = security.run_dir(work_dir or security.state_base(), "coordinator")
    try:
        return _coordinate(argv, home, fleet_path, run_dir, host, port, num_nodes, tls,
                           insecure, keys, ship_weights, timeout_s, on_status,
                           segment_s)  # fmt: skip
    finally:
        if not keep_work_dir:
            shutil.rmtree(home, ignore_errors=True)


def _coordinate(
    argv: list[str],
    home: Path,
    fleet_path: Path,
    run_dir: Path,
    host: str,
    port: int,
    num_nodes: int,
    tls: Tls | None,
    insecure: bool,
    keys: list[Path],
    ship_weights: bool | None,
    timeout_s: float,
    on_status: Callable[[str], None] | None,
    segment_s: float | None = None,
) -> CoordinatorResult:
    link_home, cli_home = home / "superlink", home / "cli"
    link_home.mkdir(mode=0o700)
    if insecure:
        cli_host = security.plaintext_host(host)
    else:
        cli_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    address = security.join_host_port(cli_host, port)
    write_cli_config(cli_home, address, tls.ca_certfile if tls else None)
    token = uuid.uuid4().hex
    run_config: dict[str, object] = {
        "fleet-path": str(fleet_path),
        "run-dir": str(run_dir),
        "num-nodes": int(num_nodes),
        "run-token": token,
    }
    if ship_weights is not None:
        run_config["ship-weights"] = bool(ship_weights)
    if segment_s is not None:
        run_config["segment-s"] = float(segment_s)
    proc = start_process(argv, link_home, run_dir / "logs" / "superlink.log", die_with_parent=True)
    run_id = None
    try:
        wait_healthy(cli_host, port, proc, tls=tls is not None)
        register_supernodes(cli_home, keys)
        run_id = submit_run(cli_home, run_config)
        status, details = wait_for_run(
            cli_home, run_id, timeout_s, on_status=on_status, progress_file=run_dir / STATE_FILE
        )
    finally:
        stop_tree(proc)
    report = read_report(run_dir, token)
    if report is None and status == "finished:completed":
        details = missing_report(run_dir, token)  # Flower's say nothing here ("N/A")
    return CoordinatorResult(status, details, run_id, report)
