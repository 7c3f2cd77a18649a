"""What a board is and whether powerfleet can work on it: the survey behind ``powerfleet doctor``.

Why a module of its own: when a board misbehaves the first question is what powerfleet found
there (which board and JetPack, which GPU node and clock table, which rails make the total and
what they read now, how often the sensor refreshes, whether the clocks are writable, whether a
crashed run left clocks saved) and the answer must be one object a user can paste into a bug
report. The survey only reads: it builds no backend (constructing one restores a saved state
file, which is an action), writes no clock, and every part that cannot be read is reported as a
problem in that part instead of ending the survey.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import os
from typing import Any, Dict, List, Optional

from fleet.agent.devices import boards, clockstate
from fleet.agent.devices.base import DeviceError
from fleet.agent.devices.board_identity import (
    board_compatible,
    board_model,
    board_row,
    jetpack,
    l4t_release,
    measurement_origin,
)
from fleet.agent.devices.board_power import open_power
from fleet.agent.devices.devfreq import DevfreqNode, available_hz, find_gpu_nodes
from fleet.agent.devices.machine import can_run, machine
from fleet.agent.devices.power_rails import read_rail_w
from fleet.agent.devices.sysfs import read_number, read_text, under
from fleet.method import liveness


def survey(
    sysfs_root: str = "/", state_dir: Optional[str] = None, rail: Optional[str] = None
) -> Dict[str, Any]:
    """The board under ``sysfs_root`` as powerfleet sees it (module docstring): ``board``,
    ``gpu``, ``power``, ``clock_state`` and ``ready`` (whether ``profile`` and ``train`` can run,
    with the reasons they cannot)."""
    gp = _gpu(sysfs_root)
    primary = gp["nodes"][0]["name"] if gp.get("nodes") else ""
    row = board_row(sysfs_root, primary)
    jp = jetpack(sysfs_root)
    board = {
        "model": board_model(sysfs_root) or "",
        "compatible": list(board_compatible(sysfs_root)),
        "type": row.key if row else "",
        "name": row.name if row else "",
        "l4t": l4t_release(sysfs_root),
        "jetpack": jp,
        "kernel_rules": boards.kernel_rules(jp),
    }  # type: Dict[str, Any]
    # "measured", or "virtual" with the host: a virtual board's tree says so itself
    board.update(measurement_origin(sysfs_root))
    if row is not None and gp.get("nodes"):
        gp["expected_nodes"] = list(boards.gpu_nodes(row, jp))
        gp["table_vs_board"] = _table_check(row, gp["nodes"][0]["available_mhz"])
    power = _power(sysfs_root, rail, primary)
    state = _state(sysfs_root, state_dir)
    ready = _ready(gp, power, state)
    host = machine(sysfs_root, is_jetson=bool(row is not None or gp.get("nodes")))
    return {
        "sysfs_root": sysfs_root,
        "board": board,
        "gpu": gp,
        "power": power,
        "clock_state": state,
        "ready": ready,
        "machine": host,
        "can_run": can_run(host, bool(ready["profile"])),
    }


def _gpu(root: str) -> Dict[str, Any]:
    try:
        nodes = find_gpu_nodes(root)
    except DeviceError as exc:
        return {"error": str(exc), "nodes": []}
    out = []  # type: List[Dict[str, Any]]
    for node in nodes:
        out.append(_node(node))
    return {"nodes": out}


def _node(node: DevfreqNode) -> Dict[str, Any]:
    info = {"name": node.name, "path": node.path}  # type: Dict[str, Any]
    try:
        table = available_hz(node)
        info["available_mhz"] = [hz / 1e6 for hz in table]
    except DeviceError as exc:
        info["error"] = str(exc)
        table = []
    for attr in ("min_freq", "max_freq", "cur_freq"):
        try:
            info[attr.replace("freq", "mhz")] = read_number(os.path.join(node.path, attr)) / 1e6
        except (OSError, ValueError, DeviceError):
            info[attr.replace("freq", "mhz")] = None
    try:
        info["governor"] = read_text(os.path.join(node.path, "governor"))
    except OSError:
        info["governor"] = None
    writable = [
        a for a in ("min_freq", "max_freq") if os.access(os.path.join(node.path, a), os.W_OK)
    ]
    info["writable"] = len(writable) == 2
    # a bound file that is not there is no permission matter: said as missing
    info["missing"] = [
        a for a in ("min_freq", "max_freq") if not os.path.exists(os.path.join(node.path, a))
    ]
    top = table[-1] / 1e6 if table else None
    if top is not None and info["max_mhz"] is not None and info["max_mhz"] < top:
        # a power-mode cap, a thermal clamp (JetPack 5+ reads the effective bound) or a user
        # limit: the first lock tells them apart and never saves a clamp as the user's limit
        info["below_table_top"] = True
    return info


def _table_check(row: boards.Board, found_mhz: List[float]) -> str:
    """How the node's table compares with the board table's (a profile names clocks)."""
    if not row.clock_hz:
        return "the board table has no clock table for {}".format(row.name)
    want = set(int(round(hz / 1e3)) for hz in row.clock_hz)
    have = set(int(round(mhz * 1e3)) for mhz in found_mhz)
    if want == have:
        return "same"
    parts = []
    if have - want:
        parts.append("extra " + _khz_list(have - want))
    if want - have:
        parts.append("missing " + _khz_list(want - have))
    verified = "" if row.clock_verified else " (the table's is not verified on a board)"
    return "differs: {}{}".format("; ".join(parts), verified)


def _khz_list(values: Any) -> str:
    return ", ".join("{:g}".format(v / 1e3) for v in sorted(values)) + " MHz"


def _power(root: str, rail: Optional[str], gpu_node: str) -> Dict[str, Any]:
    try:
        power = open_power(root, rail, gpu_node)
    except DeviceError as exc:
        return {"error": str(exc)}
    info = power.describe()
    if not power.rails:
        info["reason"] = power.unavailable
        return info
    rails = []  # type: List[Dict[str, Any]]
    for r in power.found:
        entry = {"name": r.name, "in_total": r in power.rails}  # type: Dict[str, Any]
        try:
            entry["watts"] = read_rail_w(r)
        except (OSError, ValueError, DeviceError) as exc:
            entry["error"] = str(exc)
        rails.append(entry)
    info["rails"] = rails
    try:
        info["total_w"] = power.read_w()
    except (OSError, ValueError, DeviceError) as exc:
        info["total_w"] = None
        info["error"] = "cannot read the total: {}".format(exc)
    return info


def _state(root: str, state_dir: Optional[str]) -> Dict[str, Any]:
    directory = state_dir or clockstate.default_state_dir(root)
    info = {"dir": directory, "file": clockstate.state_path(directory)}  # type: Dict[str, Any]
    try:
        record = clockstate.load(directory)
    except DeviceError as exc:
        info["error"] = str(exc)
        return info
    if record is None:
        info["saved"] = False
        return info
    info["saved"] = True
    info["nodes"] = record.get("nodes")
    info["writer"] = liveness.holder(record)  # alive: clocks in use; gone: restore them
    info["pid"] = record.get("pid")
    return info


def _ready(gp: Dict[str, Any], power: Dict[str, Any], state: Dict[str, Any]) -> Dict[str, Any]:
    clocks = []  # type: List[str]
    if not gp.get("nodes"):
        clocks.append(gp.get("error") or "no GPU devfreq node")
    elif any(n.get("missing") for n in gp["nodes"]):
        clocks.append(
            "; ".join(
                "{} has no {}".format(n["name"], "/".join(n["missing"]))
                for n in gp["nodes"]
                if n.get("missing")
            )
        )
    elif not all(n.get("writable") for n in gp["nodes"]):
        clocks.append(
            "cannot write min_freq/max_freq of {}: run as root or grant write access".format(
                ", ".join(n["name"] for n in gp["nodes"] if not n.get("writable"))
            )
        )
    if state.get("writer") == "alive":
        clocks.append("another running process holds the clocks (pid {})".format(state["pid"]))
    if state.get("error"):
        clocks.append(state["error"])
    measured = []  # type: List[str]
    if power.get("error"):
        measured.append(power["error"])
    elif power.get("reason"):
        measured.append(power["reason"])
    train = list(clocks)
    notes = []  # type: List[str]
    if measured and not clocks:
        notes.append("train only from a recorded profile of this board type (budget unguarded)")
    if state.get("writer") == "gone":
        notes.append(
            "a crashed run left clocks saved: the next start (or `restore`) puts them back"
        )
    return {
        "profile": not (clocks or measured),
        "train": not train,
        "why_not_profile": clocks + measured,
        "why_not_train": train,
        "notes": notes,
    }


def exists(root: str) -> bool:
    """Whether ``root`` looks like a sysfs root to survey (its ``sys`` directory exists)."""
    return os.path.isdir(under(root, "sys"))
