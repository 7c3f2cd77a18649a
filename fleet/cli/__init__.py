"""The `powerfleet` command: a thin shell over plain functions in `fleet`.

Each subcommand lives in its own module ``fleet/cli/cmd_<name>.py`` exposing
``register(subparsers)``; the module adds its parser and sets ``func`` to a function taking the
parsed args and returning an exit code. Errors a user can act on (``InputError`` and friends)
become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import List, Optional

from fleet.agent.devices.base import DeviceError
from fleet.common.errors import InfeasibleError, InputError

# The built-in commands: name -> one-line summary; the code is ``fleet/cli/cmd_<name>.py`` (a
# hyphen in the name is an underscore in the module's).
# Static on purpose: ``build_parser`` imports only the module of the command being run, so a
# board's ``powerfleet select`` does not pay for torch, rich progress bars or Flower. Order is the
# order shown in --help. A new command is one line here plus its module.
COMMANDS = [
    ("select", "pick the batch size and GPU frequency that reach the target soonest in a budget"),
    ("compare", "compare B1, B2, ours and the oracle across budgets"),
    ("inspect", "validate a profile CSV and summarise it"),
    ("profile", "measure time per batch and peak/mean power for each batch size and GPU frequency"),
    ("report", "turn a run directory into a Markdown report with plots"),
    ("data", "prepare the offline datasets (download once, cache) and list them"),
    ("pretrain", "pre-train a model on a public dataset"),
    ("estimate", "estimate samples-to-accuracy per batch size on a proxy"),
    ("noise-scale", "gradient noise scale of a dataset at given weights, and its law's shape"),
    ("train", "fine-tune on this board under a budget, with the closed loop (guard, re-selection)"),
    ("restore", "put back the GPU clocks a crashed run left locked"),
    ("doctor", "what this board is (GPU nodes, clocks, power rails) and whether profile/train run"),
    ("predict", "fill a sparse profile: predict time and power at the points not probed"),
    ("profiles", "list the coordinator's profile store"),
    ("efficiencies", "what the fleet learnt of its samples-to-target, and what it ships next"),
    ("status", "every device's progress, power vs budget, (b, f), ETA and status during a round"),
    ("whatif", "sweep the fleet budget: round time, energy and infeasible devices per step"),
    ("budget-feed", "play a power trace (solar panel, battery) into a live budget file"),
]


# Commands contributed by packages that sit above fleet (simulations, deployment): they are
# found through entry points so that fleet never imports them (dependencies point one way).
# Entry points are scanned only when the command asked for is not built in, or for --help.
PLUGIN_GROUP = "powerfleet.commands"


def _plugins() -> list:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)


def _builtin() -> dict[str, str]:
    """COMMANDS as {name: summary}; a bare name (no summary) is accepted too."""
    return dict(c if isinstance(c, tuple) else (c, "") for c in COMMANDS)


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the named command's module is imported.

    With no command (or an unknown one) every command is registered, so ``--help`` and
    argparse's "invalid choice" list them all; built-ins are listed from ``COMMANDS`` without
    importing their modules.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="powerfleet",
        description="Power-aware fine-tuning for fleets of edge GPUs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    builtin = _builtin()
    chosen = _command_in(argv)
    if chosen in builtin:
        importlib.import_module(f"fleet.cli.cmd_{chosen.replace('-', '_')}").register(sub)
        return parser
    plugins = _plugins()
    for ep in plugins:
        if ep.name == chosen:
            ep.load()(sub)
            return parser
    for name, summary in builtin.items():
        sub.add_parser(name, help=summary)
    for ep in plugins:
        if ep.name not in builtin:
            ep.load()(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
