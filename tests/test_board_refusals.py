"""A board-side newcomer's mistakes: one line, exit 2, nothing written where it must not be.

Each case was found by trying the board's commands with bad input: ``--out /dev/full`` made
the device node a regular file, a NaN settle timeout waited forever, a replayed file with
negative times was written back as measured, another model's replayed numbers were relabelled,
a huge class count was a torch traceback, and a restore after a lock that failed at its first
write failed on a node it had nothing to write to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.agent.devices import DeviceError, options_for
from fleet.agent.devices.replay import ReplayBackend
from fleet.cli import main
from fleet.common.errors import InputError
from fleet.method.profile_io import atomic_write_text
from fleet.training.task import Task, build_for
from tests.conftest import ROOT
from tests.test_clocks_boards import board_tree

SMALL_CNN = ROOT / "simulations" / "profiles" / "nano_small_cnn.csv"
REPLAY = ["profile", "--backend", "replay", "--profile-csv", str(SMALL_CNN), "--batch-sizes", "4"]


def refused(capsys, argv: list[str], needle: str) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null here")
def test_out_refuses_a_device_node_and_writes_through_a_link(capsys, tmp_path):
    refused(capsys, [*REPLAY, "--model", "small_cnn", "--out", "/dev/null"],
            "/dev/null: not a regular file")  # fmt: skip
    assert not Path("/dev/null").is_file()  # still the device
    refused(capsys, [*REPLAY, "--model", "small_cnn", "--out", ""], "expected the path of")
    target = tmp_path / "target.csv"
    target.write_text("old\n")
    (tmp_path / "link.csv").symlink_to("target.csv")
    atomic_write_text(str(tmp_path / "link.csv"), "new\n")
    assert (tmp_path / "link.csv").is_symlink() and target.read_text() == "new\n"
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write_text("/dev/null", "x")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_a_backend_number_that_is_no_amount_is_refused(value):
    with pytest.raises(DeviceError, match=f"settle-timeout-s='{value}', expected a finite"):
        options_for("jetson", {"settle-timeout-s": value})
    with pytest.raises(DeviceError, match="gpu-index='-1', expected an integer >= 0"):
        options_for("nvml", {"gpu-index": "-1"})


@pytest.mark.parametrize("row, needle", [
    ("4,200,-0.1,5,4", "line 3: time_per_batch_s = '-0.1', expected a finite number > 0"),
    ("8,100,0.1,-5,-4", "line 3: peak_power_w = '-5', expected a finite number >= 0"),
    ("8,100,0.1,inf,4", "line 3: peak_power_w = 'inf', expected a finite number >= 0"),
    ("4,100,0.2,5,4", "line 3: duplicate point batch_size=4, freq_mhz=100"),
    ("4.5,100,0.2,5,4", "line 3: batch_size = '4.5', expected an integer"),
])  # fmt: skip
def test_replay_refuses_rows_inspect_refuses(tmp_path, row, needle):
    path = tmp_path / "p.csv"
    header = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"
    path.write_text(f"{header}\n4,100,0.1,5,4\n{row}\n")
    with pytest.raises(DeviceError, match=needle.replace("(", r"\(")):
        ReplayBackend(str(path))


def test_replay_keeps_the_recorded_shape_says_another_model_and_spares_its_file(capsys, tmp_path):
    out = tmp_path / "o.csv"
    assert main([*REPLAY, "--model", "resnet18", "--out", str(out), "--json"]) == 0
    err = capsys.readouterr().err
    assert (
        f"powerfleet profile: note: warning: --profile-csv {SMALL_CNN} was recorded for "
        "'small_cnn', not --model 'resnet18'"
    ) in err
    rows = [ln.split(",") for ln in out.read_text().splitlines() if not ln.startswith("#")]
    shape = rows[0].index("input_shape")
    assert {r[shape] for r in rows[1:]} == {"1x28x28"}  # the replayed file's, not 3x32x32
    copy = tmp_path / "copy.csv"
    copy.write_text(SMALL_CNN.read_text())
    before = copy.read_text()
    argv = ["profile", "--backend", "replay", "--profile-csv", str(copy), "--model", "small_cnn"]
    refused(capsys, [*argv, "--out", str(copy)], "is the replayed --profile-csv")
    assert copy.read_text() == before


def test_profile_refuses_a_class_count_no_head_could_hold(capsys, tmp_path):
    refused(capsys, ["profile", "--backend", "cpu", "--model", "small_cnn", "--num-classes",
                     "3000000000", "--out", str(tmp_path / "o.csv")],
            "--num-classes must be in [2, 1,000,000]")  # fmt: skip


def test_a_model_that_does_not_take_the_datasets_inputs_is_one_line():
    text = Task(train=(None, None), test=(None, None), kind="char", classes=96, input_shape="64")
    with pytest.raises(InputError, match=r"model small_cnn does not fit this dataset \(text, 64\)"):
        build_for(text, "small_cnn")


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "--model", "small_cnn", "--dataset", "mnist-5k", "--target-accuracy", "0.5",
      "--workers", "0"], "argument --workers: expected an integer >= 1, got '0'"),
    (["estimate", "--model", "small_cnn", "--dataset", "mnist-5k", "--target-accuracy", "0.5",
      "--ray-address", "bogus"], "expected auto, host:port or ray://host:port, got 'bogus'"),
    (["experiment", "paper", "--models", ","], "--models: expected a comma list of names"),
    (["experiment", "paper", "--devices", " , "], "--devices: expected a comma list of names"),
])  # fmt: skip
def test_counts_and_lists_are_refused_before_the_runs(capsys, tmp_path, argv, needle):
    refused(capsys, [*argv, "--out", str(tmp_path / "out")], needle)
    assert not (tmp_path / "out").exists()


def test_a_restore_after_a_lock_that_failed_at_its_first_write_writes_nothing(capsys, tmp_path):
    """The saved bounds are in place already (the lock never changed them): restore must not
    write a node it has nothing to write to (one that refuses writes would fail it), and must
    remove the state file."""
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 7)
    node = root / "sys/class/devfreq/17000000.gpu"
    before = {f: (node / f).read_text() for f in ("min_freq", "max_freq")}
    state = tmp_path / "state"
    repo = str(Path(__file__).resolve().parents[1])
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[3]);"
            "from fleet.agent.devices.clocklock import DevfreqClocks;"
            "c = DevfreqClocks(sys.argv[1], state_dir=sys.argv[2]);"
            "c.lock(c.frequencies()[1]); import os; os._exit(0)",
            str(root),
            str(state),
            repo,
        ],
        check=True,
    )  # fmt: skip  (killed while locked: the state file saved, the clocks left locked)
    assert (state / "jetson-clocks.json").exists()
    # ...as a lock that failed at its first write left them; spelled with a trailing blank no
    # write of ours makes, so a write, however fast, would show
    marked = {name: text.strip() + " \n" for name, text in before.items()}
    for name, text in marked.items():
        (node / name).write_text(text)
    assert main(["restore", "--sysfs-root", str(root), "--state-dir", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["restored"] is True
    assert {f: (node / f).read_text() for f in before} == marked  # nothing written
    assert not (state / "jetson-clocks.json").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--budget-dwell-s", "-1"], "--budget-dwell-s: expected seconds >= 0, got -1.0"),
    (["--start-s", "nan"], "--start-s: expected a second of the trace, got nan"),
    (["--start-s", "-5"], "--budget-trace: --start-s: -5 is outside the trace (0 to 50400 s)"),
])  # fmt: skip
def test_budget_feed_names_its_own_flags(capsys, tmp_path, extra, needle):
    trace = ROOT / "simulations" / "traces" / "clear_day_10w.csv"
    argv = ["budget-feed", "--budget-trace", str(trace), "--budget-file", str(tmp_path / "b")]
    refused(capsys, [*argv, *extra], needle)
    assert not (tmp_path / "b").exists()


def test_a_power_trace_reads_watts_as_budgets_are_written(tmp_path):
    from fleet.budgets.trace import load_trace

    path = tmp_path / "panel.csv"
    path.write_text("time_s,available_w\n0,4.5 W\n60,3W\n120,0\n")
    assert load_trace(path) == [(0.0, 4.5), (60.0, 3.0), (120.0, 0.0)]
    path.write_text("time_s,available_w\n0 W,4.5\n")  # a time is no wattage
    with pytest.raises(InputError, match=r"line 2: time_s='0 W' is not a number"):
        load_trace(path)


def test_doctor_says_a_missing_bound_file_is_missing_not_unwritable(capsys, tmp_path):
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 7)
    (root / "sys/class/devfreq/17000000.gpu/min_freq").unlink()
    assert main(["doctor", "--sysfs-root", str(root)]) == 0  # the survey ran
    out = capsys.readouterr().out
    assert "17000000.gpu: min - max 918" in out and "min_freq missing" in out
    assert "NOT writable" not in out
    assert "profile no: 17000000.gpu has no min_freq" in out


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "--eval-every", "0"], "argument --eval-every: expected an integer >= 1"),
    (["estimate", "--subset", "0"], "argument --subset: expected an integer >= 1"),
    (["estimate", "--lr-ref", "inf"], "argument --lr-ref: expected a finite number > 0"),
    (["noise-scale", "--small", "0"], "argument --small: expected an integer >= 1"),
    (["pretrain", "--batch-size", "0"], "argument --batch-size: expected an integer >= 1"),
])  # fmt: skip
def test_a_flag_is_named_as_typed_not_as_the_field_deep_in_the_run(capsys, tmp_path, argv, needle):
    """Each used to be said by a function of the run, under its own field's name
    (``eval_every_samples must be a positive integer``, ``train_set is empty``)."""
    common = ["--model", "small_cnn", "--dataset", "mnist-5k"]
    extra = {"estimate": ["--target-accuracy", "0.5"], "pretrain": ["--out", str(tmp_path / "w")]}
    refused(capsys, [argv[0], *common, *extra.get(argv[0], []), *argv[1:]], needle)


def test_replay_refuses_a_batch_size_its_file_never_recorded_when_asked_for_it(capsys, tmp_path):
    refused(
        capsys,
        [
            "profile",
            "--backend",
            "replay",
            "--profile-csv",
            str(SMALL_CNN),
            "--model",
            "small_cnn",
            "--batch-sizes",
            "4,5",
            "--out",
            str(tmp_path / "o.csv"),
        ],
        f"--batch-sizes: 5 not in --profile-csv {SMALL_CNN} (it holds 4, 8, 16, 32, 64, 128)",
    )
    assert not (tmp_path / "o.csv").exists()  # fmt: skip


def test_doctor_refuses_a_rail_the_board_does_not_have_as_profile_does(capsys, tmp_path):
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 7)
    needle = "--rail BOGUS: rail 'BOGUS' not found; rails found: VDD_IN, VDD_CPU_GPU_CV, VDD_SOC"
    refused(capsys, ["doctor", "--sysfs-root", str(root), "--rail", "VDD_IN+BOGUS"], "'BOGUS'")
    refused(capsys, ["doctor", "--sysfs-root", str(root), "--rail", "BOGUS"], needle)
    assert main(["doctor", "--sysfs-root", str(root), "--rail", "vdd_soc", "--json"]) == 0
    power = json.loads(capsys.readouterr().out)["power"]
    assert power["power_total"] == "named with --rail" and power["power_rails"] == ["VDD_SOC"]


@pytest.mark.parametrize("flag, value", [
    ("--steps", "50"), ("--warmup", "0"), ("--sampler-hz", "100"), ("--min-point-s", "1"),
    ("--min-power-samples", "5"),
])  # fmt: skip
def test_replay_refuses_a_flag_that_sizes_a_measurement(capsys, tmp_path, flag, value):
    """A replay returns the recorded numbers: ``--steps 50`` used to change nothing, silently."""
    out = tmp_path / "o.csv"
    argv = [*REPLAY, "--model", "small_cnn", "--out", str(out)]
    refused(capsys, [*argv, flag, value], f"{flag}: a replay measures nothing")
    assert not out.exists()
    assert main([*argv, "--json"]) == 0  # the same replay without it writes its rows
    assert json.loads(capsys.readouterr().out)["rows"] == 12  # b=4 at the Nano's 12 clocks
    assert out.read_text().count("\n4,") == 12


@pytest.mark.parametrize("command", ["profile", "train"])
def test_profile_and_train_sample_power_no_slower_than_one_floor(capsys, tmp_path, command):
    """The budget statistic of a sensor without a stated window is one sampling period, so a
    profile sampled slower than its run's guard would bound another statistic."""
    argv = {
        "profile": [*REPLAY, "--model", "small_cnn", "--out", str(tmp_path / "o.csv")],
        "train": ["train", "--backend", "replay", "--profile-csv", str(SMALL_CNN),
                  "--model", "small_cnn", "--dataset", "mnist-5k", "--budget-w", "5",
                  "--efficiency", str(ROOT / "simulations/efficiency/resnet18_cifar10-proxy.csv")],
    }[command]  # fmt: skip
    refused(capsys, [*argv, "--sampler-hz", "0.5"], "--sampler-hz must be >= 20")
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("command", ["profile", "train", "predict", "estimate", "noise-scale"])
@pytest.mark.parametrize("sizes, needle", [
    ("4,8,4", "argument --batch-sizes: 4 is named twice in '4,8,4'"),
    ("4,x", "argument --batch-sizes: expected integers > 0, got 'x'"),
    ("4,2.5", "argument --batch-sizes: expected integers > 0, got '2.5'"),
    (" , ", "argument --batch-sizes: expected a comma-separated list"),
])  # fmt: skip
def test_every_command_reads_a_batch_size_list_alike(capsys, command, sizes, needle):
    """Duplicates were deduplicated by four commands and refused by ``estimate``."""
    refused(capsys, [command, "--batch-sizes", sizes], needle)


