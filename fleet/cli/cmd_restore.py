"""`powerfleet restore`: put back the GPU clocks a killed run left pinned, and nothing else.

Why a command of its own: after a SIGKILL or a power cut no exit path ran, so the board keeps
the locked clock until something reads the state file the run saved before its first write. Any
later powerfleet start does that too; this command is what a boot-time systemd unit (README,
hardware section) or an operator runs when no training is due. A state file written for another
board is refused with one line (exit 2), and so is a devfreq node it cannot write.
"""

from __future__ import annotations

import argparse
import sys

from fleet.agent.devices import DeviceError
from fleet.agent.devices.clockstate import state_path
from fleet.cli.common import emit_json
from fleet.common.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="restore GPU clocks saved by an interrupted run")
    p.add_argument("--backend", choices=("jetson",), default="jetson", help="device backend")
    p.add_argument("--sysfs-root", default="/", help="sysfs prefix (copied trees, dry runs)")
    p.add_argument("--gpu-node", help="devfreq entry of the GPU (default: discovered)")
    p.add_argument(
        "--state-dir",
        help="where original clocks were saved (default: /var/lib/powerfleet as root, else "
        "$XDG_STATE_HOME/powerfleet; <sysfs-root>/var/lib/powerfleet for another sysfs root)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleet.agent.devices.jetson import JetsonBackend

    try:
        # Constructing the backend restores from the state file it finds (and says so).
        backend = JetsonBackend(
            sysfs_root=args.sysfs_root, gpu_node=args.gpu_node, state_dir=args.state_dir
        )
        now = backend.bounds()
        clocks = {
            "min_freq_mhz": now["min_freq"] / 1e6,
            "max_freq_mhz": now["max_freq"] / 1e6,
            "governor": now["governor"],
        }
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    record = backend.recovered
    summary = {
        "restored": record is not None,
        "state_file": state_path(backend.state_dir),
        "devfreq": backend.node.name,
        "clocks": clocks,
    }
    if args.json:
        emit_json(summary)
    elif record is None:
        print(
            f"powerfleet restore: nothing to restore ({summary['state_file']} not found); "
            f"{backend.node.name} runs {clocks['min_freq_mhz']:g}-{clocks['max_freq_mhz']:g} MHz",
            file=sys.stderr,
        )
    else:
        print(
            f"restored {backend.node.name} to {clocks['min_freq_mhz']:g}-"
            f"{clocks['max_freq_mhz']:g} MHz, governor {clocks['governor']}"
        )
    return 0
