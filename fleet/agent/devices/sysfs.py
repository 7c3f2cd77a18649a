"""Reading a Jetson's sysfs and device-tree attributes under a ``sysfs_root`` prefix.

Why a module of its own: GPU devfreq discovery, the power rails, the board's identity and the
clock lock all read the same kind of small text files, and all of them prefix every path with
``sysfs_root`` so tests and dry runs work on a copied tree. The prefix rule and the one-line
errors for an unreadable or non-numeric attribute live here once.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import os

from fleet.agent.devices.base import DeviceError


def under(root: str, rel: str) -> str:
    """``rel`` (absolute or not) inside ``root``."""
    return os.path.join(root, rel.lstrip("/"))


def read_text(path: str) -> str:
    """Read a sysfs/device-tree attribute; device-tree strings end in NUL, sysfs in newline."""
    with open(path, "r") as fh:
        return fh.read().strip("\x00\n\r\t ")


def read_number(path: str) -> float:
    """A numeric attribute; DeviceError (one line) when unreadable or not a number."""
    try:
        text = read_text(path)
    except OSError as exc:
        raise DeviceError("cannot read {}: {}".format(path, exc.strerror or exc)) from exc
    try:
        return float(text)
    except ValueError:
        raise DeviceError("{}: expected a number, got {!r}".format(path, text[:40])) from None
