"""Deployment on real machines: SuperLink, SuperNodes and `flwr run`, as plain functions.

Why plain functions over subprocesses: the same steps serve `powerfleet coordinator`,
`powerfleet device` and the integration test, and each is a short, checkable action (start,
wait until healthy, submit, poll, stop). Flower 1.41 facts this relies on (see the scouting
notes): the SuperLink serves the Fleet, Control and Runtime APIs on one ``--host/--port``; the
SuperLink and each SuperNode start ``flower-superexec`` found on ``PATH``, which starts one
``flwr-serverapp``/``flwr-clientapp`` per run/message in a new session, so stopping a SuperLink
means stopping that process tree too; ``flwr run`` exits 0 even when the run fails, so success is
``finished:completed`` from ``flwr ls`` *and* the ServerApp's report with our run token.

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

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployment import security
from fleet.common.errors import InputError
from fleet.reports import report as fleet_report

APP_DIR = Path(__file__).resolve().parent / "flower_app"
CONNECTION = "powerfleet"  # the connection name in the CLI's config.toml

QUIET_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


class DeployError(RuntimeError):
    """A Flower process or command did not do what the deployment needs."""


@dataclass(frozen=True)
class Tls:
    """TLS files. The SuperLink needs all three; clients need only ``ca_certfile``."""

    ca_certfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def check_server(self) -> None:
        missing = [
            flag
            for flag, value in (
                ("--ssl-ca-certfile", self.ca_certfile),
                ("--ssl-certfile", self.certfile),
                ("--ssl-keyfile", self.keyfile),
            )
            if not value
        ]
        if missing:
            raise InputError(f"TLS needs {', '.join(missing)} as well")
        for value in (self.ca_certfile, self.certfile, self.keyfile):
            if not Path(str(value)).is_file():
                raise InputError(f"TLS file not found: {value}")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- environment


def flower_env(flwr_home: str | Path) -> dict[str, str]:
    """This interpreter's bin dir first on PATH (flower-superexec is found there), offline."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env["FLWR_HOME"] = str(flwr_home)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    return env


