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


# The SuperLink's state file, relative to the run directory (LinkSettings.database's default).
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


@dataclass(frozen=True)
class LinkSettings:
    """Where the SuperLink listens (``host``, ``port``), whom it trusts (``tls``; plaintext
    only with ``insecure``; ``auth_public_keys``, checked with ``security.public_keys``, turn
    on SuperNode authentication) and where its state lives: ``database`` (``--database``; a
    relative path lies in the run directory, None keeps it in memory) and the Flower homes of
    the SuperLink and the CLI, in a fresh 0700 directory under ``work_dir`` (default
    ``security.state_base()``) removed at the end unless ``keep_work_dir``. One record because
    ``powerfleet coordinator`` checks them together before anything starts
    (``daemons.superlink_command``)."""

    host: str = "127.0.0.1"
    port: int = 9091
    tls: Tls | None = None
    insecure: bool = False
    auth_public_keys: tuple[Path, ...] = ()
    database: str | Path | None = SUPERLINK_DB
    work_dir: str | Path | None = None
    keep_work_dir: bool = False


@dataclass(frozen=True)
class Submission:
    """What the coordinator asks of the run: how many SuperNodes it waits for (``num_nodes``;
    0: the fleet's devices), whether the weights travel (``ship_weights``; None: the app's
    default), the segment length in device seconds (``segment_s``; None: the app's default, 0:
    one request per device and round), and how long without progress it waits
    (``timeout_s``, counted from ``run_dir/state.json``'s last change, so a round of hours
    that keeps reporting is never cut short). The first three become the run config's
    ``num-nodes``, ``ship-weights`` and ``segment-s``."""

    num_nodes: int = 0
    ship_weights: bool | None = None
    segment_s: float | None = None
    timeout_s: float = 3600.0

    def run_config(self, fleet_path: Path, run_dir: Path, token: str) -> dict[str, object]:
        """The `flwr run` overrides for this run (``run-token`` names its report)."""
        config: dict[str, object] = {
            "fleet-path": str(fleet_path),
            "run-dir": str(run_dir),
            "num-nodes": int(self.num_nodes),
            "run-token": token,
        }
        if self.ship_weights is not None:
            config["ship-weights"] = bool(self.ship_weights)
        if self.segment_s is not None:
            config["segment-s"] = float(self.segment_s)
        return config


def run_coordinator(
    fleet_path: str | Path,
    run_dir: str | Path,
    *,
    link: LinkSettings | None = None,
    submission: Submission | None = None,
    on_status: Callable[[str], None] | None = None,
) -> CoordinatorResult:
    """Start a SuperLink, run the fleet's rounds through `flwr run`, stop it; the report.

    ``link`` (default: loopback port 9091 with TLS expected, state in
    ``run_dir/superlink.db``): the SuperLink's address, trust and state (``LinkSettings``).
    The database is what makes a SuperLink killed mid-run restartable with its runs and nodes
    (a restart on the same file knows them). ``submission``: the run asked for
    (``Submission``); ``on_status`` hears each run status while it is polled.

    ``run_dir`` may hold an unfinished run of the same fleet: the coordinator then resumes it
    (``fleet.reports.roundstate.resumable``; a finished run or another fleet's is refused).
    With ``link.auth_public_keys`` they are registered before the run is submitted. The
    SuperLink's log goes to ``run_dir/logs``.
    """
    link = link if link is not None else LinkSettings()
    submission = submission if submission is not None else Submission()
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    state = resumable(run_dir, fleet_path)  # a finished run's directory: refused before anything
    if state is not None:
        stop_previous_writer(run_dir, state)
    db = superlink_database(run_dir, link.database)
    argv = superlink_command(
        link.host,
        link.port,
        link.tls,
        insecure=link.insecure,
        supernode_auth=bool(link.auth_public_keys),
        database=db,
    )
    home = security.run_dir(link.work_dir or security.state_base(), "coordinator")
    try:
        run_config = submission.run_config(fleet_path, run_dir, uuid.uuid4().hex)
        return _coordinate(argv, home, link, run_config, submission.timeout_s, on_status)
    finally:
        if not link.keep_work_dir:
            shutil.rmtree(home, ignore_errors=True)


def _coordinate(
    argv: list[str],
    home: Path,
    link: LinkSettings,
    run_config: dict[str, object],
    timeout_s: float,
    on_status: Callable[[str], None] | None,
) -> CoordinatorResult:
    """The SuperLink from ``argv`` in ``home``, the run of ``run_config`` (whose ``run-dir``
    and ``run-token`` say where its report lies and which report is its own), waited for."""
    link_home, cli_home = home / "superlink", home / "cli"
    link_home.mkdir(mode=0o700)
    if link.insecure:
        cli_host = security.plaintext_host(link.host)
    else:
        cli_host = "127.0.0.1" if link.host in ("0.0.0.0", "::") else link.host
    address = security.join_host_port(cli_host, link.port)
    write_cli_config(cli_home, address, link.tls.ca_certfile if link.tls else None)
    run_dir, token = Path(str(run_config["run-dir"])), str(run_config["run-token"])
    proc = start_process(argv, link_home, run_dir / "logs" / "superlink.log", die_with_parent=True)
    run_id = None
    try:
        wait_healthy(cli_host, link.port, proc, tls=link.tls is not None)
        register_supernodes(cli_home, list(link.auth_public_keys))
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
