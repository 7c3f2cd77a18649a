"""Flower's processes on this machine: their environment, start, health and tree-wide stop.

Why a module of its own: every Flower daemon and `flwr` call (the coordinator, a device, the
simulation engine, the tests) runs the same way: the binaries next to this interpreter, an
offline, quiet environment with ``FLWR_HOME`` and ``TMPDIR`` inside a private per-run directory,
its own session with output to a log file; and stopping one means stopping the tree it started
(the SuperLink and each SuperNode start ``flower-superexec``, which starts one
``flwr-serverapp``/``flwr-clientapp`` per run/message in a new session). What the processes
are told (``daemons.py``, ``flwr_cli.py``) is apart from how they are run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from deployment import security

QUIET_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_COLOR_PREFIX": "0",  # Ray's driver: its workers' lines without colour codes in our logs
}


class DeployError(RuntimeError):
    """A Flower process or command did not do what the deployment needs."""


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


def start_process(
    argv: list[str],
    flwr_home: str | Path,
    log_path: str | Path,
    extra_env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start a Flower daemon in its own session, output to a log file (``extra_env`` on top of
    ``process_env``: what only this daemon and its children must see).

    ``die_with_parent``: the daemon gets SIGTERM when this process dies, even by SIGKILL (Linux
    ``PR_SET_PDEATHSIG``): a SuperLink that a killed ``powerfleet simulate`` or ``powerfleet
    coordinator`` started does not run on without it, holding its port, with a ServerApp
    still writing the run (its state is then found interrupted: its writer is gone)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(flwr_home).mkdir(mode=0o700, parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; closed by the OS on exit
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**process_env(flwr_home), **(extra_env or {})},
            cwd=str(flwr_home),
            start_new_session=True,
            preexec_fn=death_signal() if die_with_parent else None,
        )
    finally:
        log.close()


def death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel for SIGTERM when the parent dies; None where there
    is no ``prctl`` (not Linux). The libc call is looked up here, in the parent: the child
    between fork and exec only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_it() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return set_it


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
