"""Issue 12, names and paths: bounded fleet/node-config parsing, one safe-name alphabet on every
surface, run dirs that stay under runs/, and an agent confined to directories it owns."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clients import records
from fleet.agent.protocol.confine import ConfineError, Confinement, owned_dir
from fleet.cli import main as cli_main
from fleet.common.errors import InputError
from fleet.common.names import check_name, child_dir
from fleet.config.fields import OPTIMIZERS
from fleet.config.fleetfile import load_fleet
from fleet.core import efficiency
from fleet.method import selection as lr_rule

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"
EFFICIENCY = ROOT / "simulations" / "efficiency" / "resnet18_cifar10-proxy.csv"


def fleet_file(
    d: Path, run: str = "", device: str = "", name: str = "n1", run_name: str = "r1"
) -> Path:
    text = (
        f'[run]\nname = "{run_name}"\nmodel = "resnet18"\nefficiency = "{EFFICIENCY}"\n'
        f"target_accuracy = 0.9\n{run}\n"
        f'[[devices]]\nname = "{name}"\ntype = "jetson-nano"\nbudget_w = 4.5\n'
        f'profile = "{PROFILE}"\ndata = "{EFFICIENCY}"\n{device}\n'
    )
    path = d / "fleet.toml"
    path.write_text(text)
    return path


def refused(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_fleet(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


# ------------------------------------------------------------------------------ fleet TOML


def test_huge_count_is_refused_before_any_device_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused by arithmetic: not one expanded name is checked, not one device is built (the
    pieces a fleet is made of are counted, so a regression fails here instead of hanging)."""
    import fleet.config.fleetfile as fleetfile

    names: list[str] = []
    built: list[str] = []
    real_check, real_spec = fleetfile.check_name, fleetfile.DeviceSpec

    def check_name(where, what, name):  # type: ignore[no-untyped-def]
        names.append(name)
        return real_check(where, what, name)

    def device_spec(name, *rest):  # type: ignore[no-untyped-def]
        built.append(name)
        return real_spec(name, *rest)

    def bounded_range(*args: int) -> range:  # a name list longer than the cap: fail, not hang
        r = range(*args)
        assert len(r) <= fleetfile.MAX_DEVICES, f"expanding {len(r)} names"
        return r

    monkeypatch.setattr(fleetfile, "check_name", check_name)
    monkeypatch.setattr(fleetfile, "DeviceSpec", device_spec)
    monkeypatch.setattr(fleetfile, "range", bounded_range, raising=False)
    for count in (100001, 1000000000000):  # one over the cap, and far over it
        msg = refused(fleet_file(tmp_path, device=f"count = {count}"))
        assert "device #1 (n1)" in msg and f"count {count}" in msg and "100000" in msg
        assert names == ["r1", "n1"] and built == []  # the run's name and the entry's, no more
        names.clear()
    ok = load_fleet(fleet_file(tmp_path, device="count = 3"))
    assert [d.name for d in ok.devices] == ["n1-0001", "n1-0002", "n1-0003"]


@pytest.mark.parametrize(
    "line,field,expected",
    [
        ("lr_ref = nan", "lr_ref", "a learning rate > 0"),
        ("lr_ref = 0.0", "lr_ref", "a learning rate > 0"),
        ("lr_ref = -1e-3", "lr_ref", "a learning rate > 0"),
        ('rounds = "3"', "rounds", "an integer in [1, 100000]"),
        ("rounds = 0", "rounds", "an integer in [1, 100000]"),
        ("seed = 1.5", "seed", "an integer in [0,"),
        ("lr_ref_batch = true", "lr_ref_batch", "an integer in [1,"),
        ("target_accuracy = 1.5", "target_accuracy", "(0, 1]"),
        ("target_accuracy = inf", "target_accuracy", "an accuracy in (0, 1]"),
        ('optimizer = "rmsprop"', "optimizer", "one of adam, adamw, sgd"),
        ("deadline_s = nan", "deadline_s", "a finite number"),
        ("deadline_s = [[[1]]]", "deadline_s", "a finite number > 0"),
        ("deadline_s = 0", "deadline_s", "a positive number of seconds"),
        ("ship_weights = 1", "ship_weights", "true or false"),
        ('learn_efficiency = "sometimes"', "learn_efficiency", "one of none, online"),
    ],
)
def test_run_field_refused_naming_file_run_and_field(tmp_path, line, field, expected) -> None:
    # target_accuracy appears twice when overridden: drop the default line first
    path = fleet_file(tmp_path, run=line)
    if line.startswith("target_accuracy"):
        path.write_text(path.read_text().replace("target_accuracy = 0.9\n", "", 1))
    msg = refused(path)
    assert "[run]" in msg and field in msg and expected in msg, msg


