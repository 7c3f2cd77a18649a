"""``python -m fleet.agent``: the on-device agent speaking JSON lines on stdin/stdout.

Why the stdout juggling: the protocol owns stdout, and one stray ``print`` (or a C library
writing to file descriptor 1) would corrupt the stream the client parses. So the protocol gets a
private duplicate of fd 1, and fd 1 itself (and ``sys.stdout``) is pointed at stderr, where logs
go. Exit paths: EOF or "shutdown" restore the device and exit 0; SIGTERM restores first and exits
143; Ctrl-C restores and exits 130. Python 3.6 compatible.
"""

import argparse
import io
import logging
import os
import sys
from typing import List, Optional

from fleet.agent.devices import (
    DeviceError,
    add_backend_arguments,
    given_options,
    open_backend,
    options_for,
)
from fleet.agent.devices.guard import install_restore_handlers, start_prompt_restore
from fleet.agent.protocol.confine import ConfineError, Confinement, default_work_dir
from fleet.agent.protocol.handler_api import Context
from fleet.agent.protocol.server import restore_quietly, serve
from fleet.agent.protocol.wire import line_writer
from fleet.method.exit_status import exit_with


def build_parser() -> argparse.ArgumentParser:
    """Backend flags come from the backends' own declarations (``devices.BACKENDS``)."""
    p = argparse.ArgumentParser(
        prog="python -m fleet.agent",
        description="powerfleet on-device agent: JSON-lines requests on stdin, answers on stdout.",
    )
    add_backend_arguments(p, default="cpu")
    p.add_argument(
        "--work-dir",
        help="the agent's own directory (created 0700, ownership checked); every path a request "
        "names must lie in it or in the backend's --state-dir (default: "
        + default_work_dir()
        + ")",
    )
    p.add_argument(
        "--log-level", default="WARNING", help="stderr log level (DEBUG, INFO, WARNING...)"
    )
    return p


def backend_options(args: argparse.Namespace) -> dict:
    """Only the options the user gave, checked against the chosen backend's declaration."""
    return options_for(args.backend, given_options(args))


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="fleet.agent %(levelname)s: %(message)s",
    )
    # Keep a private handle on the real stdout for protocol lines; route everything else to stderr.
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_out = io.open(proto_fd, "w", encoding="utf-8", newline="\n")
    proto_in = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")

    try:
        options = backend_options(args)
        backend = open_backend(args.backend, **options)
        confine = Confinement.open(args.work_dir, getattr(backend, "state_dir", None))
    except (DeviceError, ConfineError, OSError) as exc:
        sys.stderr.write("fleet.agent: error: {}\n".format(" ".join(str(exc).split())))
        return 2
    uninstall = install_restore_handlers(backend)
    # SIGTERM mid-step: clocks back within ms, not after the step (clients/agent_link escalates).
    stop_watch = start_prompt_restore(backend)
    ctx = Context(backend, args.backend, line_writer(proto_out), options, confine)
    try:
        return serve(ctx, proto_in)
    except KeyboardInterrupt:
        return 130
    finally:
        restore_quietly(backend)
        uninstall()
        if stop_watch is not None:
            stop_watch()


if __name__ == "__main__":
    exit_with(main())
