"""Which Jetson this is: the device tree's compatible, model and serial, the L4T release and
JetPack generation, the board table's row and so the fleet device type.

Why a module of its own: what a board *is* (its name in the fleet file, the provenance a
profile carries to the coordinator's profile store, what ties a clock state file to it) is
read from the device tree and ``/etc/nv_tegra_release``, independently of how its clocks are
driven or its power read. The answer is a row of ``boards.ROWS``: the device tree's
``compatible`` names the module part number (the only thing that tells a TX2 from a TX2 NX, or
an Orin NX from an Orin Nano), the model string is the fallback, the GPU node the last resort.

A *virtual* board (``simulations/virtual_jetson.py``: a board's sysfs tree and a kernel stand-in,
for rehearsals and tests) says so itself: its tree builder writes ``VIRTUAL_MARKER``
(``.virtual_jetson/virtual-board.json``) at the tree's root, beside the kernel stand-in's control
files. No real board has it: its sysfs root is ``/``, and nothing of NVIDIA's or ours writes
``/.virtual_jetson``. A board that has it measures host times, not the board's: its profiles and
runs say ``source=virtual`` and which host (``measurement_origin``), whatever flags were given.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import json
import re
import socket
from typing import Any, Dict, Optional, Tuple

from fleet.agent.devices.boards import Board, identify, jetpack_of
from fleet.agent.devices.machine import cpu_model
from fleet.agent.devices.sysfs import read_text, under

# The fleet's family type for any Orin module, kept for fleet files and profiles written before
# the table named each module; a board the table cannot tell apart still reports it.
LEGACY_ORIN = "jetson-orin"
_ORIN_GPU = ("ga10b", "17000000.gpu")
_MAX_DT_BYTES = 4096  # a compatible property is a few hundred bytes
# Written at a virtual board's root by its builder (module docstring); never on a real board.
VIRTUAL_MARKER = ".virtual_jetson/virtual-board.json"


def virtual_board(root: str) -> Optional[Dict[str, Any]]:
    """The marker of a virtual board under ``root`` (its ``board`` key, ``jetpack``, ``built_by``),
    or None: a real board (or a copied real tree). An unreadable or damaged marker still marks
    the tree virtual (``{}``): only a virtual board's builder writes that path."""
    path = under(root, VIRTUAL_MARKER)
    try:
        with open(path, "r") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def host_label() -> str:
    """This machine, as a virtual board's measurements name it: hostname and CPU model."""
    cpu = cpu_model("/")  # the live machine's, never the virtual tree's
    name = socket.gethostname()
    return "{} ({})".format(name, cpu) if cpu else name


def measurement_origin(root: str) -> Dict[str, Any]:
    """Where measurements on the board under ``root`` come from: ``{"source": "measured"}`` on a
    real board; ``{"source": "virtual", "host": ..., "virtual_board": ...}`` on a virtual one
    (times are the host's, not the board's; power is the stand-in's model)."""
    marker = virtual_board(root)
    if marker is None:
        return {"source": "measured"}
    return {
        "source": "virtual",
        "host": host_label(),
        "virtual_board": str(marker.get("board") or "unknown"),
    }


def board_model(root: str) -> Optional[str]:
    """``proc/device-tree/model`` under ``root``, or None where unreadable."""
    try:
        return read_text(under(root, "proc/device-tree/model"))
    except (OSError, UnicodeDecodeError):
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


def board_compatible(root: str) -> Tuple[str, ...]:
    """The entries of ``proc/device-tree/compatible`` under ``root`` (NUL-separated in the
    file, most specific first), or () where the board has no readable device tree."""
    try:
        with open(under(root, "proc/device-tree/compatible"), "rb") as fh:
            raw = fh.read(_MAX_DT_BYTES)
    except OSError:
        return ()
    parts = (p.decode("ascii", "replace").strip() for p in raw.split(b"\x00"))
    return tuple(p for p in parts if p)


def jetpack(root: str) -> Optional[int]:
    """The JetPack major release under ``root`` (4, 5, 6, 7), from ``etc/nv_tegra_release``;
    None where the file is missing or names an L4T release the table does not know."""
    release = l4t_release(root)
    return jetpack_of(release) if release else None


def board_row(root: str, gpu_node: str = "") -> Optional[Board]:
    """The board table's row for the board under ``root`` (compatible first, then model, then
    the GPU devfreq node name ``gpu_node``), or None: not a board the table knows."""
    return identify(board_compatible(root), board_model(root) or "", gpu_node)


def device_type(node_name: str, of_node: str, board: str = "", root: str = "") -> str:
    """The fleet's device-type name for this board ('jetson-nano', 'jetson-agx-orin', ...), or
    '' if unknown.

    ``board`` is the device-tree model; with ``root`` (the sysfs root) the device tree's
    compatible is read too, and decides (the model alone cannot tell every row apart). An Orin
    GPU (``ga10b``, or ``17000000.gpu`` on JetPack 6/7) on a board the table cannot place is the
    legacy family type ``jetson-orin``, which fleet files still accept. Profiles record the
    answer in their ``device`` column so that a profile measured on a board and a fleet entry of
    that type recognise each other (and a mismatch is caught).
    """
    compatible = board_compatible(root) if root else ()
    if root and not board:
        board = board_model(root) or ""
    row = identify(compatible, board, node_name)
    if row is not None:
        return row.key
    text = " ".join((node_name, of_node)).lower()
    if any(tag in text for tag in _ORIN_GPU) or "orin" in board.lower():
        return LEGACY_ORIN
    return ""


def run_origin(backend_name: str, desc: Dict[str, Any]) -> Dict[str, Any]:
    """Where a run's times and power come from, from its backend's ``describe()``: ``source``
    measured (this machine), virtual (a virtual board: the host's times, with ``host`` and
    ``virtual_board``) or replayed (a recorded profile answers, nothing is measured)."""
    if backend_name == "replay":
        return {"source": "replayed"}
    out = {"source": str(desc.get("source") or "measured")}  # type: Dict[str, Any]
    if out["source"] == "virtual":
        out["host"] = desc.get("host")
        out["virtual_board"] = desc.get("virtual_board")
    return out
