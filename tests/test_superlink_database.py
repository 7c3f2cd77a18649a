"""The SuperLink's state file: ``--database`` on its command line, run_dir/superlink.db by
default in the coordinator. That a SuperLink restarted on that file resumes the run is the fault
suite's (tests/test_faults.py, a coordinator killed mid-round).

Why it matters: a SuperLink keeps runs, nodes and messages in memory unless told a database;
killed mid-run, it forgets them, and nothing can resume.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployment import daemons, deploy
from fleet.common.errors import InputError


def test_superlink_command_names_the_database_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = daemons.superlink_command("127.0.0.1", 9091, insecure=True, database="run/s.db")
    assert argv[argv.index("--database") + 1] == str(tmp_path / "run" / "s.db")
    assert argv[-1] == "--insecure"
    assert "--database" not in daemons.superlink_command("127.0.0.1", 9091, insecure=True)
    with pytest.raises(InputError, match="--database: empty path"):
        daemons.superlink_command("127.0.0.1", 9091, insecure=True, database=" ")


def test_coordinator_database_lies_in_the_run_dir_unless_told(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert deploy.superlink_database(run_dir, deploy.SUPERLINK_DB) == run_dir / "superlink.db"
    assert run_dir.is_dir()  # made for Flower, which opens the file but makes no directory
    assert deploy.superlink_database(run_dir, "state/l.db") == run_dir / "state" / "l.db"
    assert deploy.superlink_database(run_dir, tmp_path / "x.db") == tmp_path / "x.db"
    assert deploy.superlink_database(run_dir, None) is None
    with pytest.raises(InputError, match="database: empty path"):
        deploy.superlink_database(run_dir, "")
