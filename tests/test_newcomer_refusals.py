"""What a newcomer's mistakes get: one line naming the flag, file or field, exit 2, before work.

Each case is a mistake a first session with the command line made (a damaged report, a NaN
epoch count, a fleet whose profile is another model's, a port out of range, a flag that would
have changed nothing) and what it used to get instead: a traceback, a silent exit 0, numbers
of the wrong model, or the error in a daemon's log. Commands run in process
(``fleet.cli.main``), as the entry point runs them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleet.agent.models.names import model_mismatch
from fleet.cli import main
from fleet.method.profile_io import atomic_write_text
from fleet.planning.segmented_round import renamed
from tests.conftest import ROOT
from tests.refusal_helpers import one_line

PROFILES = ROOT / "simulations" / "profiles"
EFFICIENCY = ROOT / "simulations" / "efficiency"
RESNET_PROFILE = PROFILES / "nano_resnet18.csv"
RESNET_PROXY = EFFICIENCY / "resnet18_cifar10-proxy.csv"


def fleet_file(tmp: Path, model: str = "resnet18", profiles: tuple[str, ...] = ()) -> Path:
    """A fleet of Nanos (one per profile path given; two on the reference profile by default)
    replaying the resnet18 traces."""
    profiles = profiles or (str(RESNET_PROFILE), str(RESNET_PROFILE))
    text = f'[run]\nmodel = "{model}"\nefficiency = "{RESNET_PROXY}"\ntarget_accuracy = 0.8\n'
    for i, profile in enumerate(profiles):
        name = "ab"[i] if i < 2 else f"d{i}"
        text += (
            f'\n[[devices]]\nname = "{name}"\ntype = "jetson-nano"\nbudget_w = 5\n'
            f'profile = "{profile}"\ndata = "{EFFICIENCY / "resnet18_cinic.csv"}"\n'
        )
    path = tmp / f"fleet-{model}-{len(profiles)}.toml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------- the command line itself


def test_an_unknown_flag_is_said_by_the_command_it_was_given_to(capsys):
    line = one_line(
        capsys,
        [
            "select",
            "--profile",
            str(RESNET_PROFILE),
            "--efficiency",
            str(RESNET_PROXY),
            "--budget-w",
            "5",
            "--bogus",
            "1",
        ],  # fmt: skip
        "unrecognized arguments: --bogus 1",
    )
    assert line.startswith("powerfleet select: error:"), line


@pytest.mark.parametrize("argv, needles", [
    (["select", "--profile", str(RESNET_PROFILE), "--efficiency", str(RESNET_PROXY),
      "--budget-w", "5", "--deadline-s", "100"], ["--deadline-s is for --objective deadline"]),
    (["predict", "--profile", str(RESNET_PROFILE), "--budgets", "5", "--out", "/tmp/x.csv"],
     ["--budgets is for --next"]),
    (["train", "--backend", "cpu", "--model", "resnet18", "--dataset", "mnist-5k",
      "--efficiency", str(RESNET_PROXY), "--budget-w", "5", "--batch-sizes", "0"],
     ["argument --batch-sizes: expected integers > 0, got '0'"]),
])  # fmt: skip
def test_a_flag_that_would_change_nothing_or_is_no_number_is_refused(capsys, argv, needles):
    one_line(capsys, argv, *needles)


@pytest.mark.parametrize("epochs", ["nan", "inf", "-1"])
def test_pretrain_refuses_an_epoch_count_that_is_no_number(capsys, tmp_path, epochs):
    one_line(
        capsys,
        [
            "pretrain",
            "--model",
            "small_cnn",
            "--dataset",
            "fashion-mnist",
            "--epochs",
            epochs,
            "--out",
            str(tmp_path / "w.pt"),
        ],  # fmt: skip
        "--epochs must be a finite number > 0",
    )
    assert not (tmp_path / "w.pt").exists()


def test_train_says_when_its_efficiency_or_profile_is_another_models(capsys, tmp_path):
    """Said, not refused (a rehearsal may train a small model on a big one's table), and said
    before the work: here the dataset that is not there stops it right after."""
    code = main(
        ["train", "--backend", "cpu", "--dataset", str(tmp_path / "none"), "--budget-w", "5",
         "--model", "char_transformer", "--profile", str(RESNET_PROFILE),
         "--efficiency", str(RESNET_PROXY), "--batch-sizes", "8,16"]
    )  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[:3] == [
        "powerfleet train: note: warning: --batch-sizes is for profiling first; the run "
        "chooses among --profile's batch sizes",
        f"powerfleet train: note: warning: --efficiency {RESNET_PROXY} was recorded for "
        "'resnet18', not --model 'char_transformer'",
        f"powerfleet train: note: warning: --profile {RESNET_PROFILE} was recorded for "
        "'resnet18', not --model 'char_transformer'",
    ]
    assert err[3].startswith(f"powerfleet train: error: {tmp_path / 'none'}: no such file")


def test_model_names_compare_as_files_write_them():
    assert not model_mismatch("transformer", "char_transformer")  # the paper's name
    assert not model_mismatch("ResNet18", "resnet-18".replace("-", ""))
    assert not model_mismatch("", "small_cnn")  # a file that names no model is not judged
    assert model_mismatch("resnet18", "small_cnn")
    assert model_mismatch("transformer", "char_transformer_small")


@pytest.mark.parametrize("port", ["99999", "0", "x"])
def test_coordinator_refuses_a_port_before_its_superlink_starts(capsys, tmp_path, port):
    one_line(
        capsys,
        [
            "coordinator",
            "--fleet",
            str(fleet_file(tmp_path)),
            "--insecure",
            "--port",
            port,
            "--work-dir",
            str(tmp_path / "w"),
            "--run-dir",
            str(tmp_path / "run"),
        ],  # fmt: skip
        "argument --port: expected a port in 1-65535",
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "w").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--pace", "-1"], "--pace: expected 0 (no wait) or device seconds per wall second"),
    (["--pace", "nan"], "--pace: expected 0 (no wait)"),
    (["--pace", "60", "--client", "hardware"], "--pace applies to --client replay"),
    (["--port", "70000"], "argument --port: expected 0 (a free port) or a port in 1-65535"),
])  # fmt: skip
def test_device_refuses_its_pace_and_port_before_its_supernode_starts(
    capsys, tmp_path, extra, needle
):
    one_line(
        capsys,
        [
            "device",
            "--fleet",
            str(fleet_file(tmp_path)),
            "--name",
            "a",
            "--insecure",
            "--work-dir",
            str(tmp_path / "w"),
            *extra,
        ],  # fmt: skip
        needle,
    )
    assert not (tmp_path / "w").exists()  # nothing started, nothing written


# ------------------------------------------------------------------------------ fleets


def test_whatif_refuses_a_device_it_cannot_run_instead_of_counting_it(capsys, tmp_path):
    bad = tmp_path / "nanpeak.csv"
    lines = RESNET_PROFILE.read_text().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln[:1].isdigit())
    cells = lines[first].split(",")
    cells[3] = "nan"  # peak_power_w
    lines[first] = ",".join(cells)
    bad.write_text("".join(lines))
    fleet = fleet_file(tmp_path, profiles=(str(RESNET_PROFILE), str(bad)))
    one_line(
        capsys,
        ["whatif", "--fleet", str(fleet), "--budgets", "4.5,7"],
        f"device b: {bad}: line {first + 1}: peak_power_w='nan' must be a finite number",
    )
    other_model = fleet_file(tmp_path, model="small_cnn")
    assert main(["whatif", "--fleet", str(other_model), "--budgets", "4.5 W,7W", "--json"]) == 0
    out, err = capsys.readouterr()
    said = [
        f"the run trains 'small_cnn' but its efficiency {RESNET_PROXY} was recorded for 'resnet18'",
        f"device a: the run trains 'small_cnn' but its profile {RESNET_PROFILE} was recorded "
        "for 'resnet18'",  # once per kind of device: b is a's kind
    ]
    assert err.splitlines() == [f"powerfleet whatif: note: warning: {s}" for s in said]
    assert json.loads(out)["warnings"] == said


def test_a_simulated_round_says_whose_numbers_each_row_holds(capsys, tmp_path):
    """A fleet that trains small_cnn on resnet18's files runs (a rehearsal may), and every row
    says so; the rows of a kind are copies, and only "device NAME" is renamed in them."""
    fleet = fleet_file(tmp_path, model="small_cnn")
    assert main(["simulate", "--fleet", str(fleet), "--engine", "direct", "--json",
                 "--run-dir", str(tmp_path / "run")]) == 0  # fmt: skip
    capsys.readouterr()
    rows = json.loads((tmp_path / "run" / "report.json").read_text())["devices"]
    assert [(r["device"], r["status"]) for r in rows] == [("a", "ok"), ("b", "ok")]
    for r in rows:
        assert r["message"].startswith(
            f"the run trains 'small_cnn' but its profile {RESNET_PROFILE} was recorded for "
            "'resnet18'; "  # then what the row says of its own run
        ), r["message"]


def test_a_kinds_row_renamed_changes_the_device_phrase_only():
    row = {"device": "a", "message": "device a: a path /data/a/x.csv and 'small_cnn'"}
    assert renamed(row, "b")["message"] == "device b: a path /data/a/x.csv and 'small_cnn'"
    assert renamed({"device": "a", "message": "device ab: other"}, "c")["message"] == (
        "device ab: other"
    )


def test_the_direct_engine_keeps_another_fleets_finished_run(capsys, tmp_path):
    run_dir = tmp_path / "run"
    first, second = fleet_file(tmp_path), fleet_file(tmp_path, profiles=(str(RESNET_PROFILE),))
    argv = ["simulate", "--engine", "direct", "--json", "--run-dir", str(run_dir), "--fleet"]
    assert main([*argv, str(first)]) == 0
    capsys.readouterr()
    before = (run_dir / "report.json").read_text()
    one_line(capsys, [*argv, str(second)], f"{run_dir}: holds the finished run of another fleet")
    assert (run_dir / "report.json").read_text() == before
    assert main([*argv, str(first)]) == 0  # its own fleet file reruns in place
    assert len(json.loads((run_dir / "report.json").read_text())["devices"]) == 2


# ---------------------------------------------------------------------- files and reports


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(devices="nope"), "'devices' must be a list of device rows"),
    (lambda r: r.update(fleet="x"), "'fleet' must be an object of fleet totals"),
    (lambda r: r["devices"].__setitem__(0, 1), "devices[0]: expected an object"),
    (lambda r: r["devices"][0].pop("status"), "devices[0] (a): 'status' None is not one of"),
    (lambda r: r["devices"][0].update(device=""), "devices[0]: 'device' must be the device"),
])  # fmt: skip
def test_report_refuses_a_damaged_report_json_in_one_line(capsys, tmp_path, edit, needle):
    run_dir = tmp_path / "run"
    assert main(["simulate", "--fleet", str(fleet_file(tmp_path)), "--engine", "direct",
                 "--json", "--run-dir", str(run_dir)]) == 0  # fmt: skip
    capsys.readouterr()
    (run_dir / "state.json").unlink()  # the report alone, as a copied run shows it
    report = json.loads((run_dir / "report.json").read_text())
    edit(report)
    (run_dir / "report.json").write_text(json.dumps(report))
    one_line(capsys, ["report", str(run_dir)], f"{run_dir / 'report.json'}: ", needle)
    assert not (run_dir / "report.md").exists()


@pytest.mark.parametrize("caps, needle", [
    ("4.5=-3", "--caps: '-3' is not a frequency in MHz"),
    ("4.5=nan", "--caps: 'nan' is not a frequency in MHz"),
    ("8=307.2", "--caps: 8 W is not among --budgets (4.5 W, 7 W, none)"),
])  # fmt: skip
def test_compare_refuses_caps_it_would_misuse(capsys, caps, needle):
    one_line(
        capsys,
        [
            "compare",
            "--profile",
            str(RESNET_PROFILE),
            "--efficiency",
            str(RESNET_PROXY),
            "--caps",
            caps,
        ],  # fmt: skip
        needle,
    )


def test_restore_refuses_a_sysfs_root_that_is_not_there(capsys, tmp_path):
    one_line(
        capsys,
        ["restore", "--sysfs-root", str(tmp_path / "nope"), "--json"],
        f"--sysfs-root {tmp_path / 'nope'}: not a directory",
    )


def test_inspect_counts_failed_points_by_status_and_gives_idle_power_as_a_number(capsys, tmp_path):
    rows = [ln for ln in RESNET_PROFILE.read_text().splitlines() if not ln.startswith("#")][:5]
    rows = [rows[0] + ",status"] + [r + ",ok" for r in rows[1:]]
    rows[2] = rows[2][: -len(",ok")] + ",weird"
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    assert main(["inspect", str(path)]) == 0
    assert "1 failed (status=weird: 1)" in capsys.readouterr().out
    assert main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["idle_power_w"] == 1.25 and summary["metadata"]["idle_power_w"] == "1.25"


def test_written_files_follow_the_umask_and_keep_their_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(str(tmp_path / "new.csv"), "x\n")
        assert os.stat(tmp_path / "new.csv").st_mode & 0o777 == 0o644
        os.umask(0o077)
        atomic_write_text(str(tmp_path / "private.csv"), "x\n")
        assert os.stat(tmp_path / "private.csv").st_mode & 0o777 == 0o600
        os.umask(0o022)
        os.chmod(tmp_path / "private.csv", 0o640)
        atomic_write_text(str(tmp_path / "private.csv"), "y\n")  # a rewrite keeps its mode
        assert os.stat(tmp_path / "private.csv").st_mode & 0o777 == 0o640
        atomic_write_text(str(tmp_path / "given.csv"), "z\n", mode=0o600)
        assert os.stat(tmp_path / "given.csv").st_mode & 0o777 == 0o600
    finally:
        os.umask(old)  # the umask is the process's: restored for the next test


def test_a_cache_folder_that_is_a_file_and_a_prior_that_is_not_there_are_refused(capsys, tmp_path):
    a_file = tmp_path / "f.csv"
    a_file.write_text("x\n")
    one_line(capsys, ["data", "list", "--data-dir", str(a_file)], "not a directory")
    one_line(
        capsys,
        ["efficiencies", str(tmp_path), "--efficiency", str(tmp_path / "none.csv")],
        "argument --efficiency:",
        "efficiency CSV not found",
    )


# ------------------------------------------- fleet keys that mean nothing alone (stop 44 audit)


def fleet_with(tmp: Path, run_extra: str = "", device_extra: str = "budget_w = 5") -> Path:
    """One Nano replaying resnet18, with lines added to ``[run]`` and to its device table."""
    path = tmp / "fleet.toml"
    path.write_text(
        f'[run]\nmodel = "resnet18"\nefficiency = "{RESNET_PROXY}"\ntarget_accuracy = 0.8\n'
        f'{run_extra}\n\n[[devices]]\nname = "n"\ntype = "jetson-nano"\n{device_extra}\n'
        f'profile = "{RESNET_PROFILE}"\ndata = "{EFFICIENCY / "resnet18_cinic.csv"}"\n'
    )
    return path


@pytest.mark.parametrize("run_extra, device_extra, needle", [
    ("", "budget_w = 1e300", "device #1 (n): budget_w: 1e+300 is above the largest budget "
     "(100000 W); for no limit write none"),
    ("", "budget_w = 5\nbudget_dwell_s = 60",
     "device #1 (n): budget_dwell_s applies to budget_trace, which is not given"),
    ('input_shape = "banana"', "budget_w = 5", "[run] input_shape: bad input shape 'banana'"),
    ('input_shape = "64"', "budget_w = 5", "[run] input_shape: model resnet18 takes images"),
    ('weights = "missing.pt"', "budget_w = 5", "[run] weights: file not found: missing.pt"),
    ('efficiency_store = "/dev/null/x"', "budget_w = 5",
     "[run] efficiency_store: /dev/null/x lies under /dev/null, which is not a directory"),
    ("", f'budget_trace = "{ROOT / "simulations"}"',
     f"device #1 (n): budget_trace: {ROOT / 'simulations'} is a directory"),
])  # fmt: skip
def test_a_fleet_key_is_refused_when_the_file_is_read_not_when_the_round_needs_it(
    capsys, tmp_path, run_extra, device_extra, needle
):
    """Each was taken by the fleet reader: ignored (a dwell without a trace), never looked at
    by the direct engine (weights, a shape), or refused later naming a state file (1e300 W) or
    a bare path (a store under a file, a trace folder)."""
    fleet = fleet_with(tmp_path, run_extra, device_extra)
    run_dir = tmp_path / "run"
    one_line(capsys, ["simulate", "--fleet", str(fleet), "--engine", "direct",
                      "--run-dir", str(run_dir)], needle)  # fmt: skip
    assert not run_dir.exists()


def test_a_budget_trace_beside_a_budget_is_named_as_written(capsys, tmp_path):
    trace = ROOT / "simulations" / "traces" / "clear_day_10w.csv"
    fleet = fleet_with(tmp_path, device_extra=f'budget_w = 99\nbudget_trace = "{trace}"')
    one_line(capsys, ["whatif", "--fleet", str(fleet), "--budgets", "5"],
             "budget_w 99 disagrees with budget_trace's first step")  # fmt: skip


def test_simulate_refuses_a_device_of_another_type_before_its_round(capsys, tmp_path):
    """It ran around it: the row said ``error`` and the command exited 0."""
    fleet = fleet_with(tmp_path)
    fleet.write_text(fleet.read_text().replace("jetson-nano", "jetson-tx2nx"))
    run_dir = tmp_path / "run"
    one_line(capsys, ["simulate", "--fleet", str(fleet), "--engine", "direct",
                      "--run-dir", str(run_dir)],
             f"device n: type 'jetson-tx2nx' but its profile {RESNET_PROFILE} was recorded "
             "on 'jetson-nano'")  # fmt: skip
    assert not run_dir.exists()


def test_a_round_with_a_broken_device_does_not_exit_as_a_clean_one():
    from simulations.cli import failed_exit

    rows = [{"device": "a", "status": "ok"}, {"device": "b", "status": "infeasible"}]
    assert failed_exit({"devices": rows}) == 0  # an outcome the report explains
    assert failed_exit({"devices": [*rows, {"device": "c", "status": "error"}]}) == 1


@pytest.mark.parametrize("argv, needle", [
    (["whatif", "--budgets", "1:1e5:0.001"], "99,999,001 steps; at most 10,000"),
    (["whatif", "--budgets", "5,,7"], "--budgets '5,,7': an empty item"),
    (["whatif", "--budgets", "-1"], "'-1' is not a budget; expected watts > 0"),
    (["whatif", "--budgets", "3:10:0"], "expected START:STOP:STEP with STEP > 0, STOP >= START"),
    (["inspect", str(RESNET_PROFILE), "--budgets", ""], "--budgets: '' is not a budget"),
    (["inspect", str(RESNET_PROFILE), "--budgets", "4.5,4.5 W"],
     "--budgets: 4.5 W is named twice in '4.5,4.5 W'"),
])  # fmt: skip
def test_a_budget_list_reads_every_item_and_counts_a_sweep_before_building_it(
    capsys, tmp_path, argv, needle
):
    """``1:1e9:1`` filled 24 GB before its count was checked; ``5,,7`` was a shorter list."""
    if argv[0] == "whatif":
        argv = [*argv, "--fleet", str(fleet_with(tmp_path))]
    one_line(capsys, argv, needle)


def test_a_deadline_the_objective_does_not_take_is_said_not_refused(capsys, tmp_path):
    """``whatif --objective deadline`` reads ``[run] deadline_s`` from a fleet whose own
    objective is time; ``simulate`` of that fleet says the deadline is not used."""
    fleet = fleet_with(tmp_path, 'objective = "time"\ndeadline_s = 7000')
    argv = ["simulate", "--fleet", str(fleet), "--engine", "direct", "--json"]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert (
        f"{fleet}: [run] deadline_s = 7000 is not used: objective 'time' takes no deadline" in err
    )
    argv = ["whatif", "--fleet", str(fleet), "--budgets", "5", "--objective", "deadline", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["steps"][0]["deadline_s"] == 7000


def test_run_paths_resolve_as_their_readers_do(capsys, tmp_path, monkeypatch):
    """Weights beside the real file of a symlinked fleet file are found (the check looked
    beside the link); a store written with ``~`` is checked where it will be (the check
    looked under the fleet's folder); a shape for a model only a board knows is its form only."""
    from fleet.config.fleetfile import load_fleet
    from fleet.training.task import run_weights_path

    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir(), link.mkdir()
    (real / "w.pft").write_bytes(b"")
    fleet = fleet_with(real, 'weights = "w.pft"')
    (link / "fleet.toml").symlink_to(fleet)
    loaded = load_fleet(link / "fleet.toml")
    assert run_weights_path(loaded.run, loaded.path) == str(real / "w.pft")
    home = tmp_path / "home"
    home.mkdir()
    (home / "afile").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    fleet.write_text(fleet.read_text().replace('weights = "w.pft"', 'efficiency_store = "~/afile"'))
    one_line(
        capsys,
        ["whatif", "--fleet", str(fleet), "--budgets", "5"],
        f"[run] efficiency_store: ~/afile is not a directory (resolved to {home / 'afile'})",
    )
    fleet.write_text(
        fleet.read_text()
        .replace('efficiency_store = "~/afile"', 'input_shape = "64"')
        .replace('"resnet18"', '"transformer"')
    )
    assert load_fleet(fleet).run.input_shape == "64"  # fmt: skip


def test_hardware_devices_are_the_boards_in_a_round_and_need_local_files_in_a_sweep(
    capsys, tmp_path
):
    """``simulate`` passes a hardware device over (its profile may be a path on the board);
    ``whatif`` replays every device here, so one without a local trace is refused, not counted
    among those that did not train."""
    from fleet.config.fleetfile import load_fleet
    from fleet.rounds.preflight import check_devices

    fleet = fleet_with(tmp_path, device_extra='budget_w = 5\nclient = "hardware"')
    text = fleet.read_text()
    on_board = fleet.with_name("on_board.toml")
    on_board.write_text(text.replace(str(RESNET_PROFILE), "/home/nvidia/nano_resnet18.csv"))
    assert check_devices(load_fleet(on_board), every_device_replayed=False) == []
    no_data = fleet.with_name("no_data.toml")
    no_data.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("data")))
    one_line(capsys, ["whatif", "--fleet", str(no_data), "--budgets", "5"],
             "device n: no convergence trace (data) here to replay")  # fmt: skip


