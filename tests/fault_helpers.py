"""Fault injection over real Flower processes on 127.0.0.1, every action bounded in time.

Why a harness: a fleet's round must survive a device that vanishes (SIGKILL), comes back (same
node config, same Flower home), a coordinator that dies and restarts on its saved state, a
SuperLink that freezes (SIGSTOP) and a board that answers nonsense. Tests and
``benchmarks/fault_today.py`` play those faults on the real daemons, so each fault is one call
here, and none can hang a test: every wait has a hang guard (``wait_until`` raises
``HangGuard`` naming what did not happen), and every process lands in the list that
``tests/deploy_helpers.stopped_at_exit`` stops (a restarted daemon is appended again).

``Loopback`` is one insecure SuperLink (optionally with ``--database``) and its SuperNodes, each
remembered with its argv, Flower home and log so a restart is the same daemon again. Killing
freezes the whole tree first (SIGSTOP), collects it again, then SIGKILLs it, so no child is
spawned between the look and the kill. ``fleet_of_replay_devices`` writes a small fleet of the
reference devices (``simulations/fleets/default.toml``) with absolute paths, and
``hostile_agent_python`` a wrapper that makes a hardware node start ``tests/hostile_agent.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployment import daemons, flwr_cli, processes
from deployment.processes import DeployError
from fleet.config.fleetfile import load_fleet
from tests.deploy_helpers import start_superlink

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FLEET = ROOT / "simulations" / "fleets" / "default.toml"
HOSTILE_AGENT = ROOT / "tests" / "hostile_agent.py"
HANG_GUARD_S = 300.0  # no single wait in a fault case may take longer


class HangGuard(AssertionError):
    """A condition a fault case waited for did not hold within its hang guard."""


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    period_s: float = 0.2,
    max_period_s: float | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); HangGuard after
    ``timeout_s`` (the machine's speed decides only how soon, never whether, a case passes).
    With ``max_period_s`` the period grows 1.5x after each miss up to it: for a predicate that
    starts a process (a `flwr` command, about a second of CPU), which a tight poll would spend
    the cores on while the thing waited for starts."""
    deadline = time.monotonic() + timeout_s
    wait = period_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HangGuard(f"{what}: not within {timeout_s:g} s")
        time.sleep(wait)
        if max_period_s is not None:
            wait = flwr_cli.next_poll_s(wait, False, period_s, max_period_s)


