"""One name per concept across every `powerfleet` command, and the parser every command uses.

Why a table: the command line grew one command at a time, and the same thing came to be spelled
three ways (a dataset was ``--dataset``, ``--proxy`` or ``--data``; a store a flag here and a
positional there). ``NAMES`` is the one spelling of each concept, keyed by the attribute the
command reads (argparse's ``dest``); ``tests/test_cli_names.py`` walks every parser, plug-ins
included, and fails on an option spelled otherwise. An old spelling stays for a release as a
hidden alias (``deprecated``) that still works and says, in one line, what replaced it.

``Parser`` is the parser class of every command and sub-command: no abbreviations (``--budget
5`` is refused, not read as ``--budget-w``), defaults shown in ``--help``, and an error is one
line on stderr naming the command and the problem (exit 2), never a usage block.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

# concept (the ``dest`` a command reads) -> its one spelling: ``--option`` or a positional's
# METAVAR. The same concept keeps its spelling in every command that takes it.
NAMES = {
    # inputs shared by many commands
    "fleet": "--fleet",  # a fleet TOML
    "profile": "--profile",  # a profile table (CSV): time and power per (batch size, clock)
    "efficiency": "--efficiency",  # samples-to-accuracy per batch size (CSV)
    "dataset": "--dataset",  # a prepared dataset's name or a path
    "data_dir": "--data-dir",  # where prepared datasets are cached
    "weights": "--weights",  # pre-trained weights (powerfleet pretrain)
    "model": "--model",  # a model of the registry
    "run_dir": "RUN_DIR",  # a run directory (report.json, state.json); --run-dir where optional
    "store": "STORE",  # a profile or efficiency store directory
    "out": "--out",  # the file or folder a command writes
    "json": "--json",
    # budgets
    "budget_w": "--budget-w",  # one budget in watts
    "budgets": "--budgets",  # a list of budgets
    "budget_schedule": "--budget-schedule",
    "budget_file": "--budget-file",  # a live budget file, re-read every second
    "budget_trace": "--budget-trace",  # a power trace CSV (time_s, available_w)
    "budget_dwell_s": "--budget-dwell-s",
    "objective": "--objective",
    "deadline_s": "--deadline-s",
    "target_accuracy": "--target-accuracy",
    # the grid
    "batch_sizes": "--batch-sizes",
    "freqs": "--freqs",
    "input_shape": "--input-shape",
    "num_classes": "--num-classes",
    # device backends (fleet.agent.devices: one declaration per option)
    "backend": "--backend",
    "backend_opt_allow-clock-changes": "--allow-clock-changes",
    "backend_opt_allow-power-limit": "--allow-power-limit",  # NVML: the power limit is the knob
    "backend_opt_gpu-index": "--gpu-index",
    "backend_opt_gpu-node": "--gpu-node",
    "backend_opt_power-step-w": "--power-step-w",
    "backend_opt_powercap-root": "--powercap-root",
    "backend_opt_profile-csv": "--profile-csv",  # the replay backend's recorded file
    "backend_opt_rail": "--rail",
    "backend_opt_settle-timeout-s": "--settle-timeout-s",
    "backend_opt_state-dir": "--state-dir",
    "backend_opt_sysfs-root": "--sysfs-root",
    "sysfs_root": "--sysfs-root",
    "gpu_node": "--gpu-node",
    "state_dir": "--state-dir",
    "rail": "--rail",
    "wait_s": "--wait-s",
    "device": "--device",  # the torch device
    "sampler_hz": "--sampler-hz",
    # profile / predict
    "predict": "--predict",
    "max_probes": "--max-probes",
    "adapt_budgets": "--adapt-budgets",
    "adapt_probes": "--adapt-probes",
    "adapt_efficiency": "--adapt-efficiency",
    "steps": "--steps",
    "warmup": "--warmup",
    "min_point_s": "--min-point-s",
    "min_power_samples": "--min-power-samples",
    "next": "--next",
    # training and estimation
    "subset": "--subset",
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "seed": "--seed",
    "seeds": "--seeds",
    "optimizer": "--optimizer",
    "lr_ref": "--lr-ref",
    "lr_ref_batch": "--lr-ref-batch",
    "eval_every": "--eval-every",
    "max_samples": "--max-samples",
    "workers": "--workers",
    "ray_address": "--ray-address",
    "device_cpus": "--device-cpus",  # per simulated device on a Ray cluster
    "device_gpus": "--device-gpus",
    "cache_dir": "--cache-dir",
    "learn_efficiency": "--learn-efficiency",
    "guard_window": "--guard-window",
    "drift_time_tol": "--drift-time-tol",
    "drift_power_tol": "--drift-power-tol",
    "no_drift": "--no-drift",
    "refreshed_profile": "--refreshed-profile",
    "pace_to_profile": "--pace-to-profile",
    "small": "--small",
    "big": "--big",
    "batches": "--batches",
    # compare / inspect / select
    "truth": "--truth",
    "caps": "--caps",
    "cap_profile": "--cap-profile",
    # data
    "data_command": "ACTION",
    "names": "DATASET",  # data prepare DATASET...: the same concept as --dataset
    "force": "--force",
    # status / whatif / budget-feed
    "prometheus": "--prometheus",
    "follow": "--follow",
    "interval": "--interval",
    "scale": "--scale",
    "plot": "--plot",
    "start_s": "--start-s",
    "speed": "--speed",
    # plug-ins: simulate, experiment, coordinator, device
    "engine": "--engine",
    "which": "WHICH",
    "profile_dir": "--profile-dir",  # a folder of profile CSVs (not --profile, one table)
    "efficiency_dir": "--efficiency-dir",
    "models": "--models",
    "devices": "--devices",
    "task": "--task",
    "host": "--host",
    "port": "--port",
    "nodes": "--nodes",
    "ship_weights": "--ship-weights",
    "timeout": "--timeout",
    "segment_s": "--segment-s",
    "ssl_ca_certfile": "--ssl-ca-certfile",
    "ssl_certfile": "--ssl-certfile",
    "ssl_keyfile": "--ssl-keyfile",
    "auth_public_keys": "--auth-public-keys",
    "auth_private_key": "--auth-private-key",
    "insecure": "--insecure",
    "work_dir": "--work-dir",
    "keep_work_dir": "--keep-work-dir",
    "name": "--name",
    "superlink": "--superlink",
    "client": "--client",
    "root_certificates": "--root-certificates",
    "pace": "--pace",
    "agent_python": "--agent-python",
    "agent_timeout_s": "--agent-timeout-s",
}

# Second spellings that are not deprecated: a switch's negation, the replay file's long form.
ALIASES = {"--no-ship-weights", "--replay-profile"}

# Old spellings, kept for a release: "command --old" -> the one spelling now (hidden from --help).
DEPRECATED = {
    "estimate --proxy": "--dataset",
    "noise-scale --data": "--dataset",
    "profiles --store": "STORE",
    "budget-feed --trace": "--budget-trace",
    "budget-feed --file": "--budget-file",
    "budget-feed --dwell-s": "--budget-dwell-s",
    "experiment --profiles": "--profile-dir",  # a folder (and not the profiles command)
    "experiment --efficiency": "--efficiency-dir",  # a folder; --efficiency is one CSV
}


OLD = "deprecated_"  # the dest prefix of an old spelling


def _command(parser: argparse.ArgumentParser) -> str:
    """'powerfleet data prepare' -> 'data prepare'."""
    return parser.prog.split(" ", 1)[-1]


class _Deprecated(argparse.Action):
    """Store as the new option does, after one line on stderr naming the replacement."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        new = DEPRECATED[_command(parser) + " " + option]
        new = new if new.startswith("-") else "the positional " + new
        print(f"{parser.prog}: {option} is deprecated; use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)  # moved to the new dest by Parser after parsing


def deprecated(parser: argparse.ArgumentParser, old: str, dest: str) -> None:
    """Accept ``old`` (a key of ``DEPRECATED``) for ``dest``, hidden from --help.

    A required new option cannot stay required for argparse (the old spelling alone must do),
    so ``Parser`` checks it after parsing, with argparse's own words."""
    assert _command(parser) + " " + old in DEPRECATED, old
    assert isinstance(parser, Parser), "every powerfleet parser is a names.Parser"
    parser.accept_old(old, dest)


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default shown: appended unless the help already speaks of its default,
    or there is none to show (a switch, an option whose absence is its meaning)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "default" in text or text == argparse.SUPPRESS:
            return text
        if action.default in (None, False, True, argparse.SUPPRESS) or action.default == []:
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text
        return text + " (default: %(default)s)"


class Subcommands(argparse._SubParsersAction):
    """The subcommands action, keeping each command's one-line summary where ``--help``'s
    grouped listing can read it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summaries: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        self.summaries[name] = kwargs.get("help") or ""
        return super().add_parser(name, **kwargs)


class Parser(argparse.ArgumentParser):
    """The parser class of every command: no abbreviations, defaults shown, one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._late_required: list[argparse.Action] = []
        self._renamed: list[tuple[str, str]] = []
        self.register("action", "parsers", Subcommands)

    def accept_old(self, old: str, dest: str) -> None:
        """``old`` stores into ``dest`` (after a deprecation line); a required ``dest`` is
        checked after parsing instead, so the old spelling alone satisfies it."""
        for action in self._actions:
            if action.dest == dest and action.required:
                action.required = False
                action.help = (action.help or "") + " (required)"
                self._late_required.append(action)
        # its own dest: an optional positional (profiles [STORE]) would overwrite it with None
        self._renamed.append((OLD + dest, dest))
        self.add_argument(old, dest=OLD + dest, action=_Deprecated, help=argparse.SUPPRESS)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        for old, new in self._renamed:
            value = getattr(parsed, old, None)
            if hasattr(parsed, old):
                delattr(parsed, old)
            if value is not None:
                setattr(parsed, new, value)
        missing = [a.option_strings[0] for a in self._late_required if not getattr(parsed, a.dest)]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)