@pytest.mark.parametrize(
    "line,field,expected",
    [
        ("learning = 3", "learning", "one of trace, train"),
        ("budget_schedule = [[0, nan]]", "budget", "expected watts > 0"),
        ("count = 2.5", "count", "positive integer"),
    ],
)
def test_device_field_refused_naming_file_device_and_field(tmp_path, line, field, expected):
    path = fleet_file(tmp_path, device=line)
    if "budget_schedule" in line:
        path.write_text(path.read_text().replace("budget_w = 4.5\n", ""))
    msg = refused(path)
    assert "device #1 (n1)" in msg and field in msg and expected in msg, msg


def test_wrong_type_path_and_oversized_inputs(tmp_path: Path) -> None:
    path = fleet_file(tmp_path)
    path.write_text(path.read_text().replace(f'data = "{EFFICIENCY}"', "data = 5"))
    msg = refused(path)
    assert "device #1 (n1)" in msg and "'data'" in msg and "wrong type" in msg
    path.write_text("[run]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested too deeply" in refused(path)
    path.write_bytes(b"[run]\nname = \xff\n")
    assert "not UTF-8" in refused(path)
    path.write_text("# pad\n" * (1 << 20))
    assert "larger than" in refused(path)


@pytest.mark.parametrize("bad", ["a/b", "../../../x", "..", ".hidden", "x" * 65, "a b", ""])
def test_bad_names_refused_on_the_fleet_file(tmp_path: Path, bad: str) -> None:
    assert "not a safe name" in refused(fleet_file(tmp_path, name=bad))
    assert "not a safe name" in refused(fleet_file(tmp_path, run_name=bad))


def test_optimizers_are_the_trainers(tmp_path: Path) -> None:
    assert set(OPTIMIZERS) == set(lr_rule.SQRT_OPTIMIZERS + lr_rule.LINEAR_OPTIMIZERS)


# ------------------------------------------------------------------------------ node config, CLI


def test_node_config_and_instruction_refuse_bad_names_and_values(tmp_path: Path) -> None:
    nc = {"device-name": "../x", "device-type": "jetson-nano", "budget-w": "4.5"}
    with pytest.raises(InputError, match=r"node config: device-name '../x' is not a safe name"):
        records.spec_from_node_config(nc)
    nc["device-name"] = "nano-1"
    assert records.spec_from_node_config(nc).name == "nano-1"
    nc["profile"] = "p" * 5000
    with pytest.raises(InputError, match="node config of nano-1: node config 'profile'"):
        records.spec_from_node_config(nc)

    from strategies import coordinator

    fleet = load_fleet(fleet_file(tmp_path))
    shipped = efficiency.load_efficiency(str(EFFICIENCY))
    good = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
    assert records.decode_instruction(good).run == fleet.run
    for key, value, expect in [
        ("rounds", "3", "'rounds' must be an integer"),
        ("lr-ref", float("nan"), "'lr_ref' must be a learning rate > 0"),
        ("run-name", "../../../x", "run name '../../../x' is not a safe name"),
        ("optimizer", "lion", "'optimizer' must be one of adam, adamw, sgd"),
        ("run-settings", "[" * 50000, "'run-settings' is not valid JSON"),
        (
            "run-settings",
            '{"deadlin_s": 5}',
            "unknown key 'deadlin_s' (did you mean 'deadline_s'?)",
        ),
        ("run-settings", '{"deadline_s": -1}', "'deadline_s' must be a finite number > 0"),
        ("run-settings", '{"ship_weights": "no"}', "'ship_weights' must be true or false"),
    ]:
        cfg = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
        cfg[key] = value
        with pytest.raises(InputError, match="train instruction") as info:
            records.decode_instruction(cfg)
        assert expect in str(info.value), str(info.value)


def test_cli_device_name_refused_with_one_line(tmp_path: Path, capsys) -> None:
    path = fleet_file(tmp_path)
    assert cli_main(["device", "--fleet", str(path), "--name", "../../etc/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--name" in err and "not a safe name" in err


# ------------------------------------------------------------------------------ run dirs


def test_run_name_cannot_leave_runs(tmp_path: Path, monkeypatch) -> None:
    from simulations.runner import simulate

    monkeypatch.chdir(tmp_path)
    path = fleet_file(tmp_path, run_name="../../../x")
    with pytest.raises(InputError, match="run name '../../../x' is not a safe name"):
        simulate(path, engine="direct")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml"]  # nothing written
    with pytest.raises(InputError, match="not a safe name"):
        child_dir(tmp_path / "runs", "../x")
    (tmp_path / "runs").mkdir()
    assert child_dir(tmp_path / "runs", "r1-1").parent == (tmp_path / "runs").resolve()
    assert check_name("here", "device name", "nano-1.a_b") == "nano-1.a_b"


# ------------------------------------------------------------------------------ agent


def test_owned_dir_created_0700_and_foreign_or_open_dirs_refused(tmp_path: Path) -> None:
    work = owned_dir(str(tmp_path / "a" / "work"))
    assert os.stat(work).st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o770)
    with pytest.raises(ConfineError, match="writable by group or others"):
        owned_dir(str(loose))
    link = tmp_path / "link"
    link.symlink_to(work)
    with pytest.raises(ConfineError, match="not a link"):
        owned_dir(str(link))
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
    else:
        foreign = Path("/")  # root's, never this user's
    with pytest.raises(ConfineError, match="belongs to uid"):
        owned_dir(str(foreign))
    box = Confinement(work)
    assert box.resolve("out", "sub/p.csv") == os.path.join(work, "sub", "p.csv")
    for key, value in (("out", "/etc/x"), ("checkpoint", "../../x"), ("data", str(link) + "/..")):
        with pytest.raises(ConfineError, match="outside the agent's directories"):
            box.resolve(key, value)


class Agent:
    """``python -m fleet.agent --backend replay --work-dir W``; lines read on a thread."""

    def __init__(self, work: Path) -> None:
        argv = [sys.executable, "-m", "fleet.agent", "--backend", "replay"]
        argv += ["--profile-csv", str(PROFILE), "--work-dir", str(work)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def ask(self, req: dict) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = json.loads(self.lines.get(timeout=60))
            if msg.get("event") is None:
                return msg

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.mark.slow
def test_agent_refuses_paths_outside_its_dirs_and_keeps_serving(tmp_path: Path) -> None:
    work = tmp_path / "work"
    agent = Agent(work)
    try:
        assert agent.ask({"id": 1, "cmd": "hello"})["ok"]
        assert os.stat(work).st_mode & 0o777 == 0o700  # created by the agent, private
        bad = agent.ask({"id": 2, "cmd": "profile", "model": "resnet18", "out": "/etc/x"})
        assert bad["ok"] is False and "'out' = '/etc/x' is outside" in bad["error"]
        bad = agent.ask(
            {"id": 3, "cmd": "train", "model": "resnet18", "data": "d.pt", "checkpoint": "../../x"}
        )
        assert bad["ok"] is False and "'checkpoint' = '../../x' is outside" in bad["error"]
        assert not (tmp_path.parent / "x").exists() and not Path("/etc/x").exists()
        assert agent.ask({"id": 4, "cmd": "hello"})["ok"] is True  # still serving
        good = agent.ask(
            {"id": 5, "cmd": "profile", "model": "resnet18", "batch_sizes": [8, 16],
             "freqs": [76.8], "out": "p/prof.csv", "rows": False, "steps": 1, "warmup": 0}
        )  # fmt: skip
        assert good["ok"], good
        assert good["path"] == str((work / "p" / "prof.csv").resolve())
        assert (work / "p" / "prof.csv").is_file()
    finally:
        agent.close()


def test_agent_refuses_to_start_in_an_open_work_dir(tmp_path: Path) -> None:
    work = tmp_path / "open"
    work.mkdir()
    os.chmod(work, 0o777)
    proc = subprocess.run(
        [sys.executable, "-m", "fleet.agent", "--backend", "replay", "--profile-csv",
         str(PROFILE), "--work-dir", str(work)],
        input="", capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "writable by group or others" in err[0]