def read_json(path: str | Path) -> Any:
    """The file's JSON, or None while it is missing or half-written."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def wait_for_json(
    path: str | Path,
    condition: Callable[[Any], bool] = lambda _: True,
    timeout_s: float = HANG_GUARD_S,
) -> Any:
    """Until ``path`` (run_dir/state.json, a report, an agent's mark) parses and ``condition``
    holds on it; its content."""

    def ready() -> Any:
        data = read_json(path)
        return data if data is not None and condition(data) else None

    return wait_until(ready, timeout_s, f"{path} (condition)")


# ------------------------------------------------------------------------------ processes


def _pid(proc: subprocess.Popen | int) -> int:
    return proc if isinstance(proc, int) else proc.pid


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def find_process(root: subprocess.Popen | int, needle: str) -> int | None:
    """The first process below ``root`` whose command line contains ``needle``."""
    for pid in processes.descendants(_pid(root)):
        if needle in cmdline(pid) and processes.is_alive(pid):
            return pid
    return None


def wait_for_process(root: subprocess.Popen | int, needle: str, timeout_s: float = 60.0) -> int:
    return wait_until(lambda: find_process(root, needle), timeout_s, f"a process {needle!r}")


def kill_tree(proc: subprocess.Popen | int, timeout_s: float = 60.0) -> list[int]:
    """SIGKILL ``proc`` and everything below it (a SuperNode's superexec, flwr-clientapp and
    agent; a SuperLink's ServerApp): freeze the tree, look again, kill it; waits (bounded)
    until every one is gone and reaps ``proc``. Returns the pids killed."""
    pid = _pid(proc)
    pids = freeze_tree(pid, looks=3)
    for p in pids:
        _signal(p, signal.SIGKILL)
    if isinstance(proc, subprocess.Popen):
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    wait_until(lambda: not any(processes.is_alive(p) for p in pids), timeout_s, f"kill {pid}")
    return pids


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def freeze(proc: subprocess.Popen | int) -> None:
    """SIGSTOP one process (not its children: a frozen SuperLink, a ServerApp still running)."""
    _signal(_pid(proc), signal.SIGSTOP)


def thaw(proc: subprocess.Popen | int) -> None:
    _signal(_pid(proc), signal.SIGCONT)


def freeze_tree(proc: subprocess.Popen | int, looks: int = 2) -> list[int]:
    """SIGSTOP ``proc`` and everything below it (a SuperNode with its ClientApp: nothing it
    does moves on, however slow this machine is, until :func:`thaw_all`). Returns the pids."""
    pid = _pid(proc)
    pids = [pid, *processes.descendants(pid)]
    for _ in range(looks):  # frozen processes cannot spawn: a second look finds the late ones
        for p in pids:
            _signal(p, signal.SIGSTOP)
        pids = list(dict.fromkeys([*pids, *processes.descendants(pid)]))
    return pids


def thaw_all(pids: list[int]) -> None:
    for p in reversed(pids):
        _signal(p, signal.SIGCONT)


# ------------------------------------------------------------------------------ daemons


@dataclass
class Daemon:
    """One Flower daemon as started, so a restart is the same daemon again."""

    argv: list[str]
    home: Path
    log: Path
    proc: subprocess.Popen | None = None


class Loopback:
    """An insecure SuperLink on 127.0.0.1 and SuperNodes, each killable and restartable.

    ``procs`` is ``stopped_at_exit``'s list: every process started (and restarted) lands there.
    ``database``: the SuperLink's ``--database`` file (None: in memory); ``port``: where it
    serves (default a free one).
    """

    def __init__(
        self,
        procs: list[subprocess.Popen],
        base: Path,
        database: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.procs = procs
        self.base = Path(base)
        self.port = port or processes.free_port()
        self.database = database
        if database is not None:  # Flower opens the file but creates no directory
            database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.cli = self.base / "flwr" / "cli"
        flwr_cli.write_cli_config(self.cli, f"127.0.0.1:{self.port}")
        argv = daemons.superlink_command("127.0.0.1", self.port, insecure=True, database=database)
        self.link = Daemon(argv, self.base / "flwr" / "superlink", self.base / "logs" / "link")
        self.nodes: dict[str, Daemon] = {}

    # the SuperLink ----------------------------------------------------------------------
    def start_link(self, timeout_s: float = 60.0) -> subprocess.Popen:
        """Start (or restart, same port and database) the SuperLink; wait until healthy. A
        port still held by the killed one is retried until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.link.proc = start_superlink(
                    self.procs, self.link.argv, self.link.home.resolve(), self.link.log, self.port
                )
                return self.link.proc
            except DeployError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def kill_link(self) -> list[int]:
        """SIGKILL the SuperLink and its tree (superexec, the ServerApp): the coordinator dies."""
        assert self.link.proc is not None, "the SuperLink was never started"
        return kill_tree(self.link.proc)

    def freeze_link(self) -> None:
        assert self.link.proc is not None
        freeze(self.link.proc)

    def thaw_link(self) -> None:
        assert self.link.proc is not None
        thaw(self.link.proc)

    # SuperNodes -------------------------------------------------------------------------
    def start_node(self, name: str, config: dict[str, object] | None = None) -> subprocess.Popen:
        """Start SuperNode ``name`` (its node config the first time; a restart reuses it and
        its Flower home)."""
        if name not in self.nodes:
            assert config is not None, f"node {name}: a first start needs its node config"
            argv = daemons.supernode_command(
                f"127.0.0.1:{self.port}", processes.free_port(), config, insecure=True
            )
            home = self.base / "flwr" / "nodes" / name
            self.nodes[name] = Daemon(argv, home, self.base / "logs" / f"node-{name}")
        node = self.nodes[name]
        node.proc = processes.start_process(node.argv, node.home, node.log)
        self.procs.append(node.proc)
        return node.proc

    def kill_node(self, name: str) -> list[int]:
        proc = self.nodes[name].proc
        assert proc is not None, f"node {name} was never started"
        return kill_tree(proc)

    def restart_node(self, name: str) -> subprocess.Popen:
        return self.start_node(name)

    def node_proc(self, name: str) -> subprocess.Popen:
        proc = self.nodes[name].proc
        assert proc is not None
        return proc

    # the Control API --------------------------------------------------------------------
    def online(self) -> int:
        try:
            return flwr_cli.online_nodes(self.cli)
        except DeployError:
            return -1

    def wait_nodes(self, count: int, timeout_s: float = 90.0) -> None:
        wait_until(
            lambda: self.online() >= count, timeout_s, f"{count} SuperNodes online", 0.5,
            max_period_s=flwr_cli.NODES_MAX_POLL_S,
        )  # fmt: skip

    def submit(self, run_config: dict[str, object]) -> int:
        return flwr_cli.submit_run(self.cli, run_config)

    def run_status(self, run_id: int) -> tuple[str, str]:
        """(status, details) from ``flwr ls``; ("unknown-run", why) when the SuperLink does not
        know the run, ("unreachable", why) when it cannot answer."""
        try:
            return flwr_cli.run_status(self.cli, run_id)
        except DeployError as exc:
            if "unknown to the SuperLink" in str(exc) or "Run ID not found" in str(exc):
                return "unknown-run", str(exc)  # a SuperLink that forgot its runs
            return "unreachable", str(exc)

    def wait_run(
        self, run_id: int, timeout_s: float, poll_s: float = 0.5, max_poll_s: float = 5.0
    ) -> tuple[str, str, list[tuple[float, str]]]:
        """Until the run is finished:* or ``timeout_s`` passed (then status "hang-guard"; the
        run is left as it is). Returns (status, details, [(seconds since the call, status)]
        at every change seen). Paced as the coordinator paces its own wait
        (``flwr_cli.next_poll_s``): each `flwr ls` is a process, so polls slow down to
        ``max_poll_s`` while nothing changes, and the run's ``state.json`` beside the database
        saying the round ended brings the next one forward at once."""
        progress = self.database.parent / "state.json" if self.database is not None else None
        t0 = time.monotonic()
        seen: list[tuple[float, str]] = []
        wait, ended = poll_s, False
        while True:
            status, details = self.run_status(run_id)
            changed = not seen or seen[-1][1] != status
            if changed:
                seen.append((round(time.monotonic() - t0, 1), status))
            if status.startswith("finished"):
                return status, details, seen
            left = timeout_s - (time.monotonic() - t0)
            if left <= 0:
                return "hang-guard", f"not finished after {timeout_s:g} s ({status})", seen
            wait = flwr_cli.next_poll_s(wait, changed or ended, poll_s, max_poll_s)
            ended = flwr_cli.wait_for_end(progress, min(wait, left))


# ------------------------------------------------------------------------------ fleets


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def _table(header: str, values: dict[str, object]) -> str:
    return f"[{header}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in values.items()) + "\n"


def reference_devices() -> list[dict[str, object]]:
    """The default fleet's devices that train (not the starved one), paths made absolute."""
    data = tomllib.loads(DEFAULT_FLEET.read_text())
    out = []
    for dev in data["devices"]:
        dev = dict(dev)
        for key in ("profile", "data"):
            dev[key] = str((DEFAULT_FLEET.parent / str(dev[key])).resolve())
        if dev.get("budget_w") != 1.5:
            out.append(dev)
    return out


def fleet_of_replay_devices(
    tmp_path: Path,
    count: int = 3,
    *,
    name: str = "faults",
    run: dict[str, object] | None = None,
    extra_devices: list[dict[str, object]] = (),  # type: ignore[assignment]
) -> Path:
    """``tmp_path/fleet.toml``: ``count`` replay devices cycled from the reference fleet
    (renamed ``dev-1``...; each trains 2,456-7,347 device-seconds on its trace), then
    ``extra_devices`` as given; the run ships no weights (a replay never reads them). ``run``
    overrides ``[run]`` keys."""
    base = tomllib.loads(DEFAULT_FLEET.read_text())["run"]
    settings = dict(base, name=name, ship_weights=False)
    settings["efficiency"] = str((DEFAULT_FLEET.parent / str(base["efficiency"])).resolve())
    settings.update(run or {})
    ref = reference_devices()
    devices = [dict(ref[i % len(ref)], name=f"dev-{i + 1}") for i in range(count)]
    text = _table("run", settings)
    for dev in [*devices, *extra_devices]:
        text += _table("[devices]", dev)
    path = Path(tmp_path) / "fleet.toml"
    path.write_text(text)
    return path


def replay_node_configs(fleet_path: Path, names: list[str] | None = None) -> dict[str, dict]:
    """Each (named) device's node config as `powerfleet device --client replay` builds it."""
    return {
        spec.name: daemons.device_node_config(spec.to_node_config(), "replay")
        for spec in load_fleet(fleet_path).devices
        if names is None or spec.name in names
    }


def board_node_config(
    fleet_path: Path, board_root: Path, base: Path, agent_timeout_s: float = 120.0
) -> dict:
    """The one device of ``fleet_path`` as a hardware node on a virtual board: the Jetson
    backend on ``board_root``, its state and work directories under ``base``, paced to its
    profile (the board lives its device clock, not this host's)."""
    (config,) = replay_node_configs(fleet_path).values()
    config.update(
        client="hardware",
        backend="jetson",
        **{
            "sysfs-root": str(board_root),
            "state-dir": str(base / "state"),
            "work-dir": str(base / "work"),
            "agent-timeout-s": agent_timeout_s,
            "pace-to-profile": "true",
        },
    )
    return config


def hostile_agent_python(directory: Path, mode: str = "ok", delay_s: float = 0.0) -> Path:
    """An executable for a hardware node's ``agent-python``: it runs ``tests/hostile_agent.py``
    in ``mode`` (answering train after ``delay_s``) with the client's arguments after."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"hostile-{mode}-{delay_s:g}.sh"
    path.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{HOSTILE_AGENT}" '
        f'--mode {mode} --delay-s {delay_s:g} "$@"\n'
    )
    path.chmod(0o700)
    return path


def hostile_node_config(
    fleet_path: Path, name: str, agent_python: Path, work_dir: Path
) -> dict[str, object]:
    """A hardware node (replay backend) whose agent is ``agent_python``; the agent marks its
    state in ``work_dir/hostile-agent.json``."""
    (spec,) = [d for d in load_fleet(fleet_path).devices if d.name == name]
    config = daemons.device_node_config(spec.to_node_config(), "hardware")
    config.update(
        {
            "backend": "replay",
            "profile-csv": spec.profile,
            "agent-python": str(agent_python),
            "work-dir": str(work_dir),
            "agent-timeout-s": 600.0,
        }
    )
    return config
