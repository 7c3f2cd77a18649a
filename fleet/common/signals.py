"""Ctrl-C and SIGTERM as the long-running commands meet them: one exception, one exit code.

Why: ``powerfleet simulate`` and ``powerfleet coordinator`` write a run's state as they go; a
run stopped by a signal must say so in its state (``interrupted``, with when and how far it
got, ``fleet.reports.runlife``) and on stderr in one line, and stop what it started (a local
SuperLink, a ServerApp). Python turns SIGINT into ``KeyboardInterrupt`` but lets SIGTERM kill
the process outright, with no ``finally``: ``sigterm_as_interrupt`` makes SIGTERM the same
exception (``Interrupted``, a ``KeyboardInterrupt``, so every cleanup that handles Ctrl-C
handles it too), and the CLI exits 128 + the signal's number (130, 143).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Interrupted(KeyboardInterrupt):
    """The run was stopped by ``signum``; ``str()`` says when and how far it got (or is empty)."""

    def __init__(self, message: str = "", signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)


def signum_of(exc: BaseException) -> int:
    """The signal behind an interruption: SIGTERM when ``sigterm_as_interrupt`` raised it."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def name_of(exc: BaseException) -> str:
    return signal.Signals(signum_of(exc)).name


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises ``Interrupted(signum=SIGTERM)`` in the main thread (elsewhere,
    where no handler can be installed, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted("", signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def noting_signals(
    seen: list[int], on_signal: Callable[[int], None] | None = None
) -> Iterator[None]:
    """Within: SIGINT and SIGTERM are appended to ``seen``, and ``on_signal(signum)`` runs,
    before the handler already in place does. Flower's ServerApp exits through its own
    handler, which first talks to a SuperLink that may be gone (seconds, and whoever stops it
    may SIGKILL it meanwhile): what must be written before the process ends is written here."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    olds: dict[int, Any] = {}

    def note(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        if on_signal is not None and len(seen) == 1:
            try:
                on_signal(signum)
            except Exception:  # noqa: BLE001 - the exit must go on whatever this did
                pass
        old = olds.get(signum)
        if callable(old):
            old(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise Interrupted("", signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        olds[sig] = signal.signal(sig, note)
    try:
        yield
    finally:
        for num, old in olds.items():
            signal.signal(num, old)
