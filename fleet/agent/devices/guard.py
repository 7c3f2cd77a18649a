"""Give the device back on every way out of the process.

Why: a Jetson left locked at its lowest GPU frequency stays slow (and a board left at its highest
stays hot) until someone notices, so the original bounds must come back whether the agent
finishes, raises, is stopped with Ctrl-C or is killed with SIGTERM by its supervisor (the Flower
client, systemd). The context manager covers exceptions, atexit covers a normal interpreter exit
(including sys.exit), and the signal handlers cover SIGTERM/SIGINT, which by default end Python
without running either. SIGKILL cannot be caught: nothing can restore after it; the state file
(``clockstate``) lets the next start repair that.

Two races are closed here. A signal landing between the ``max_freq`` and ``min_freq`` writes (or
inside one write, before its ``close`` flushes it) would let the restore run first and the stale
write land after it, leaving the clock capped: ``deferred_signals()`` marks such a section and our
handlers postpone themselves to its end. (``pthread_sigmask`` alone cannot do this: Python runs
handlers in the main thread whichever thread the kernel picked, so with a sampler thread alive the
handler still runs between the two writes.) And a handler only runs between bytecodes, so a
training step stuck in one long C call (a b=128 step at 76.8 MHz takes longer than a supervisor
waits) would hold the clocks for its whole duration: ``start_prompt_restore`` has a thread woken
through ``signal.set_wakeup_fd`` restore the clocks at once, while the main thread finishes the
step and exits through the ordinary handler.

Python 3.6 compatible, stdlib only.
"""

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from fleet.agent.devices.base import Backend, DeviceError

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopFlag(object):
    """Set once a stop signal arrived: loops check it between steps to wind down early.

    Not a ``threading.Event``: the signal handler sets it in the main thread at any bytecode,
    and an Event's ``set()`` takes a lock that the interrupted code may hold (a first signal's
    handler inside its own ``set()`` when a second signal lands): the process would wait on
    itself with the clock still locked, and the prompt-restore thread, setting it too, with it.
    A bool needs no lock under the GIL."""

    def __init__(self) -> None:
        self.flag = False

    def set(self) -> None:
        self.flag = True

    def is_set(self) -> bool:
        return self.flag


STOP = StopFlag()

_critical_depth = [0]  # main thread only: how deep in deferred_signals() it is
_pending: List[Tuple[Any, int, Any]] = []  # (handler, signum, frame) postponed to the end


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Postpone this module's signal handlers to the end of the block (main thread only).

    Other threads take the backend's lock instead; a signal handler run in the main thread then
    waits for their write pair to finish before restoring.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _critical_depth[0] += 1
    try:
        yield
    finally:
        _critical_depth[0] -= 1
        if _critical_depth[0] == 0:
            while _pending:
                handler, signum, frame = _pending.pop(0)
                handler(signum, frame)


def _restore_quietly(backend: Backend) -> None:
    """Restore, reporting a failure on stderr instead of raising (we are already on the way out)."""
    try:
        backend.restore()
    except Exception as exc:  # noqa: BLE001 - an exit path must not raise
        sys.stderr.write("powerfleet: could not restore device settings: {}\n".format(exc))


def install_restore_handlers(
    backend: Backend, signals: Sequence[int] = DEFAULT_SIGNALS
) -> Callable[[], None]:
    """Make the process restore ``backend`` at exit and on the given signals.

    For each signal the handler restores first, then hands over to whatever was installed
    before: a Python handler is called (so KeyboardInterrupt still reaches the main loop for
    SIGINT); the default action becomes ``SystemExit(128 + signum)``, the shell's convention
    (143 for SIGTERM), raised so that ``finally`` blocks still run. A signal that was ignored
    stays ignored. Signals can only be installed from the main thread; elsewhere only the atexit
    hook is installed.

    Returns a function that removes the hooks again and puts the previous handlers back.
    """

    def hook() -> None:  # a distinct callable per install, so uninstall() removes only this one
        _restore_quietly(backend)

    atexit.register(hook)
    previous = {}

    def make_handler(prev: object) -> Callable:
        def handler(signum: int, frame: object) -> None:
            if _critical_depth[0] > 0:
                _pending.append((handler, signum, frame))
                return
            STOP.set()
            _restore_quietly(backend)
            if callable(prev):
                prev(signum, frame)
                return
            raise SystemExit(128 + signum)

        return handler

    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            prev = signal.getsignal(sig)
            if prev == signal.SIG_IGN:
                continue
            previous[sig] = prev
            signal.signal(sig, make_handler(prev))

    def uninstall() -> None:
        atexit.unregister(hook)
        for sig, prev in previous.items():
            # None means "installed from C, not Python": the default is the closest we can do.
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        previous.clear()

    return uninstall


def start_prompt_restore(
    backend: Backend, grace_s: float = 10.0, signals: Sequence[int] = DEFAULT_SIGNALS
) -> Optional[Callable[[], None]]:
    """Restore the clocks within milliseconds of SIGTERM/SIGINT, even mid-step (main thread).

    Call after ``install_restore_handlers`` (whose handler still ends the process). A thread
    blocks on a pipe that the C-level signal handler writes the signal number to; on a stop
    signal it sets ``STOP``, calls ``backend.shutdown()`` (restore, then refuse new locks so the
    main thread cannot pin the clock again on its way out) or ``restore()``, and if the process
    has not exited ``grace_s`` later, ends it with ``os._exit(128 + signum)``: the clocks are
    back by then, so a hard exit loses nothing the board needs. Returns a function that stops
    watching, or None outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    try:
        previous_fd = signal.set_wakeup_fd(wfd)
    except (ValueError, OSError):
        os.close(rfd)
        os.close(wfd)
        return None
    wanted = set(int(s) for s in signals)
    stopped = threading.Event()

    def watch() -> None:
        try:
            _watch()
        finally:
            os.close(rfd)

    def _watch() -> None:
        while not stopped.is_set():
            try:
                data = os.read(rfd, 64)
            except OSError:
                return
            if not data:
                return
            hits = [b for b in bytearray(data) if b in wanted]
            if not hits or stopped.is_set():
                continue
            STOP.set()
            shutdown = getattr(backend, "shutdown", None)
            try:
                (shutdown if callable(shutdown) else backend.restore)()
                sys.stderr.write("powerfleet: signal {}: device clocks restored\n".format(hits[0]))
            except Exception as exc:  # noqa: BLE001 - an exit path must not raise
                sys.stderr.write("powerfleet: could not restore device settings: {}\n".format(exc))
            deadline = time.monotonic() + float(grace_s)
            while time.monotonic() < deadline and not stopped.is_set():
                time.sleep(0.05)
            if not stopped.is_set():
                os._exit(128 + hits[0])

    thread = threading.Thread(target=watch, name="prompt-restore")
    thread.daemon = True
    thread.start()

    def uninstall() -> None:
        stopped.set()
        try:
            signal.set_wakeup_fd(previous_fd)
        except (ValueError, OSError):
            pass
        os.close(wfd)  # the reader sees EOF/EBADF and ends

    return uninstall


@contextlib.contextmanager
def locked(backend: Backend, freq_mhz: float) -> Iterator[Backend]:
    """Run a block with the GPU pinned at ``freq_mhz``; restore on any exit from the block."""
    try:
        backend.lock(freq_mhz)
        yield backend
    finally:
        backend.restore()


__all__ = [
    "install_restore_handlers",
    "start_prompt_restore",
    "deferred_signals",
    "locked",
    "DeviceError",
    "DEFAULT_SIGNALS",
    "STOP",
]
