"""Finding the Jetson GPU's devfreq node and reading its frequency table.

Why a module of its own: the node lives under a different name on each module and JetPack
(Nano ``57000000.gpu``, TX2/TX2 NX ``17000000.gp10b``, Orin ``17000000.ga10b`` on JetPack 5 and
``17000000.gpu`` on 6/7) and next to other engines' nodes (e.g. ``15340000.vic``), and Thor's GPU
is two nodes that move together (``gpu-gpc-0``, ``gpu-nvd-0``). Which node(s) are the GPU, and
which clocks they offer, is a question apart from how the clocks are locked (``clocklock.py``)
or how power is read (``power_rails.py``).

Order of trust: an explicit ``gpu_node`` (one entry, forced); else the board table
(``boards.py``: the board told by its device tree, the JetPack by ``etc/nv_tegra_release``)
names the nodes; else (an unknown board, or the table's names absent) the entries are searched
by name, as before the table existed.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import os
from typing import List, NamedTuple, Optional, Tuple  # noqa: F401 (type comments)

from fleet.agent.devices import boards
from fleet.agent.devices.base import DeviceError
from fleet.agent.devices.board_identity import board_row, jetpack
from fleet.agent.devices.sysfs import read_text, under

# Substrings of devfreq entry names (or of_node names) that denote the integrated GPU.
GPU_NODE_TOKENS = ("gpu", "gp10b", "ga10b", "gv11b", "gm20b", "gb10b", "gpu-gpc")

DevfreqNode = NamedTuple("DevfreqNode", [("path", str), ("name", str), ("of_node", str)])


def _is_gpu_name(name: str) -> bool:
    low = name.lower()
    return any(tok in low for tok in GPU_NODE_TOKENS)


def _node(base: str, entry: str) -> DevfreqNode:
    path = os.path.join(base, entry)
    try:
        of_name = read_text(os.path.join(path, "device", "of_node", "name"))
    except OSError:
        of_name = ""
    return DevfreqNode(path, entry, of_name)


def board_facts(sysfs_root: str = "/") -> Tuple[Optional[boards.Board], Optional[int]]:
    """The board-table row of this board (``board_identity.board_row``: device-tree
    ``compatible``, then ``model``) and its JetPack major; None for what the tree does not say."""
    return board_row(sysfs_root), jetpack(sysfs_root)


def table_nodes(
    sysfs_root: str, row: Optional[boards.Board], jetpack: Optional[int]
) -> List[DevfreqNode]:
    """The GPU nodes the board table names for ``row`` under ``jetpack`` that exist here,
    primary first; [] when the primary is absent. With the JetPack unknown, each release's
    set is tried in turn (an Orin has either ``17000000.ga10b`` or ``17000000.gpu``, never
    both to lock)."""
    if row is None:
        return []
    base = under(sysfs_root, "sys/class/devfreq")
    if jetpack in row.gpu_nodes:
        sets = [boards.gpu_nodes(row, jetpack)]
    else:
        sets = sorted(set(row.gpu_nodes.values()))
    for names in sets:
        if names and os.path.isdir(os.path.join(base, names[0])):
            return [_node(base, n) for n in names if os.path.isdir(os.path.join(base, n))]
    return []


def find_gpu_nodes(sysfs_root: str = "/", gpu_node: Optional[str] = None) -> List[DevfreqNode]:
    """Every devfreq node the GPU clock lock pins, primary first (its table is the one offered).

    ``gpu_node`` forces that one entry. Otherwise the board table's nodes (Thor: both), else
    the search of ``find_gpu_devfreq``; a searched node the table knows by name (``gpu-gpc-0``
    is Thor's) brings its companions along.
    """
    if gpu_node is not None:
        return [find_gpu_devfreq(sysfs_root, gpu_node)]
    row, jetpack = board_facts(sysfs_root)
    found = table_nodes(sysfs_root, row, jetpack)
    if found:
        return found
    primary = _search(sysfs_root, expected=_expected(row, jetpack))
    if row is None:
        row = boards.identify((), "", primary.name)
        found = table_nodes(sysfs_root, row, jetpack)
        if found and found[0].name == primary.name:
            return found
    return [primary]


def _expected(row: Optional[boards.Board], jetpack: Optional[int]) -> str:
    if row is None:
        return ""
    return "{} (JetPack {}) has {}; ".format(
        row.name, jetpack or "unknown", " + ".join(boards.gpu_nodes(row, jetpack))
    )


def find_gpu_devfreq(sysfs_root: str = "/", gpu_node: Optional[str] = None) -> DevfreqNode:
    """Locate the GPU's (primary) devfreq directory under ``<root>/sys/class/devfreq``.

    ``gpu_node`` forces a particular entry; otherwise the board table's primary node, else the
    search: the device-tree ``of_node/name`` first (it says "gpu" on Nano and TX2), then the
    entry name.
    """
    if gpu_node is None:
        return find_gpu_nodes(sysfs_root)[0]
    return _search(sysfs_root, gpu_node)


def _search(sysfs_root: str, gpu_node: Optional[str] = None, expected: str = "") -> DevfreqNode:
    base = under(sysfs_root, "sys/class/devfreq")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    candidates = []  # type: List[Tuple[int, DevfreqNode]]
    for entry in entries:
        node = _node(base, entry)
        of_name = node.of_node
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
            "no GPU devfreq node in {}: {}expected an entry like 57000000.gpu, 17000000.gp10b, "
            "17000000.ga10b or gpu-gpc-0, or one whose device/of_node/name is 'gpu' "
            "(found: {})".format(base, expected, ", ".join(entries) or "none")
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
