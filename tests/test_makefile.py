"""The Makefile's install stamps follow pyproject.toml's content, not its mtime.

Why: the README's Flower-native section used to end in `git checkout pyproject.toml`, which gives
the file a new mtime and the same text; a stamp compared by mtime then reinstalled everything on
the next `make run` (issue 31, finding 3). Real `make` runs here on a copy of the Makefile and
pyproject.toml whose `.venv/bin/python` is a script that only records how it was called, so the
test sees exactly which install commands make would run, and installs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make not installed")

FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/../calls.log"
"""


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return tmp_path


def make(tree: Path, *targets: str) -> list[str]:
    """Run make; return the fake interpreter's calls it caused (one line each)."""
    log = tree / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={sys.executable}", *targets],
        cwd=tree,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return log.read_text().splitlines() if log.exists() else []


RUN_STAMP = ".venv/.installed-run"
DEV_STAMP = ".venv/.installed-dev"


def test_run_installs_the_main_job_only_and_once(tree: Path) -> None:
    calls = make(tree, RUN_STAMP)
    assert "-m pip install --quiet torch==2.13.0" in calls
    assert "-m pip install --quiet -e .[train]" in calls
    assert not any("dev" in c for c in calls)  # the test tools wait for `make test`
    assert make(tree, RUN_STAMP) == []


def test_dev_adds_the_tools_on_top_of_the_run_install(tree: Path) -> None:
    make(tree, RUN_STAMP)
    assert make(tree, DEV_STAMP) == ["-m pip install --quiet -e .[dev,train]"]
    assert make(tree, DEV_STAMP) == [] and make(tree, RUN_STAMP) == []


def test_same_content_with_a_newer_mtime_reinstalls_nothing(tree: Path) -> None:
    make(tree, DEV_STAMP)
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_bytes()
    pyproject.unlink()  # what `git checkout pyproject.toml` does: a new file, the same bytes
    pyproject.write_bytes(text)
    later = time.time() + 60
    os.utime(pyproject, (later, later))
    assert make(tree, DEV_STAMP) == [] and make(tree, RUN_STAMP) == []


def test_a_changed_dependency_reinstalls(tree: Path) -> None:
    make(tree, DEV_STAMP)
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"rich>=13"', '"rich>=13.1"'))
    assert "-m pip install --quiet -e .[train]" in make(tree, RUN_STAMP)
    assert make(tree, DEV_STAMP) == ["-m pip install --quiet -e .[dev,train]"]