def flower_bin(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise DeployError(f"{name} not found next to {sys.executable}: install flwr in this venv")
    return str(path)


def process_env(flwr_home: str | Path) -> dict[str, str]:
    """flower_env plus a private TMPDIR inside the run's directory (nothing in a shared /tmp)."""
    env = flower_env(flwr_home)
    tmp = Path(flwr_home) / "tmp"
    tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- commands


def serve_host(host: str, tls: Tls | None, insecure: bool) -> str:
    """The host the SuperLink binds: as given with TLS, the resolved loopback IP with
    ``insecure``; InputError (one line) for every other combination."""
    if tls is not None and insecure:
        raise InputError("--insecure and the --ssl-* TLS files exclude each other: pick one")
    if tls is None and not insecure:
        raise InputError(
            f"refusing to serve on {host} without TLS: pass --ssl-certfile, --ssl-keyfile and "
            "--ssl-ca-certfile, or --insecure on a loopback address"
        )
    return security.plaintext_host(host) if insecure else host


def superlink_command(
    host: str,
    port: int,
    tls: Tls | None = None,
    *,
    insecure: bool = False,
    supernode_auth: bool = False,
) -> list[str]:
    """``flower-superlink`` on host:port: TLS, or plaintext with ``insecure`` on an address
    that resolves to loopback only. ``supernode_auth`` (needs TLS, as Flower insists) admits
    only SuperNodes whose public key is registered (``register_supernodes``)."""
    bind = serve_host(host, tls, insecure)
    argv = [flower_bin("flower-superlink"), "--host", bind, "--port", str(port)]
    argv.append("--disable-runtime-dependency-installation")
    if tls is None:
        if supernode_auth:
            raise InputError("SuperNode authentication needs TLS: pass the --ssl-* files too")
        return argv + ["--insecure"]
    tls.check_server()
    if supernode_auth:
        argv.append("--enable-supernode-auth")
    return argv + [  # absolute: the daemon runs in its private directory
        "--ssl-ca-certfile",
        str(Path(str(tls.ca_certfile)).resolve()),
        "--ssl-certfile",
        str(Path(str(tls.certfile)).resolve()),
        "--ssl-keyfile",
        str(Path(str(tls.keyfile)).resolve()),
    ]


def toml_value(value: object) -> str:
    """One TOML value (what --node-config and -c expect): strings quoted, numbers as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def format_node_config(config: dict[str, object]) -> str:
    """--node-config: space-separated key=TOML-value pairs."""
    return " ".join(f"{k}={toml_value(v)}" for k, v in config.items())


def supernode_command(
    superlink: str,
    port: int,
    node_config: dict[str, object],
    root_certificates: str | None = None,
    *,
    insecure: bool = False,
    auth_private_key: str | None = None,
) -> list[str]:
    """``flower-supernode`` connecting to ``superlink``; its local Runtime API on 127.0.0.1:port.

    TLS (``root_certificates``, the SuperLink's CA) or ``insecure`` to an address that resolves
    to loopback only (then connecting to the resolved IP). ``auth_private_key``: this node's
    OpenSSH ECDSA key for SuperNode authentication (TLS only)."""
    host, link_port = split_address(superlink)
    if root_certificates and insecure:
        raise InputError("--insecure and --root-certificates exclude each other: pick one")
    if not root_certificates and not insecure:
        raise InputError(
            f"refusing to connect to {host} without TLS: pass --root-certificates CA.pem "
            "(the SuperLink's CA certificate), or --insecure to a loopback address"
        )
    if insecure:
        if auth_private_key:
            raise InputError("--auth-private-key needs TLS: pass --root-certificates instead")
        superlink = security.join_host_port(security.plaintext_host(host), link_port)
    argv = [
        flower_bin("flower-supernode"),
        "--superlink",
        superlink,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--node-config",
        format_node_config(node_config),
    ]
    if insecure:
        return argv + ["--insecure"]
    if not Path(str(root_certificates)).is_file():
        raise InputError(f"--root-certificates: file not found: {root_certificates}")
    argv += ["--root-certificates", str(Path(str(root_certificates)).resolve())]
    if auth_private_key:
        argv += ["--auth-supernode-private-key", str(security.check_private_key(auth_private_key))]
    return argv


# --------------------------------------------------------------------------- processes


def start_process(argv: list[str], flwr_home: str | Path, log_path: str | Path) -> subprocess.Popen:
    """Start a Flower daemon in its own session, output to a log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(flwr_home).mkdir(mode=0o700, parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; closed by the OS on exit
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=process_env(flwr_home),
            cwd=str(flwr_home),
            start_new_session=True,
        )
    finally:
        log.close()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found through /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _send(pids: list[int], sig: int) -> None:
    """``sig`` to every pid; one that has already exited is no error."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def signal_all(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM every pid, then SIGKILL those still alive after ``timeout_s``."""
    _send(pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(0.1)
    _send([p for p in pids if is_alive(p)], signal.SIGKILL)


def stop_tree(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM a daemon and everything it started (superexec runs in its own session), then
    SIGKILL whatever is left after ``timeout_s``."""
    if proc is None:
        return
    pids = [proc.pid, *descendants(proc.pid)] if proc.poll() is None else [proc.pid]
    _send(pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(is_alive(p) for p in pids[1:]):
            break
        time.sleep(0.1)
    signal_all([p for p in pids if p != proc.pid and is_alive(p)], 0.0)
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass


def wait_healthy(
    host: str, port: int, proc: subprocess.Popen, timeout_s: float = 30.0, tls: bool = False
) -> None:
    """Until the SuperLink answers /health (plain HTTP) or, with TLS, accepts connections."""
    deadline = time.monotonic() + timeout_s
    target = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DeployError(f"the SuperLink exited with code {proc.returncode}; see its log")
        try:
            if tls:
                socket.create_connection((target, port), timeout=1.0).close()
                return
            url = f"http://{security.join_host_port(target, port)}/health"
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise DeployError(f"the SuperLink on {host}:{port} did not become healthy in {timeout_s:g} s")


# --------------------------------------------------------------------------- the flwr CLI


def write_cli_config(
    flwr_home: str | Path, address: str, root_certificates: str | None = None
) -> Path:
    """$FLWR_HOME/config.toml with one connection (`powerfleet`) to the SuperLink."""
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]"]
    lines.append(f"address = {toml_value(address)}")
    if root_certificates:
        lines.append(f"root-certificates = {toml_value(str(Path(root_certificates).resolve()))}")
        lines.append("insecure = false")
    else:
        lines.append("insecure = true")
    path = Path(flwr_home) / "config.toml"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def flwr(args: list[str], flwr_home: str | Path, timeout_s: float = 60.0) -> dict[str, Any]:
    """Run a `flwr` CLI command with ``--format json``; its JSON answer or a DeployError."""
    argv = [flower_bin("flwr"), *args, "--format", "json"]
    try:
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=process_env(flwr_home),
            cwd=str(flwr_home),
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise DeployError(f"flwr {args[0]} did not answer within {timeout_s:g} s") from None
    try:
        data = json.loads(out.stdout)
    except ValueError:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        raise DeployError(f"flwr {args[0]}: {tail[0]}") from None
    if isinstance(data, dict) and data.get("success") is False:
        raise DeployError(f"flwr {args[0]}: {data.get('error-message', data)}")
    return data


def register_supernodes(flwr_home: str | Path, keys: list[Path]) -> list[int]:
    """Register each authorised SuperNode public key with the SuperLink (its Control API, the
    way Flower 1.41 admits SuperNodes under ``--enable-supernode-auth``); their node ids."""
    ids = []
    for key in keys:
        data = flwr(["supernode", "register", str(key), CONNECTION], flwr_home)
        ids.append(int(data["node-id"]))
    return ids


def online_nodes(flwr_home: str | Path) -> int:
    data = flwr(["supernode", "list", CONNECTION], flwr_home)
    return sum(1 for n in data.get("nodes", []) if n.get("status") == "online")


def wait_for_nodes(flwr_home: str | Path, expected: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        n = online_nodes(flwr_home)
        if n >= expected:
            return
        if time.monotonic() >= deadline:
            raise DeployError(f"only {n} of {expected} SuperNodes online after {timeout_s:g} s")
        time.sleep(0.5)


def submit_run(
    flwr_home: str | Path, run_config: dict[str, object], app_dir: str | Path = APP_DIR
) -> int:
    """`flwr run` the powerfleet app with these run-config overrides; returns the run id.

    The overrides go through a TOML file (``-c FILE``): paths with spaces or quotes need no
    shell-style quoting that way.
    """
    overrides = Path(flwr_home) / f"run-config-{uuid.uuid4().hex[:8]}.toml"
    overrides.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in run_config.items()))
    data = flwr(["run", str(app_dir), CONNECTION, "-c", str(overrides)], flwr_home, 120.0)
    run_id = data.get("run-id")
    if run_id is None:
        raise DeployError(f"flwr run returned no run id: {data}")
    return int(run_id)


def run_status(flwr_home: str | Path, run_id: int) -> tuple[str, str]:
    data = flwr(["ls", CONNECTION, "--run-id", str(run_id)], flwr_home)
    runs = data.get("runs") or []
    if not runs:
        raise DeployError(f"run {run_id} is unknown to the SuperLink")
    return str(runs[0].get("status", "")), str(runs[0].get("status-details", ""))


def wait_for_run(
    flwr_home: str | Path,
    run_id: int,
    timeout_s: float = 3600.0,
    poll_s: float = 1.0,
    on_status: Callable[[str], None] | None = None,
) -> tuple[str, str]:
    """Poll `flwr ls` until the run is finished:*; (status, details). Stops it on timeout."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        status, details = run_status(flwr_home, run_id)
        if status != last and on_status is not None:
            on_status(status)
        last = status
        if status.startswith("finished"):
            return status, details
        if time.monotonic() >= deadline:
            try:
                flwr(["stop", str(run_id), CONNECTION], flwr_home)
            except DeployError:
                pass
            return "timeout", f"the run did not finish within {timeout_s:g} s and was stopped"
        time.sleep(poll_s)


# --------------------------------------------------------------------------- whole roles


@dataclass
class CoordinatorResult:
    status: str
    details: str
    run_id: int | None
    report: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed" and self.report is not None


def read_report(run_dir: Path, token: str) -> dict[str, Any] | None:
    """This run's report, or None when the run wrote none (``fleet.reports.report.read_report``)."""
    try:
        return fleet_report.read_report(run_dir, token)
    except InputError:
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
) -> CoordinatorResult:
    """Start a SuperLink, run the fleet's rounds through `flwr run`, stop it; the report.

    ``auth_public_keys`` (checked with ``security.public_keys``) turns on SuperNode
    authentication and registers them before the run is submitted. The SuperLink's and the
    CLI's Flower homes live in a fresh 0700 directory under ``work_dir`` (default
    ``security.state_base()``), removed at the end unless ``keep_work_dir``; the SuperLink's log
    goes to ``run_dir/logs``.
    """
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    keys = list(auth_public_keys or [])
    argv = superlink_command(host, port, tls, insecure=insecure, supernode_auth=bool(keys))
    home = security.run_dir(work_dir or security.state_base(), "coordinator")
    try:
        return _coordinate(argv, home, fleet_path, run_dir, host, port, num_nodes, tls,
                           insecure, keys, ship_weights, timeout_s, on_status)  # fmt: skip
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
    proc = start_process(argv, link_home, run_dir / "logs" / "superlink.log")
    run_id = None
    try:
        wait_healthy(cli_host, port, proc, tls=tls is not None)
        register_supernodes(cli_home, keys)
        run_id = submit_run(cli_home, run_config)
        status, details = wait_for_run(cli_home, run_id, timeout_s, on_status=on_status)
    finally:
        stop_tree(proc)
    return CoordinatorResult(status, details, run_id, read_report(run_dir, token))


def device_node_config(
    spec_config: dict[str, object], client: str = "replay", **hardware: object
) -> dict[str, object]:
    """The node config for `powerfleet device`: the fleet entry's, plus client and agent keys."""
    config = dict(spec_config)
    if client not in ("replay", "hardware"):
        raise InputError(f"--client must be replay or hardware, got {client!r}")
    config["client"] = client
    for key, value in hardware.items():
        if value not in (None, ""):
            config[key.replace("_", "-")] = value
    return config
