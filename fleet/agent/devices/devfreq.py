"""Finding the Jetson GPU's devfreq node and reading its frequency table.

Why a module of its own: the node lives under a different name on each module (Nano
``57000000.gpu``, TX2/TX2 NX ``17000000.gp10b``, Orin ``17000000.ga10b``) and next to other
engines' nodes (e.g. ``15340000.vic``), so it is discovered rather than hard-coded; which node
is the GPU, and which clocks it offers, is a question apart from how the clocks are locked
(``jetson.py``) or how power is read (``power_rails.py``).

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import os
from typing import List, NamedTuple, Optional, Tuple  # noqa: F401 (type comments)

from .base import DeviceError
from .sysfs import read_text, under

# Substrings of devfreq entry names (or of_node names) that denote the integrated GPU.
GPU_NODE_TOKENS = ("gpu", "gp10b", "ga10b", "gv11b", "gm20b")

DevfreqNode = NamedTuple("DevfreqNode", [("path", str), ("name", str), ("of_node", str)])


def _is_gpu_name(name: str) -> bool:
    low = name.lower()
    return any(tok in low for tok in GPU_NODE_TOKENS)


def find_gpu_devfreq(sysfs_root: str = "/", gpu_node: Optional[str] = None) -> DevfreqNode:
    """Locate the GPU's devfreq directory under ``<root>/sys/class/devfreq``.

    The device-tree ``of_node/name`` is checked first (it says "gpu" on Nano and TX2), then the
    entry name. ``gpu_node`` forces a particular entry.
    """
    base = under(sysfs_root, "sys/class/devfreq")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    candidates = []  # type: List[Tuple[int, DevfreqNode]]
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            of_name = read_text(os.path.join(path, "device", "of_node", "name"))
        except OSError:
            of_name = ""
        node = DevfreqNode(path, entry, of_name)
        if gpu_node is not None:
            if entry == gpu_node:
                return node
            continue
        if of_name and _is_gpu_name(of_name):
            candidates.append((0, node))
        elif _is_gpu_name(entry):
            candidates.append((1, node))
    if gpu_node is not None:
        raise DeviceError(
            "devfreq node {!r} not found in {}; entries there: {}".format(
                gpu_node, base, ", ".join(entries) or "none"
            )
        )
    if not candidates:
        raise DeviceError(
            "no GPU devfreq node in {}: expected an entry like 57000000.gpu, 17000000.gp10b or "
            "17000000.ga10b, or one whose device/of_node/name is 'gpu' (found: {})".format(
                base, ", ".join(entries) or "none"
            )
        )
    candidates.sort(key=lambda c: c[0])
    return candidates[0][1]


def available_hz(node: DevfreqNode) -> List[int]:
    """The node's ``available_frequencies`` in Hz, ascending and without repeats."""
    path = os.path.join(node.path, "available_frequencies")
    try:
        text = read_text(path)
    except OSError as exc:
        raise DeviceError("cannot read {}: {}".format(path, exc.strerror or exc)) from exc
    try:
        values = sorted(set(int(float(tok)) for tok in text.split()))
    except ValueError:
        raise DeviceError(
            "{}: expected space-separated Hz values, got {!r}".format(path, text[:60])
        ) from None
    if not values:
        raise DeviceError("{}: empty, expected space-separated Hz values".format(path))
    return values