def test_a_fleet_shape_its_profiles_were_not_recorded_at_is_said(capsys, tmp_path):
    """``[run] input_shape`` keys the profiles; a replayed profile of another shape ran
    without a word (as another model's is said, this is said)."""
    fleet = fleet_with(tmp_path, 'input_shape = "3x64x64"')
    argv = ["simulate", "--fleet", str(fleet), "--engine", "direct", "--json"]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"powerfleet simulate: note: warning: device n: [run] input_shape is 3x64x64 but its "
        f"profile {RESNET_PROFILE} was recorded at 3x32x32"
    ]
    huge_lr = fleet_with(tmp_path, "lr_ref = 1e300")
    one_line(capsys, ["whatif", "--fleet", str(huge_lr), "--budgets", "5"],
             "lr_ref' must be a learning rate > 0 and <= 10")  # fmt: skip


def test_profiles_on_a_store_not_made_yet_says_so_and_on_a_file_refuses(capsys, tmp_path):
    assert main(["profiles", str(tmp_path / "store")]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (
        f"powerfleet profiles: note: store {tmp_path / 'store'} does not exist yet "
        "(no profile stored)"
    )  # no empty table under it
    (tmp_path / "file").write_text("x")
    one_line(capsys, ["profiles", str(tmp_path / "file")], "file: not a directory")
