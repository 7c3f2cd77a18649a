"""The `flwr` CLI as the deployment drives it: its config, JSON answers, nodes, runs.

Why a module of its own: the Control API is reached only through `flwr` commands (register a
SuperNode's key, list nodes, submit a run, poll and stop it), each run with ``--format json``
against one connection (``powerfleet``) in a private ``FLWR_HOME``; the answers' shapes and
Flower 1.41's habits (``flwr run`` exits 0 even when the run fails, so success is
``finished:completed`` from ``flwr ls``) are known here once.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deployment.daemons import toml_value
from deployment.processes import DeployError, flower_bin, process_env

APP_DIR = Path(__file__).resolve().parent / "flower_app"
CONNECTION = "powerfleet"  # the connection name in the CLI's config.toml


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


#: How often ``wait_for_nodes`` asks: every ``NODES_POLL_S`` while the count grows, 1.5x the last
#: wait while it stands still, up to ``NODES_MAX_POLL_S``. Each ask is a `flwr` process (about
#: a second of CPU on a small host) and a SuperNode takes seconds to start, so a fixed half-second
#: poll spent a core on the CLI that the starting nodes needed.
NODES_POLL_S = 0.5
NODES_MAX_POLL_S = 3.0


def wait_for_nodes(flwr_home: str | Path, expected: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    wait, seen = NODES_POLL_S, -1
    while True:
        n = online_nodes(flwr_home)
        if n >= expected:
            return
        if time.monotonic() >= deadline:
            raise DeployError(f"only {n} of {expected} SuperNodes online after {timeout_s:g} s")
        wait = next_poll_s(wait, n > seen, NODES_POLL_S, NODES_MAX_POLL_S)
        seen = max(seen, n)
        time.sleep(min(wait, max(0.0, deadline - time.monotonic())))


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


#: How a waiting coordinator paces `flwr ls`: every ``poll_s`` at first and after a change (a new
#: status, the state file saying the round ended), then half as often again after each quiet poll
#: up to ``max_poll_s``. Why: each `flwr ls` is a new Python process, about a second of CPU on a
#: small host, so asking every second through a round of hours keeps a core busy beside the
#: SuperLink and the ServerApp. The progress file (rewritten at every segment reply and at the
#: round's end) is only stat'ed between polls, every ``PROGRESS_CHECK_S``; when it says the round
#: ended the next poll comes at once, so the end of a run is still seen within about a second.
#: A reply mid-round asks nothing of Flower: it only restarts the timeout.
MAX_POLL_S = 10.0
PROGRESS_CHECK_S = 0.25


def next_poll_s(wait_s: float, lively: bool, poll_s: float, max_poll_s: float) -> float:
    """The wait before the next `flwr ls`: back to ``poll_s`` after a sign of life, else 1.5x
    the last wait, never above ``max_poll_s`` (nor below ``poll_s``)."""
    if lively:
        return poll_s
    return max(poll_s, min(max_poll_s, wait_s * 1.5))


def wait_for_progress(path: str | Path | None, wait_s: float) -> bool:
    """Sleep ``wait_s``, or less when ``path`` changes meanwhile (True: it changed)."""
    if path is None:
        time.sleep(wait_s)
        return False
    before = _stamp(path)
    end = time.monotonic() + wait_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(PROGRESS_CHECK_S, left))
        if _stamp(path) != before:
            return True


def wait_for_end(path: str | Path | None, wait_s: float) -> bool:
    """Sleep ``wait_s``, or less when ``path`` is rewritten saying the round ended (True:
    ``finished`` or ``interrupted`` in it). A rewrite mid-round (a segment's reply) only
    proves life, which the timeout counts from: it is no reason to ask Flower again."""
    end = time.monotonic() + wait_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        if wait_for_progress(path, left) and says_ended(path):
            return True


def says_ended(path: str | Path | None) -> bool:
    """Whether the run's state file says its round ended (a half-written file: not yet)."""
    if path is None:
        return False
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and bool(state.get("finished") or state.get("interrupted"))


def _stamp(path: str | Path) -> tuple[int, int] | None:
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def wait_for_run(
    flwr_home: str | Path,
    run_id: int,
    timeout_s: float = 3600.0,
    poll_s: float = 1.0,
    on_status: Callable[[str], None] | None = None,
    progress_file: str | Path | None = None,
    max_poll_s: float = MAX_POLL_S,
) -> tuple[str, str]:
    """Poll `flwr ls` until the run is finished:*; (status, details). Stops it on timeout.

    With ``progress_file`` (the run's ``state.json``, rewritten at every segment reply) the
    timeout counts from the last progress, not from the start: a round of hours that keeps
    reporting is never cut short, one that stops reporting for ``timeout_s`` is. Polls slow
    down while nothing changes (``next_poll_s``), and the state file saying the round ended
    brings the next one forward (``wait_for_end``); without a progress file they stay every
    ``poll_s``.
    """
    start = time.monotonic()
    last = ""
    wait, ended = poll_s, False
    if progress_file is None:
        max_poll_s = poll_s
    while True:
        status, details = run_status(flwr_home, run_id)
        if status != last and on_status is not None:
            on_status(status)
        changed, last = status != last, status
        if status.startswith("finished"):
            return status, details
        if time.monotonic() >= start + timeout_s + _progress_age(progress_file, start):
            try:
                flwr(["stop", str(run_id), CONNECTION], flwr_home)
            except DeployError:
                pass
            what = "made no progress for" if progress_file else "did not finish within"
            return "timeout", f"the run {what} {timeout_s:g} s and was stopped"
        wait = next_poll_s(wait, changed or ended, poll_s, max_poll_s)
        ended = wait_for_end(progress_file, wait)


def _progress_age(path: str | Path | None, start: float) -> float:
    """Seconds from ``start`` (monotonic) to the progress file's last change (0: none yet)."""
    if path is None:
        return 0.0
    try:
        changed = Path(path).stat().st_mtime
    except OSError:
        return 0.0
    return max(0.0, time.monotonic() - start - (time.time() - changed))
