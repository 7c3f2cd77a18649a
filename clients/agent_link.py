"""AgentLink: the client side of the on-device agent's JSON-lines protocol (fleet/agent/protocol).

Why a subprocess and not an import: on a Jetson the agent runs under JetPack's Python 3.6 and
torch 1.10 while Flower needs Python >= 3.11, so the hardware client starts
``python -m fleet.agent`` (under whichever interpreter the node config names) and talks to it
over stdin/stdout. Plain Python, no Flower, so it is testable against a replay agent.

Every request has a deadline: a reader thread queues the agent's lines, and a request that sees
no final response in time kills nothing by itself but raises ``AgentTimeout`` (the caller's
``finally: close()`` then stops the agent). An agent that dies mid-request raises ``AgentError``
with the last line of its stderr, which is where it writes its one-line reason.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet
from fleet.agent.devices import DeviceError, all_options, backend_argv, options_for
from fleet.common.errors import InputError
from fleet.config.app_keys import HARDWARE_NODE_KEYS

# The directory that holds the ``fleet`` package: the agent's interpreter imports from here.
PACKAGE_ROOT = str(Path(fleet.__file__).resolve().parent.parent)

ProgressCallback = Callable[[dict[str, Any]], None]


class AgentError(RuntimeError):
    """The agent refused a command or went away; the message is the agent's own one line."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(f"agent {command}: {message}")
        self.command = command
        self.reason = message


class AgentTimeout(AgentError):
    """No final response within the request's deadline."""


def agent_command(
    python: str | None = None,
    backend: str = "jetson",
    log_level: str | None = None,
    work_dir: str | None = None,
    **options: Any,
) -> list[str]:
    """The agent's argv: ``options`` are the backend's constructor options (its ``SPEC``), and
    only those given travel, since each backend refuses foreign ones."""
    try:
        argv = backend_argv(backend, options)
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    argv = [python or sys.executable, "-m", "fleet.agent", *argv]
    if log_level:
        argv += ["--log-level", log_level]
    if work_dir:  # the agent's own 0700 directory: every path a request names lies inside
        argv += ["--work-dir", str(work_dir)]
    return argv


def node_config_keys() -> list[str]:
    """Every node-config key a hardware node may carry: the agent's (declared with every other
    node-config key in ``fleet.config.schema``), then each backend option's public name
    (generated from the backend registry)."""
    return [*HARDWARE_NODE_KEYS, *(opt.public for opt, _ in all_options())]


def _flag(nc: Mapping[str, Any], key: str) -> bool:
    """A yes/no node-config value: a bool, or true/false/1/0/yes/no as text (``--node-config``
    gives text); anything else is refused naming the key."""
    value = nc.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise InputError(f"node config: {key}={value!r:.80} is not true or false")


@dataclass(frozen=True)
class AgentSettings:
    """How to start and talk to this board's agent (from the node config).

    ``options`` are the backend's constructor options (``{"sysfs_root": "/x", ...}``).
    """

    backend: str = "jetson"
    python: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0  # hello, lock, shutdown
    long_timeout_s: float = 3600.0  # profile, train
    work_dir: str = ""
    budget_file: str = ""  # a live budget file on the board (the closed loop re-reads it)
    # rehearsal: steps last at least the profile's step time (a virtual board, a faster host)
    pace_to_profile: bool = False

    @classmethod
    def from_node_config(cls, nc: Mapping[str, Any]) -> AgentSettings:
        def text(key: str) -> str | None:
            value = nc.get(key)
            return str(value) if value not in (None, "") else None

        raw_timeout = nc.get("agent-timeout-s", 3600.0)
        try:
            long_timeout = float(raw_timeout)
            if isinstance(raw_timeout, bool) or not 0 < long_timeout < math.inf:
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(
                f"node config: agent-timeout-s={raw_timeout!r:.80} is not a number of seconds > 0"
            ) from None
        backend = text("backend") or "jetson"
        given = {
            opt.public: nc[opt.public]
            for opt, _ in all_options()
            if nc.get(opt.public) not in (None, "")
        }
        try:
            options = options_for(backend, given, "node config")
        except DeviceError as exc:
            raise InputError(str(exc)) from None
        return cls(
            backend=backend,
            python=text("agent-python"),
            options=options,
            long_timeout_s=long_timeout,
            work_dir=text("work-dir") or "",
            budget_file=text("budget-file") or "",
            pace_to_profile=_flag(nc, "pace-to-profile"),
        )

    def argv(self) -> list[str]:
        return agent_command(
            self.python, self.backend, work_dir=self.work_dir or None, **dict(self.options)
        )


