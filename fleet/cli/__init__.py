"""The `powerfleet` command: a thin shell over plain functions in `fleet`.

Each subcommand lives in its own module ``fleet/cli/cmd_<name>.py`` exposing
``register(subparsers)``; the module adds its parser and sets ``func`` to a function taking the
parsed args and returning an exit code. Errors a user can act on (``InputError`` and friends)
become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import List, Optional

from fleet.agent.devices.base import DeviceError
from fleet.cli.names import Parser, Subcommands
from fleet.common.errors import InfeasibleError, InputError

# The built-in commands: name -> one-line summary; the code is ``fleet/cli/cmd_<name>.py`` (a
# hyphen in the name is an underscore in the module's).
# Static on purpose: ``build_parser`` imports only the module of the command being run, so a
# board's ``powerfleet select`` does not pay for torch, rich progress bars or Flower. A new
# command is one line here plus its module, and its name in one of GROUPS.
COMMANDS = [
    ("doctor", "what this machine is and what can run on it (profile, train, or a rehearsal)"),
    ("profile", "measure time per batch and peak/mean power for each batch size and GPU clock"),
    ("train", "fine-tune on this board under a budget, with the closed loop (guard, re-selection)"),
    ("restore", "put back the GPU clocks a crashed run left locked"),
    ("budget-feed", "play a power trace (solar panel, battery) into a live budget file"),
    ("status", "every device's progress, power vs budget, (b, f), ETA and status during a round"),
    ("report", "turn a run directory into a Markdown report with plots"),
    ("whatif", "sweep the fleet budget: round time, energy and infeasible devices per step"),
    ("profiles", "list the coordinator's profile store"),
    ("efficiencies", "what the fleet learnt of its samples-to-target, and what it ships next"),
    ("select", "pick the batch size and GPU clock that reach the target soonest in a budget"),
    ("compare", "compare B1, B2, ours and the oracle across budgets"),
    ("inspect", "validate a profile CSV and summarise it"),
    ("predict", "fill a sparse profile: predict time and power at the points not probed"),
    ("estimate", "estimate samples-to-accuracy per batch size on a proxy dataset"),
    ("noise-scale", "gradient noise scale of a dataset at given weights, and its law's shape"),
    ("pretrain", "pre-train a model on a public dataset"),
    ("data", "prepare the offline datasets (download once, cache) and list them"),
]

# --help lists the commands by who runs them, in this order (plug-ins included by name).
GROUPS = [
    ("on a board", ["doctor", "profile", "train", "restore", "budget-feed"]),
    (
        "a fleet",
        ["simulate", "coordinator", "device", "status", "report", "whatif", "profiles"]
        + ["efficiencies"],
    ),
    (
        "analysis and data",
        ["select", "compare", "inspect", "predict", "estimate", "noise-scale", "pretrain"]
        + ["experiment", "data"],
    ),
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("powerfleet")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def _grouped_help(sub: Subcommands) -> str:
    """The commands by group, one line each: ``powerfleet --help`` fits one screen."""
    summaries = dict(sub.summaries)
    width = max(len(n) for n in summaries) + 2
    lines: list[str] = []
    listed: set[str] = set()
    for title, names in GROUPS:
        lines.append(f"{title}:")
        for name in names:
            if name in summaries:
                lines.append(f"  {name:<{width}}{summaries[name]}")
                listed.add(name)
    rest = [n for n in summaries if n not in listed]  # a plug-in no group names
    if rest:
        lines.append("more:")
        lines += [f"  {n:<{width}}{summaries[n]}" for n in rest]
    lines.append("")
    lines.append("`powerfleet COMMAND --help` for a command's options.")
    return "\n".join(lines)


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the named command's module is imported.

    With no command (or an unknown one) every command is registered, so ``--help`` and
    argparse's "invalid choice" list them all; built-ins are listed from ``COMMANDS`` without
    importing their modules.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = Parser(
        prog="powerfleet",
        usage="powerfleet [-h] [--version] COMMAND ...",
        description="Power-aware fine-tuning for fleets of edge GPUs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"powerfleet {_version()}")
    sub = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        help=argparse.SUPPRESS,
        parser_class=Parser,
        prog="powerfleet",
    )
    sub.required = True
    parser.set_defaults(cli_commands=sub)
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
    assert isinstance(sub, Subcommands)  # Parser registers it as the subparsers action
    parser.epilog = _grouped_help(sub)
    return parser


def describe(exc: BaseException) -> str:
    """An error in words: the path and what is wrong with it, never ``[Errno N]``."""
    if isinstance(exc, OSError) and exc.strerror:
        what = exc.strerror[0].lower() + exc.strerror[1:]
        if exc.filename is not None and exc.filename2 is not None:
            return f"{exc.filename} -> {exc.filename2}: {what}"
        if exc.filename is not None:
            return f"{exc.filename}: {what}"
        return what
    # a message built from an OSError's str(): "[Errno 21] Is a directory: '/tmp'"
    text = str(exc)

    def words(m: re.Match) -> str:
        what = m.group(1)[0].lower() + m.group(1)[1:]
        return f"{m.group(2)}: {what}" if m.group(2) else what

    return _ERRNO.sub(words, text)


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^:'\n]+?)(?:: '([^'\n]*)')?(?=$|[;,)\n]|: )")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # said by the command's own parser: "powerfleet select: error: ..."
            command = args.cli_commands.choices[args.command]
            command.error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # --help, --version, or a bad command line (one line said)
        return exc.code if isinstance(exc.code, int) else 2
    del args.cli_commands
    try:
        code = args.func(args)
    except InfeasibleError as exc:
        print(f"powerfleet {args.command}: infeasible: {describe(exc)}", file=sys.stderr)
        return 2
    except (InputError, DeviceError, OSError) as exc:
        print(f"powerfleet {args.command}: error: {describe(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM where a command turns it into one
        from fleet.common.signals import signum_of

        said = f": {exc}" if str(exc) else ""
        print(f"powerfleet {args.command}: interrupted{said}", file=sys.stderr)
        return 128 + signum_of(exc)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
