"""The `powerfleet` command: a thin shell over plain functions in `fleet`.

Each subcommand lives in its own module ``fleet/cli/cmd_<name>.py`` exposing
``register(subparsers)``; the module adds its parser and sets ``func`` to a function taking the
parsed args and returning an exit code. Errors a user can act on (``InputError`` and friends)
become one line on stderr and a non-zero exit, never a traceback.
"""

import argparse
import importlib
import sys
from typing import List, Optional

from fleet.agent.devices.base import DeviceError
from fleet.errors import InfeasibleError, InputError

# Order is the order shown in --help.
COMMANDS = [
    "select",
    "compare",
    "inspect",
    "profile",
    "report",
    "data",
    "pretrain",
    "estimate",
    "whatif",
]


# Commands contributed by packages that sit above fleet (simulations, strategies): they are
# found through entry points so that fleet never imports them (dependencies point one way).
PLUGIN_GROUP = "powerfleet.commands"


def _plugins() -> list:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="powerfleet",
        description="Power-aware fine-tuning for fleets of edge GPUs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"fleet.cli.cmd_{name}")
        module.register(sub)
    for ep in _plugins():
        ep.load()(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except InfeasibleError as exc:
        print(f"powerfleet {args.command}: infeasible: {exc}", file=sys.stderr)
        return 2
    except (InputError, DeviceError, OSError) as exc:
        print(f"powerfleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"powerfleet {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
