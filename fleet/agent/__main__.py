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

from .devices import BACKENDS, DeviceError, open_backend
from .devices.guard import install_restore_handlers, start_prompt_restore
from .protocol import Context, line_writer, restore_quietly, serve


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fleet.agent",
        description="powerfleet on-device agent: JSON-lines requests on stdin, answers on stdout.",
    )
    p.add_argument("--backend", choices=sorted(BACKENDS), default="cpu", help="device backend")
    p.add_argument("--sysfs-root", help="prefix for sysfs paths (jetson; tests and dry runs)")
    p.add_argument("--rail", help="power rail name (jetson), e.g. POM_5V_IN or VDD_IN")
    p.add_argument("--state-dir", help="where original clocks are saved (jetson)")
    p.add_argument("--profile-csv", help="recorded profile to replay (replay backend)")
    p.add_argument(
        "--log-level", default="WARNING", help="stderr log level (DEBUG, INFO, WARNING...)"
    )
    return p


def backend_options(args: argparse.Namespace) -> dict:
    """Only the options the user gave: each backend rejects options it does not take."""
    options = {}
    if args.sysfs_root is not None:
        options["sysfs_root"] = args.sysfs_root
    if args.rail is not None:
        options["rail"] = args.rail
    if args.state_dir is not None:
        options["state_dir"] = args.state_dir
    if args.profile_csv is not None:
        options["profile_csv"] = args.profile_csv
    return options


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

    options = backend_options(args)
    try:
        backend = open_backend(args.backend, **options)
    except (DeviceError, OSError) as exc:
        sys.stderr.write("fleet.agent: error: {}\n".format(" ".join(str(exc).split())))
        return 2
    uninstall = install_restore_handlers(backend)
    # SIGTERM mid-step: clocks back within ms, not after the step (clients/agent_link escalates).
    stop_watch = start_prompt_restore(backend)
    ctx = Context(backend, args.backend, line_writer(proto_out), options)
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
    sys.exit(main())
