"""The command line's shape: one name per concept over every parser, help for every option.

``fleet/cli/names.py`` holds the one spelling of each concept. These tests walk every parser
(each built-in command, its sub-commands, and the plug-ins simulate, experiment, coordinator and
device) and fail on an option spelled otherwise, a concept spelled two ways, an option without
help, or a default not shown. The rest runs the real `python -m fleet`: ``--help`` fits a
screen, ``--version``, abbreviations refused, an old spelling still works and says its new one.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.cli import GROUPS, _builtin, _plugins, build_parser
from fleet.cli.names import ALIASES, DEPRECATED, NAMES, OLD, HelpFormatter

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}


def all_commands() -> list[str]:
    return list(_builtin()) + [ep.name for ep in _plugins() if ep.name not in _builtin()]


@functools.cache
def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) for every command and sub-command."""
    out = []

    def walk(path: str, p: argparse.ArgumentParser) -> None:
        out.append((path, p))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    walk(f"{path} {name}", child)

    for name in all_commands():
        top = build_parser([name])
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        walk(name, sub.choices[name])
    return out


def word(spelling: str) -> str:
    """'--run-dir' and 'RUN_DIR' are one word: the same concept as an option or a positional."""
    return spelling.lstrip("-").replace("-", "_").lower()


def spelled(a: argparse.Action) -> str:
    return a.option_strings[0] if a.option_strings else (a.metavar or a.dest)


def test_every_option_is_spelled_as_the_table_says() -> None:
    wrong = []
    for path, p in parsers():
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if a.help == argparse.SUPPRESS:  # a hidden old spelling: only the listed ones
                listed = all(f"{path} {o}" in DEPRECATED for o in a.option_strings)
                if not listed or a.dest[len(OLD) :] not in NAMES:
                    wrong.append(f"{path}: hidden {a.option_strings} not in DEPRECATED")
                continue
            want = NAMES.get(a.dest)
            if want is None:
                wrong.append(f"{path}: {spelled(a)} (dest {a.dest}) is not in NAMES")
            elif word(spelled(a)) != word(want):
                wrong.append(f"{path}: {spelled(a)} should be spelled {want}")
            for extra in a.option_strings[1:]:
                if extra not in ALIASES:
                    wrong.append(f"{path}: {spelled(a)} has a second spelling {extra}")
            if want and not a.option_strings and a.metavar != word(want).upper():
                wrong.append(f"{path}: positional {a.dest} should show as {word(want).upper()}")
    assert not wrong, "\n".join(wrong)


def test_one_spelling_per_concept_and_no_old_spelling_in_use() -> None:
    words = [word(s) for s in NAMES.values()]
    twice = {w for w in words if words.count(w) > 1}
    # the same word for two dests is allowed only where a backend option and a command's own
    # option are one concept (e.g. --sysfs-root on doctor and on the jetson backend)
    assert twice <= {"sysfs_root", "gpu_node", "state_dir", "rail", "dataset"}, twice
    # an old spelling is out of use in its command, unless only its form changed (profiles
    # --store -> STORE)
    visible = {
        (path, word(spelled(a)))
        for path, p in parsers()
        for a in p._actions
        if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
    }
    for key, new in DEPRECATED.items():
        path, old = key.rsplit(" ", 1)
        if word(old) != word(new):
            assert (path, word(old)) not in visible, key


def test_every_option_has_help_and_shows_its_default() -> None:
    missing = []
    for path, p in parsers():
        fmt = HelpFormatter(prog=p.prog)
        for a in p._actions:
            if a.help == argparse.SUPPRESS or isinstance(a, argparse._SubParsersAction):
                continue
            if not a.help:
                missing.append(f"{path}: {spelled(a)} has no help")
                continue
            shown = fmt._get_help_string(a)
            simple = a.default not in (None, False, True, [], argparse.SUPPRESS)
            if a.option_strings and simple and "default" not in shown:
                missing.append(f"{path}: {spelled(a)} does not show its default {a.default!r}")
    assert not missing, "\n".join(missing)


def test_every_parser_refuses_abbreviations() -> None:
    assert all(not p.allow_abbrev for _, p in parsers())


def test_every_command_is_in_a_group() -> None:
    grouped = [n for _, names in GROUPS for n in names]
    assert sorted(grouped) == sorted(all_commands())
    assert len(grouped) == len(set(grouped))


def test_model_lists_are_the_registry() -> None:
    from fleet.agent.models.registry import MODEL_NAMES

    for path, p in parsers():
        for a in p._actions:
            if a.dest == "model":
                assert all(m in a.help for m in MODEL_NAMES), path
                assert "transformer," not in a.help.replace("char_transformer,", ""), path


def fleet(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *argv], capture_output=True, text=True, env=ENV,
        cwd=REPO, timeout=120,
    )  # fmt: skip


def test_help_fits_one_screen_grouped_simulate_first_of_its_group() -> None:
    r = fleet("--help")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert len(lines) <= 40, r.stdout
    assert max(len(line) for line in lines) <= 100
    titles = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert titles == ["options:", "on a board:", "a fleet:", "analysis and data:"]
    fleet_group = lines[lines.index("a fleet:") + 1]
    assert fleet_group.split()[0] == "simulate"
    for name in all_commands():
        assert any(line.split()[:1] == [name] for line in lines), name


def test_version_is_the_package_metadata() -> None:
    from importlib.metadata import version

    r = fleet("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"powerfleet {version('powerfleet')}"


def test_an_abbreviation_is_refused_in_one_line() -> None:
    r = fleet("select", "--profile", "p.csv", "--efficiency", "e.csv", "--budget", "5")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1, r.stderr
    assert "--budget" in r.stderr and "Traceback" not in r.stderr


def test_pretrain_help_offers_only_models_pretrain_takes() -> None:
    r = fleet("pretrain", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "char_transformer" in text
    assert "transformer," not in text.replace("char_transformer,", "")


@pytest.mark.parametrize(
    "argv, old, new",
    [
        (["profiles", "--store", "{tmp}/store", "--json"], "--store", "the positional STORE"),
        (["profiles", "{tmp}/store", "--json"], None, None),
    ],
)
def test_an_old_spelling_works_and_says_its_new_one(tmp_path, argv, old, new) -> None:
    (tmp_path / "store").mkdir()
    r = fleet(*[a.format(tmp=tmp_path) for a in argv])
    assert r.returncode == 0, r.stderr
    assert f'"store": "{tmp_path}/store"' in r.stdout
    if old is None:
        assert "deprecated" not in r.stderr
    else:
        assert f"powerfleet profiles: {old} is deprecated; use {new}\n" in r.stderr


def test_an_old_required_spelling_still_satisfies_the_command(tmp_path) -> None:
    """budget-feed --trace (now --budget-trace, required): the old spelling alone is enough and
    the command goes on to its own check; the new one missing from both is refused."""
    r = fleet("budget-feed", "--trace", str(tmp_path / "none.csv"), "--budget-file", "b")
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0] == "powerfleet budget-feed: --trace is deprecated; use --budget-trace"
    assert len(lines) == 2 and "not found" in lines[1], r.stderr
    r = fleet("budget-feed", "--budget-file", "b")
    assert r.returncode == 2
    assert "required: --budget-trace" in r.stderr and r.stderr.count("\n") == 1
