"""Which Jetson this is: the device-tree model and serial, the L4T release, the fleet device type.

Why a module of its own: what a board *is* (its name in the fleet file, the provenance a
profile carries to the coordinator's profile store, what ties a clock state file to it) is
read from the device tree and ``/etc/nv_tegra_release``, independently of how its clocks are
driven or its power read.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import re
from typing import Optional

from .sysfs import read_text, under


def board_model(root: str) -> Optional[str]:
    """``proc/device-tree/model`` under ``root``, or None where unreadable."""
    try:
        return read_text(under(root, "proc/device-tree/model"))
    except OSError:
        return None


def board_serial(root: str) -> str:
    """``proc/device-tree/serial-number`` under ``root``, or '' where the board does not say."""
    try:
        return read_text(under(root, "proc/device-tree/serial-number"))
    except (OSError, UnicodeDecodeError):
        return ""


def l4t_release(root: str) -> str:
    """The L4T version from ``etc/nv_tegra_release`` under ``root`` ("32.7.1"), or ''.

    The file's first line reads ``# R32 (release), REVISION: 7.1, GCID: ...``.
    """
    try:
        with open(under(root, "etc/nv_tegra_release"), "r") as fh:
            line = fh.readline()
    except (OSError, UnicodeDecodeError):
        return ""
    major = re.search(r"R(\d+)", line)
    rev = re.search(r"REVISION:\s*([0-9.]+)", line)
    if not major:
        return ""
    return major.group(1) + ("." + rev.group(1).rstrip(".") if rev else "")


def device_type(node_name: str, of_node: str, board: str = "") -> str:
    """The fleet's device-type name for this GPU ('jetson-nano', ...), or '' if unknown.

    Profiles record it in their ``device`` column so that a profile measured on a board and a
    fleet entry of that type recognise each other (and a mismatch is caught).
    """
    text = " ".join((node_name, of_node, board)).lower()
    b = board.lower()
    if "ga10b" in text or "orin" in b:  # first: an "Orin Nano" is not a Nano
        return "jetson-orin"
    if "gp10b" in text or "tx2" in b:
        return "jetson-tx2" if "tx2" in b and "nx" not in b else "jetson-tx2nx"
    if "gm20b" in text or "57000000.gpu" in text or "nano" in b:
        return "jetson-nano"
    return ""
