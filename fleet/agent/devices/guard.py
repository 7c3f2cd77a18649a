"""Give the device back on every way out of the process.

Why: a Jetson left locked at its lowest GPU frequency stays slow (and a board left at its highest
stays hot) until someone notices, so the original bounds must come back whether the agent
finishes, raises, is stopped with Ctrl-C or is killed with SIGTERM by its supervisor (the Flower
client, systemd). The context manager covers exceptions, atexit covers a normal interpreter exit
(including sys.exit), and the signal handlers cover SIGTERM/SIGINT, which by default end Python
without running either. SIGKILL cannot be caught: nothing can restore after it.

Python 3.6 compatible, stdlib only.
"""

import atexit
import contextlib
import signal
import sys
import threading
from typing import Callable, Iterator, Sequence

from .base import Backend, DeviceError

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


@contextlib.contextmanager
def locked(backend: Backend, freq_mhz: float) -> Iterator[Backend]:
    """Run a block with the GPU pinned at ``freq_mhz``; restore on any exit from the block."""
    try:
        backend.lock(freq_mhz)
        yield backend
    finally:
        backend.restore()


__all__ = ["install_restore_handlers", "locked", "DeviceError", "DEFAULT_SIGNALS"]
