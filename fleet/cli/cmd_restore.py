"""`powerfleet restore`: put back the GPU clocks a killed run left pinned, and nothing else.

Why a command of its own: after a SIGKILL or a power cut no exit path ran, so the board keeps
the locked clock until something reads the state file the run saved before its first write. Any
later powerfleet start does that too; this command is what a boot-time systemd unit (README,
hardware section) or an operator runs when no training is due. A state file written for another
board is refused with one line (exit 2), and so is a devfreq node it cannot write.

At boot the GPU's devfreq node may not exist yet (JetPack 7 can create ``17000000.gpu`` late),
so ``--wait-s S`` polls, at most S seconds, until every node the state file names is there,
then restores; at the limit it exits 2 with one line naming the node and the wait. With no
state file there is nothing to wait for. The default (0) checks once, as before.

With no state file and no GPU devfreq node (a PC, a VM: not a Jetson) there is nothing to
restore: one line saying so, exit 0, as the README promises.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from fleet.agent.devices import DeviceError
from fleet.agent.devices.clocklock import DevfreqClocks
from fleet.agent.devices.clockstate import default_state_dir, load, missing_node_files, state_path
from fleet.agent.devices.devfreq import find_gpu_nodes
from fleet.cli.common import emit_json
from fleet.common.errors import InputError

POLL_S = 0.1  # how often a late node is looked for


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="restore GPU clocks saved by an interrupted run")
    p.add_argument(
        "--backend",
        choices=("jetson", "nvml"),
        default="jetson",
        help="device backend (nvml: the power limit and locked clocks of every GPU saved)",
    )
    p.add_argument("--sysfs-root", default="/", help="sysfs prefix (copied trees, dry runs)")
    p.add_argument("--gpu-node", help="devfreq entry of the GPU (default: discovered)")
    p.add_argument(
        "--state-dir",
        help="where original clocks were saved (default: /var/lib/powerfleet as root, else "
        "$XDG_STATE_HOME/powerfleet; <sysfs-root>/var/lib/powerfleet for another sysfs root)",
    )
    p.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the GPU devfreq node(s) the state file names to appear "
        "(boot units: a node may be created late); default 0: look once",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def wait_for_nodes(args: argparse.Namespace) -> float | None:
    """Seconds spent waiting until the state file's nodes all exist under ``--sysfs-root``
    (0.0 when they already did); None when there is no state file. InputError at the limit."""
    state_dir = args.state_dir or default_state_dir(args.sysfs_root)
    try:
        record = load(state_dir)
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    if record is None:
        return None
    missing = missing_node_files(args.sysfs_root, record)
    if not missing or args.wait_s <= 0:
        return 0.0
    path = state_path(state_dir)
    if not args.json:
        print(
            f"powerfleet restore: waiting up to {args.wait_s:g} s for GPU devfreq node "
            f"{', '.join(missing)} (named in {path})",
            flush=True,
        )
    start = time.monotonic()
    deadline = start + args.wait_s
    while missing:
        left = deadline - time.monotonic()
        if left <= 0:
            base = os.path.join(args.sysfs_root, "sys/class/devfreq")
            raise InputError(
                f"GPU devfreq node {', '.join(missing)} (named in {path}) did not appear under "
                f"{base} within --wait-s {args.wait_s:g} s; its saved clocks are not restored"
            )
        time.sleep(min(POLL_S, left))
        missing = missing_node_files(args.sysfs_root, record)
    return time.monotonic() - start


def run(args: argparse.Namespace) -> int:
    if not args.wait_s >= 0:  # also refuses nan
        raise InputError(f"--wait-s: expected seconds >= 0, got {args.wait_s:g}")
    if args.backend == "nvml":
        return _restore_nvml(args)
    if not os.path.isdir(args.sysfs_root):  # a typo, not a machine with nothing to restore
        raise InputError(f"--sysfs-root {args.sysfs_root}: not a directory (expected a sysfs root)")
    waited_s = wait_for_nodes(args)
    if waited_s is None:
        # Nothing saved: a machine with no GPU devfreq node (a PC, a board whose node comes
        # late at boot) has nothing to put back either, which is no failure (exit 0).
        try:
            find_gpu_nodes(args.sysfs_root, args.gpu_node)
        except DeviceError:
            return _nothing_saved_no_node(args)
    try:
        # Constructing it restores from the state file it finds (and says so); the clocks
        # alone: a missing or broken power sensor must not keep a board pinned.
        backend = DevfreqClocks(
            sysfs_root=args.sysfs_root, gpu_node=args.gpu_node, state_dir=args.state_dir
        )
        now = backend.all_bounds()
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    per_node = {
        name: {
            "min_freq_mhz": b["min_freq"] / 1e6,
            "max_freq_mhz": b["max_freq"] / 1e6,
            "governor": b["governor"],
        }
        for name, b in now.items()
    }
    clocks = per_node[backend.node.name]
    record = backend.recovered
    clamps = {
        str(e["devfreq"]): int(e["clamp_hz"])
        for e in (record or {}).get("nodes") or ()
        if e.get("clamp_hz")
    }
    summary = {
        "restored": record is not None,
        "state_file": state_path(backend.state_dir),
        "devfreq": backend.node.name,
        "clocks": clocks,
        "nodes": per_node,
        "waited_s": round(waited_s or 0.0, 3),
    }
    if backend.node.name in clamps:
        summary["clamp_hz"] = clamps[backend.node.name]
    if clamps:
        summary["clamps_hz"] = clamps
    if args.json:
        emit_json(summary)
        return 0
    names = " + ".join(per_node)
    if record is None:
        print(
            f"powerfleet restore: nothing to restore ({summary['state_file']} not found); "
            f"{names} runs {clocks['min_freq_mhz']:g}-{clocks['max_freq_mhz']:g} MHz",
            file=sys.stderr,
        )
        return 0
    for name, c in per_node.items():
        print(
            f"restored {name} to {c['min_freq_mhz']:g}-{c['max_freq_mhz']:g} MHz, "
            f"governor {c['governor']}"
        )
    for name, hz in clamps.items():
        print(
            f"note: the kernel clamped {name} at {hz / 1e6:g} MHz when the clocks were saved "
            "(thermal or power-mode limit); it was not restored as a user limit"
        )
    return 0


def _nothing_saved_no_node(args: argparse.Namespace) -> int:
    state_file = state_path(args.state_dir or default_state_dir(args.sysfs_root))
    if args.json:
        emit_json({"restored": False, "state_file": state_file, "devfreq": None, "waited_s": 0.0})
    else:
        where = os.path.join(args.sysfs_root, "sys/class/devfreq")
        node = f"GPU devfreq node {args.gpu_node}" if args.gpu_node else "GPU devfreq node"
        print(
            f"powerfleet restore: nothing to restore: no saved clocks ({state_file} not found) "
            f"and no {node} under {where} (not a Jetson, or its GPU node is not up yet)",
            file=sys.stderr,
        )
    return 0


def _restore_nvml(args: argparse.Namespace) -> int:
    """Every GPU whose power limit or locked clocks a killed run left in the state directory,
    put back and its file removed; none saved: one line, exit 0."""
    from fleet.agent.devices.nvml import import_pynvml
    from fleet.agent.devices.nvml_restore import restore_saved, said_nvml

    state_dir = args.state_dir or default_state_dir(args.sysfs_root)
    try:
        done = restore_saved(state_dir, import_pynvml)
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    gpus = [
        {
            "uuid": r["uuid"],
            "index": r.get("index"),
            "power_limit_w": None if r.get("power_limit_mw") is None else r["power_limit_mw"] / 1e3,
            "clocks_unlocked": bool(r.get("clocks_locked")),
            "state_file": r["path"],
        }
        for r in done
    ]
    if args.json:
        emit_json({"restored": bool(done), "state_dir": state_dir, "gpus": gpus})
        return 0
    if not done:
        print(
            f"powerfleet restore: nothing to restore (no saved GPU settings in {state_dir})",
            file=sys.stderr,
        )
    for r in done:
        print(f"restored GPU {r['uuid']} (index {r.get('index')}): {said_nvml(r)}")
    return 0
