"""Shared helpers: write small profile/efficiency CSVs as real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# One thread per math library, in every test and in every process a test starts (they inherit
# the environment); set before anything imports torch or numpy. Why: ``make test`` runs four
# workers on two cores, and each worker's torch (OpenMP) and OpenBLAS pools spin while they wait
# for work, taking cores the other workers need. Measured here on the whole suite: 1,000 ->
# 737 CPU-s, 699 -> 538 s. Agents on a board keep their library's defaults; this is the suite's.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

# Hypothesis's per-example deadline (200 ms) times examples on the host's clock: a loaded core
# fails a correct property. Examples are bounded by max_examples instead, in every file.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

#: How long a test waits for an agent's reply before it calls the agent hung: a hang guard, not a
#: timing claim (a reply ends the wait at once). On a loaded 2-core machine an agent's start
#: alone (torch imported) has taken over 20 s, and a tighter wait turned that into an "error" row.
AGENT_GUARD_S = 120.0


def pytest_collection_modifyitems(config, items):
    """Tests that start real processes first, then the other slow ones, then the rest (stable
    within each group). Why: ``make test`` hands tests to its workers two at a time
    (``--maxschedchunk 2``), so this is longest-first scheduling; a two-minute fault test started
    last would otherwise run alone on one worker while the others sit idle."""

    def weight(item) -> int:
        if item.get_closest_marker("integration"):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=weight)


def write_csv(path: Path, header: str, rows: list[str], comments: list[str] = ()) -> Path:
    lines = [f"# {c}" for c in comments] + [header] + rows
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def write(tmp_path):
    def _write(name: str, header: str, rows: list[str], comments: list[str] = ()) -> Path:
        return write_csv(tmp_path / name, header, rows, comments)

    return _write


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed `powerfleet` entry point as a user would (a real subprocess)."""
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
        timeout=120,
    )
