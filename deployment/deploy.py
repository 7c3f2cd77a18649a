"""Deployment on real machines: SuperLink, SuperNodes and `flwr run`, as plain functions.

Why plain functions over subprocesses: the same steps serve `powerfleet coordinator`,
`powerfleet device` and the integration test, and each is a short, checkable action (start,
wait until healthy, submit, poll, stop). Flower 1.41 facts this relies on (see the scouting
notes): the SuperLink serves the Fleet, Control and Runtime APIs on one ``--host/--port``; the
SuperLink and each SuperNode start ``flower-superexec`` found on ``PATH``, which starts one
``flwr-serverapp``/``flwr-clientapp`` per run/message in a new session, so stopping a SuperLink
means stopping that process tree too; ``flwr run`` exits 0 even when the run fails, so success is
``finished:completed`` from ``flwr ls`` *and* the ServerApp's report with our run token.

Security: without TLS every process binds and connects on loopback only. Serving or connecting
beyond loopback needs TLS files: the SuperLink takes ``--ssl-certfile``, ``--ssl-keyfile`` and
``--ssl-ca-certfile``; SuperNodes and the `flwr` CLI verify it with the CA certificate
(``--root-certificates``, and ``root-certificates`` in the CLI's config.toml).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet import report as fleet_report
from fleet.errors import InputError

APP_DIR = Path(__file__).resolve().parent / "flower_app"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
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


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


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


def private_home(role: str) -> Path:
    home = Path(tempfile.gettempdir()) / f"powerfleet-flwr-{os.getuid()}" / role
    home.mkdir(parents=True, exist_ok=True)
    return home


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- commands


def superlink_command(host: str, port: int, tls: Tls | None = None) -> list[str]:
    """``flower-superlink`` on host:port; refuses anything but loopback without TLS."""
    argv = [flower_bin("flower-superlink"), "--host", host, "--port", str(port)]
    argv.append("--disable-runtime-dependency-installation")
    if tls is None:
        if not is_loopback(host):
            raise InputError(
                f"refusing to serve on {host} without TLS: pass --ssl-certfile, --ssl-keyfile "
                "and --ssl-ca-certfile (or use 127.0.0.1)"
            )
        return argv + ["--insecure"]
    tls.check_server()
    return argv + [
        "--ssl-ca-certfile",
        str(tls.ca_certfile),
        "--ssl-certfile",
        str(tls.certfile),
        "--ssl-keyfile",
        str(tls.keyfile),
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
) -> list[str]:
    """``flower-supernode`` connecting to ``superlink``; its local Runtime API on 127.0.0.1:port."""
    host, _ = split_address(superlink)
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
    if root_certificates:
        if not Path(root_certificates).is_file():
            raise InputError(f"--root-certificates: file not found: {root_certificates}")
        return argv + ["--root-certificates", root_certificates]
    if not is_loopback(host):
        raise InputError(
            f"refusing to connect to {host} without TLS: pass --root-certificates CA.pem "
            "(the SuperLink's CA certificate)"
        )
    return argv + ["--insecure"]


# --------------------------------------------------------------------------- processes


def start_process(argv: list[str], flwr_home: str | Path, log_path: str | Path) -> subprocess.Popen:
    """Start a Flower daemon in its own session, output to a log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(flwr_home).mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; closed by the OS on exit
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=flower_env(flwr_home),
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


def signal_all(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM every pid, then SIGKILL those still alive after ``timeout_s``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if is_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_tree(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM a daemon and everything it started (superexec runs in its own session), then
    SIGKILL whatever is left after ``timeout_s``."""
    if proc is None:
        return
    pids = [proc.pid, *descendants(proc.pid)] if proc.poll() is None else [proc.pid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
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
            with urllib.request.urlopen(f"http://{target}:{port}/health", timeout=1.0):
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
    path.parent.mkdir(parents=True, exist_ok=True)
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
            env=flower_env(flwr_home),
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
    """This run's report, or None when the run wrote none (``fleet.report.read_report``)."""
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
    ship_weights: bool | None = None,
    timeout_s: float = 3600.0,
    flwr_home: str | Path | None = None,
    on_status: Callable[[str], None] | None = None,
) -> CoordinatorResult:
    """Start a SuperLink, run the fleet's rounds through `flwr run`, stop it; the report."""
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    home = Path(flwr_home) if flwr_home else private_home(f"coordinator-{port}")
    link_home, cli_home = home / "superlink", home / "cli"
    link_home.mkdir(parents=True, exist_ok=True)
    argv = superlink_command(host, port, tls)  # validates TLS before anything starts
    cli_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    write_cli_config(cli_home, f"{cli_host}:{port}", tls.ca_certfile if tls else None)
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
        wait_healthy(host, port, proc, tls=tls is not None)
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
