"""`powerfleet simulate`: run a fleet round and show what every device chose and what it cost."""

from __future__ import annotations

import argparse
import sys

from fleet.cli import checks
from fleet.cli.common import emit_json, progress_bar
from fleet.cli.result import show
from fleet.common.errors import InputError
from fleet.common.signals import sigterm_as_interrupt
from fleet.config.schema import ray_address_ok
from simulations.flower_engine import FlowerRunError
from simulations.runner import DEFAULT_FLEET, ENGINES, simulate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate a fleet round (Flower simulation or direct)")
    p.add_argument("--fleet", help=f"fleet TOML (default: {DEFAULT_FLEET.name}, a mixed fleet)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="flower",
        help="flower: Flower's simulation engine; direct: same devices, no Ray",
    )
    p.add_argument(
        "--run-dir",
        type=checks.output_dir("run directory"),
        help="where to write report.json and devices.csv",
    )
    p.add_argument(
        "--ray-address",
        type=_ray_address,
        help="flower engine: run on this running Ray cluster (head host:port, or auto) "
        "instead of a private Ray; default: the fleet's [run] ray_address",
    )
    p.add_argument(
        "--device-cpus",
        type=_device_cpus,
        help="flower engine: Ray CPUs each simulated device holds (default 1)",
    )
    p.add_argument(
        "--device-gpus",
        type=_device_gpus,
        help="flower engine: the share of a GPU each simulated device holds (default 0)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def _device_cpus(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, 1024], got {text!r:.80}")
    return int(text)


def _device_gpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 64:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number in [0, 64], got {text!r:.80}")
    return value


def _ray_address(text: str) -> str:
    if not ray_address_ok(text):
        raise argparse.ArgumentTypeError(f"expected host:port or auto, got {text!r:.80}")
    return text


def run(args: argparse.Namespace) -> int:
    with sigterm_as_interrupt(), progress_bar("simulate") as bar:
        task = bar.add_task("starting", total=None)

        def progress(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=name)

        try:
            report = simulate(
                args.fleet,
                args.engine,
                args.run_dir,
                progress,
                ray_address=args.ray_address,
                device_cpus=args.device_cpus,
                device_gpus=args.device_gpus,
            )
        except FlowerRunError as exc:  # the run failed: one line, not a traceback
            print(f"powerfleet simulate: error: {exc}", file=sys.stderr)
            return 1
        except ValueError as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(str(exc)) from None
    if args.json:
        emit_json(report)
    else:
        show(report)
    return failed_exit(report)


def failed_exit(report: dict) -> int:
    """1 when any device ended ``error`` (the round ran; its row says why), else 0: a script
    must not read a round with a broken device as a clean one."""
    devices = report.get("devices") or []
    return 1 if any(isinstance(d, dict) and d.get("status") == "error" for d in devices) else 0
