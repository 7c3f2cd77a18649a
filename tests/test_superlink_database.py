"""The SuperLink's state file: ``--database`` on its command line, run_dir/superlink.db by
default in the coordinator, and a SuperLink restarted on that file still knows the run.

Why it matters: a SuperLink keeps runs, nodes and messages in memory unless told a database;
killed mid-run, it forgets them, and nothing can resume. The integration test kills a real
SuperLink after a coordinator run and restarts it on the same file: the run is still there,
finished, under the same id (``tests/fault_helpers.Loopback``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from deployment import daemons, deploy, processes
from fleet.common.errors import InputError
from tests.deploy_helpers import stopped_at_exit
from tests.fault_helpers import (
    Loopback,
    fleet_of_replay_devices,
    kill_tree,
    replay_node_configs,
    wait_until,
)


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


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_restarted_superlink_knows_the_coordinators_run(tmp_path: Path) -> None:
    """run_coordinator with its defaults keeps run_dir/superlink.db; a SuperLink started again
    on that file (the first one is gone) lists the run as finished, under its id."""
    fleet = fleet_of_replay_devices(tmp_path, 2)
    run_dir = tmp_path / "run"
    port = processes.free_port()
    result: dict[str, deploy.CoordinatorResult] = {}
    with stopped_at_exit() as procs:
        for name, config in replay_node_configs(fleet).items():  # they retry until it is up
            argv = daemons.supernode_command(
                f"127.0.0.1:{port}", processes.free_port(), config, insecure=True
            )
            procs.append(processes.start_process(argv, tmp_path / name, tmp_path / name / "log"))
        coordinator = threading.Thread(
            target=lambda: result.update(
                r=deploy.run_coordinator(
                    fleet,
                    run_dir,
                    port=port,
                    num_nodes=2,
                    insecure=True,
                    work_dir=tmp_path / "work",
                    timeout_s=120,
                )  # fmt: skip
            )
        )
        coordinator.start()
        coordinator.join(timeout=200)
        assert not coordinator.is_alive(), "the coordinator did not return"
        assert result["r"].ok, result["r"].details
        assert (run_dir / "superlink.db").is_file()
        for p in procs:  # the devices go too: only the file is left
            kill_tree(p)
        again = Loopback(procs, tmp_path / "again", run_dir / "superlink.db", port=port)
        again.start_link()
        run_id = result["r"].run_id
        assert run_id is not None
        wait_until(lambda: again.run_status(run_id)[0] != "unreachable", 30.0, "the run listed")
        assert again.run_status(run_id)[0] == "finished:completed"