class AgentLink:
    """One agent subprocess; ``with AgentLink(argv) as link: link.request("hello")``."""

    def __init__(
        self,
        argv: list[str],
        *,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        close_timeout_s: float = 30.0,
    ) -> None:
        self.argv = list(argv)
        self.timeout_s = float(timeout_s)
        self.close_timeout_s = float(close_timeout_s)  # per close() stage; a step can be long
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=50)
        self._next_id = 0
        self._stderr_thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> AgentLink:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                env=env,
                cwd=self.cwd,
            )
        except OSError as exc:
            raise AgentError("start", f"cannot start {self.argv[0]}: {exc.strerror}") from None
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._pump_stderr, daemon=True)
        self._stderr_thread.start()
        return self

    def __enter__(self) -> AgentLink:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pump_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # EOF

    def _pump_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.strip():
                self._stderr.append(line.rstrip("\n"))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self) -> str:
        return self._stderr[-1] if self._stderr else ""

    def close(self, timeout_s: float | None = None) -> int | None:
        """Ask the agent to restore and exit; kill it if it does not. Returns its exit code.

        Each stage (shutdown request, EOF, SIGTERM) waits ``timeout_s`` (default
        ``close_timeout_s``); the agent restores clocks within ms of SIGTERM even mid-step.
        """
        timeout_s = self.close_timeout_s if timeout_s is None else timeout_s
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                self.request("shutdown", timeout_s=timeout_s)
            except AgentError:
                pass
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM: the agent restores the clocks, then exits 143
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()

    # ---------------------------------------------------------------- requests

    def request(
        self,
        cmd: str,
        *,
        timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
        **args: Any,
    ) -> dict[str, Any]:
        """Send one command; return its ``ok`` response, passing progress events to the callback.

        Raises ``AgentError`` with the agent's message when it answers ``ok: false`` or exits,
        ``AgentTimeout`` when no final response arrives within ``timeout_s``.
        """
        proc = self.proc
        if proc is None or proc.stdin is None:
            raise AgentError(cmd, "agent not started")
        if proc.poll() is not None:
            raise AgentError(cmd, self._exit_reason())
        self._next_id += 1
        rid = self._next_id
        line = json.dumps({"id": rid, "cmd": cmd, **args}, separators=(",", ":"))
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise AgentError(cmd, self._exit_reason()) from None
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentTimeout(cmd, f"no response within {timeout_s or self.timeout_s:g} s")
            try:
                raw = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                self._lines.put(None)  # keep EOF visible to later calls
                raise AgentError(cmd, self._exit_reason())
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # not a protocol line; the agent keeps stdout clean, so ignore it
            if not isinstance(msg, dict) or msg.get("id") != rid:
                continue
            if msg.get("event") == "progress":
                if on_progress is not None:
                    on_progress(msg)
                continue
            if msg.get("ok"):
                return msg
            raise AgentError(cmd, str(msg.get("error") or "failed without a reason"))

    def _exit_reason(self) -> str:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and self._stderr_thread is not None:
            self._stderr_thread.join(timeout=1.0)  # let the last stderr line arrive
        tail = self.stderr_tail()
        status = "closed its output" if code is None else f"exited with code {code}"
        return f"agent {status}" + (f": {tail}" if tail else "")