def test_a_list_of_clocks_is_sorted_and_refuses_what_is_no_clock():
    from fleet.cli.checks import number_list

    assert number_list(False)("918, 306.5,612") == [306.5, 612.0, 918.0]
    assert number_list(True)("64,4,16") == [4, 16, 64]
    for bad in ("0", "-3", "nan", "inf", "1e400"):
        with pytest.raises(Exception, match="expected numbers > 0"):
            number_list(False)(bad)


def test_replay_refuses_an_input_shape_its_file_did_not_record(capsys, tmp_path):
    """``--input-shape 3x32x32`` on a 1x28x28 recording wrote its rows relabelled, exit 0."""
    out = tmp_path / "o.csv"
    argv = [*REPLAY, "--model", "small_cnn", "--out", str(out)]
    refused(capsys, [*argv, "--input-shape", "3x32x32"],
            f"--input-shape 3x32x32: --profile-csv {SMALL_CNN} recorded 1x28x28")  # fmt: skip
    assert not out.exists()
    assert main([*argv, "--input-shape", "1x28x28"]) == 0  # its own shape, said again: fine
    assert ",small_cnn,1x28x28," in out.read_text()


@pytest.mark.parametrize("flag, value, needle", [
    ("--lr-ref", "1e300", "--lr-ref must be > 0 and <= 10, got 1e+300"),
    ("--budget-schedule", "0:5,1e300:4",
     "time '1e300' s is after ten years of training (3.1536e+08 s)"),
])  # fmt: skip
def test_a_learning_rate_or_a_step_no_run_could_reach_is_refused(capsys, flag, value, needle):
    argv = ["train", "--backend", "replay", "--profile-csv", str(SMALL_CNN), "--model",
            "small_cnn", "--dataset", "mnist-5k", "--efficiency",
            str(ROOT / "simulations/efficiency/resnet18_cifar10-proxy.csv")]  # fmt: skip
    if flag != "--budget-schedule":
        argv += ["--budget-w", "5"]
    refused(capsys, [*argv, flag, value], needle)
