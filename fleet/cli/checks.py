"""Paths (and ports) checked when the command line is read, before any sweep, training or round
starts.

Why at parse time: a profile sweep that ends in ``[Errno 21] Is a directory`` has wasted its
minutes; the same check made as argparse reads ``--out`` costs nothing and fails in one line
naming the option (``powerfleet profile: error: argument --out: /tmp: is a directory; ...``).
Each function returns an argparse ``type=``: it gets the string, checks what can be known
before the work (the path's kind, its nearest existing folder), and returns the string
unchanged, so the command's body reads the same value it always did.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable


def _a(what: str) -> str:
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _writable_home(path: str) -> None:
    """The nearest folder that exists above ``path`` must be a folder we can write into
    (commands create missing folders below it)."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{path}: cannot write into {parent} (permission)")


def output_file(what: str) -> Callable[[str], str]:
    """A file the command writes: a path, not a directory nor a device, FIFO or socket (the
    write replaces the file whole: ``/dev/null`` would become a regular file), in a folder it
    can write. A symbolic link is written through (``atomic_write``)."""

    def check(path: str) -> str:
        if not path.strip():
            raise argparse.ArgumentTypeError(f"expected the path of the {what} file to write")
        if os.path.isdir(path):
            raise argparse.ArgumentTypeError(
                f"{path}: is a directory; expected the {what} file to write"
            )
        if os.path.exists(path) and not os.path.isfile(path):
            raise argparse.ArgumentTypeError(
                f"{path}: not a regular file (a device, FIFO or socket); expected the {what} "
                "file to write"
            )
        _writable_home(path)
        return path

    return check


def output_dir(what: str) -> Callable[[str], str]:
    """A folder the command writes into (created if missing): not a file."""

    def check(path: str) -> str:
        if os.path.exists(path) and not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: not a directory; expected {_a(what)}")
        _writable_home(os.path.join(path, "x"))
        return path

    return check


def input_file(what: str) -> Callable[[str], str]:
    """A file the command reads: there, and a file."""

    def check(path: str) -> str:
        if os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{path}: is a directory, expected {_a(what)} file")
        if not os.path.exists(path):
            raise argparse.ArgumentTypeError(f"{path}: {what} not found")
        return path

    return check


def run_dir(path: str) -> str:
    """A run directory to read (report.json, state.json): there, and a directory."""
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{path}: not found (expected a run directory)")
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path}: not a directory (expected a run directory)")
    return path


def run_dir_to_watch(path: str) -> str:
    """A run directory ``status`` reads: a file is refused here; a folder not there yet is the
    command's to say (a round may not have started)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path}: not a directory (expected a run directory)")
    return path


def tcp_port(free_ok: bool = False) -> Callable[[str], int]:
    """A TCP port (1-65535; 0 too where ``free_ok``: the system picks a free one). Why here: a
    port out of range was said by the SuperLink's own parser, in its log, after the
    coordinator had started it."""
    lo = 0 if free_ok else 1

    def check(text: str) -> int:
        try:
            port = int(text)
        except ValueError:
            port = -1
        if not lo <= port <= 65535:
            what = "0 (a free port) or " if free_ok else ""
            raise argparse.ArgumentTypeError(f"expected {what}a port in 1-65535, got {text!r}")
        return port

    return check


def at_least(low: int) -> Callable[[str], int]:
    """An integer count of at least ``low`` (``--workers 0`` used to run with none)."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r:.80}")
        return value

    return check


def ray_address(text: str) -> str:
    """A Ray cluster as ``ray.init`` takes it: ``auto``, ``host:port`` or ``ray://host:port``
    (checked here: Ray's own refusal was a traceback, and only once the work began)."""
    from fleet.config.schema import ray_address_ok

    bare = text[len("ray://") :] if text.startswith("ray://") else text
    if not ray_address_ok(bare) or (bare == "auto" and bare != text):
        raise argparse.ArgumentTypeError(
            f"expected auto, host:port or ray://host:port, got {text!r:.80}"
        )
    return text


def positive_number(text: str) -> float:
    """A finite number > 0 (a learning rate, seconds): said at parse time under the flag's own
    name, not as the field a function deep in the run calls it."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r:.80}")
    return value


def number_list(integer: bool) -> Callable[[str], list]:
    """A comma-separated list of distinct finite numbers > 0 (integers where ``integer``),
    sorted: batch sizes, clocks. One parser for every command's lists, so a value named twice
    is refused alike everywhere (it was deduplicated by some commands and refused by another)
    and ``4,8,x`` says which item is wrong."""

    def check(text: str) -> list:
        items = [x.strip() for x in str(text).split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r:.80}")
        kind = "integers" if integer else "numbers"
        out: list = []
        for item in items:
            try:
                value = float(item)
            except ValueError:
                value = float("nan")
            if not (0 < value < float("inf")) or (integer and value != int(value)):
                raise argparse.ArgumentTypeError(f"expected {kind} > 0, got {item!r:.40}")
            number = int(value) if integer else value
            if number in out:
                raise argparse.ArgumentTypeError(f"{item} is named twice in {text!r:.80}")
            out.append(number)
        return sorted(out)

    return check
