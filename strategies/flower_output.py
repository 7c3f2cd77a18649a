"""What the ServerApp's process prints: plain text, Flower's and Ray's noise counted, the table.

Why here: under ``flwr run``, everything the ServerApp's process logs or prints travels as text
through the SuperLink's log stream to the user's ``flwr run --stream``, whose output may be a
terminal, a pipe or a file; this process cannot tell which. So:

- Flower's console handler and Ray's prefix on its workers' lines are made plain (no ANSI
  colour codes) for this process unless the user asks for colour with ``FORCE_COLOR``.
  Flower colours its lines unconditionally and ignores ``NO_COLOR``; the lines Flower prints
  before this app is loaded stay as Flower writes them.
- Warnings that concern Flower's or Ray's own future (a ``FutureWarning`` or
  ``DeprecationWarning`` raised inside ``ray`` or ``flwr``) say nothing to a powerfleet user:
  they are counted, not shown, and ``summary()`` turns the count into one log line at the end
  of the run, so nothing is hidden. Every other warning is shown as Python would.
- ``print_result`` prints the result table ``powerfleet simulate`` prints.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from typing import Any, TextIO

# (category, first words of the message) -> times seen; filled by the hook below
_filtered: Counter[tuple[str, str]] = Counter()
_original_showwarning = warnings.showwarning
NOISE_CATEGORIES = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)
NOISE_PACKAGES = ("ray", "flwr")


def _package_of(filename: str) -> str | None:
    """'…/site-packages/ray/_private/worker.py' -> 'ray'; None outside Flower and Ray."""
    parts = filename.replace("\\", "/").split("/")
    for pkg in NOISE_PACKAGES:
        if pkg in parts[:-1]:
            return pkg
    return None


def is_noise(category: type[Warning], filename: str) -> bool:
    """A warning about Flower's or Ray's own future, raised in their code."""
    return issubclass(category, NOISE_CATEGORIES) and _package_of(filename) is not None


def _show(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    if is_noise(category, filename):
        words = " ".join(str(message).split())
        _filtered[(f"{_package_of(filename)} {category.__name__}", words[:70])] += 1
        return
    _original_showwarning(message, category, filename, lineno, file, line)


def install(env: dict[str, str] | None = None) -> None:
    """Count Flower's and Ray's noise instead of showing it; plain log lines unless
    ``FORCE_COLOR`` is set. Idempotent; called when the ServerApp's module is imported, before
    Flower starts Ray in the same process."""
    env = dict(os.environ) if env is None else env
    warnings.showwarning = _show
    # Ray's warnings are raised once per call site; the default filter would still drop repeats
    # before they reach the hook, which is fine: the count is of warnings shown, not raised.
    if not env.get("FORCE_COLOR"):
        from flwr.supercore.logger import update_console_handler

        update_console_handler(colored=False)
        # Ray's driver prefixes its workers' output with a colour unless this says 0; it reads
        # the variable as it prints, in this process
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def summary() -> str | None:
    """One line naming what was filtered, or None when nothing was."""
    if not _filtered:
        return None
    total = sum(_filtered.values())
    kinds = "; ".join(
        f"{kind}: {text}{'…' if len(text) == 70 else ''}" + (f" (x{n})" if n > 1 else "")
        for (kind, text), n in sorted(_filtered.items())
    )
    return f"filtered {total} Flower/Ray warning(s) that do not concern this run: {kinds}"


def print_result(report: dict[str, Any]) -> None:
    """The result table of ``powerfleet simulate``, as plain text on this process's stdout
    (the log stream): wide enough that no column folds, no colour, no highlighting."""
    from rich.console import Console

    from fleet.cli.result import show

    out = Console(file=sys.stdout, width=200, force_terminal=False, color_system=None)
    show(report, out)
