"""Every error before the work, in words, and the machines that are not Jetsons.

Each case runs the real `python -m fleet` as a user would: one line on stderr naming the
option or path and what is wrong, exit 2, no traceback, no ``[Errno N]``; for ``profile``,
nothing measured (no output file, no progress). Then ``restore`` and ``doctor`` on trees of
machines that are not Jetsons: a PC with an NVIDIA GPU and RAPL counters, a bare VM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def fleet(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *argv], capture_output=True, text=True, env=ENV,
        cwd=REPO, timeout=300,
    )  # fmt: skip


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "[Errno" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_profile_out_a_directory_fails_before_the_sweep(tmp_path):
    r = fleet("profile", "--backend", "cpu", "--model", "small_cnn", "--out", str(tmp_path))
    line = one_line_error(r, "--out", str(tmp_path), "is a directory")
    assert line.startswith("powerfleet profile: error:")
    assert r.stdout == ""  # no table, no "probed", nothing measured
    assert list(tmp_path.iterdir()) == []  # and nothing written


def test_profile_out_under_a_file_fails_before_the_sweep(tmp_path):
    (tmp_path / "f").write_text("x")
    r = fleet("profile", "--backend", "cpu", "--model", "small_cnn", "--out", f"{tmp_path}/f/p.csv")
    one_line_error(r, "--out", "is a file, not a directory")
    assert r.stdout == ""


@pytest.mark.parametrize("argv_tail, needles", [
    (["/bin/ls"], ["RUN_DIR", "/bin/ls", "not a directory"]),
    (["{tmp}/nothing"], ["RUN_DIR", "not found"]),
])  # fmt: skip
def test_report_on_what_is_not_a_run_directory(tmp_path, argv_tail, needles):
    r = fleet("report", *[a.format(tmp=tmp_path) for a in argv_tail])
    one_line_error(r, *needles)


def test_status_on_a_file(tmp_path):
    one_line_error(fleet("status", "/bin/ls"), "RUN_DIR", "not a directory")


def test_an_os_error_in_a_command_is_said_in_words(tmp_path):
    """report.json is a folder: the reader's IsADirectoryError reaches the top-level handler,
    which names the path and says what is wrong without ``[Errno 21]``."""
    (tmp_path / "report.json").mkdir()
    line = one_line_error(fleet("report", str(tmp_path)), str(tmp_path / "report.json"))
    assert "is a directory" in line


def test_train_inputs_are_checked_before_anything_runs(tmp_path):
    r = fleet(
        "train", "--backend", "cpu", "--model", "small_cnn", "--dataset", "mnist-5k",
        "--efficiency", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "run"),
    )  # fmt: skip
    one_line_error(r, "--efficiency", "efficiency CSV not found")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["train", "pretrain", "estimate", "noise-scale"])
def test_a_model_command_builds_its_parser_without_torch(command):
    """Every --model help lists the registry's names; they come from a torch-free list, so a
    command refused at its flags (here: none given) answers before torch's seconds of import."""
    code = (
        "import sys\n"
        "from fleet.cli import main\n"
        f"rc = main([{command!r}])\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300
    )
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr)
    assert "the following arguments are required" in r.stderr


def test_estimate_out_a_directory(tmp_path):
    r = fleet(
        "estimate", "--model", "small_cnn", "--dataset", "mnist-5k", "--target-accuracy", "0.5",
        "--out", str(tmp_path),
    )  # fmt: skip
    one_line_error(r, "--out", "is a directory", "efficiency CSV")


def test_the_describe_of_an_os_error_has_no_errno() -> None:
    from fleet.cli import describe
    from fleet.common.errors import InputError

    assert describe(IsADirectoryError(21, "Is a directory", "/tmp")) == "/tmp: is a directory"
    assert describe(PermissionError(13, "Permission denied")) == "permission denied"
    wrapped = InputError("x.csv: cannot write ([Errno 13] Permission denied: '/root/x')")
    assert describe(wrapped) == "x.csv: cannot write (/root/x: permission denied)"


# ------------------------------------------------------------------ machines that are not Jetsons


def pc_tree(root: Path, *, nvidia: bool, rapl: bool) -> Path:
    """A PC's /sys and /proc as doctor reads them: no devfreq GPU, no INA sensor."""
    (root / "sys/class/devfreq").mkdir(parents=True)
    (root / "proc").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD Ryzen 7 5800X\n")
    if nvidia:
        gpu = root / "proc/driver/nvidia/gpus/0000:01:00.0"
        gpu.mkdir(parents=True)
        (gpu / "information").write_text("Model: \t\t NVIDIA GeForce RTX 3060\nIRQ: 42\n")
    if rapl:
        pkg = root / "sys/class/powercap/intel-rapl:0"
        pkg.mkdir(parents=True)
        (pkg / "name").write_text("package-0\n")
        (pkg / "energy_uj").write_text("123456\n")
        (pkg / "max_energy_range_uj").write_text("262143328850\n")
    return root


@pytest.mark.parametrize("nvidia, rapl", [(True, True), (False, False)])
def test_doctor_on_a_pc_says_what_it_is_and_what_runs(tmp_path, nvidia, rapl):
    root = pc_tree(tmp_path / "root", nvidia=nvidia, rapl=rapl)
    r = fleet("doctor", "--sysfs-root", str(root))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(set(lines)), r.stdout  # no sentence said twice
    assert "not in the board table" not in r.stdout and "Board " not in r.stdout
    first = lines[0]
    assert first.startswith("Machine  not a Jetson: a PC with ")
    if nvidia:
        assert "an NVIDIA GPU (NVIDIA GeForce RTX 3060)" in first
    else:
        assert "no NVIDIA GPU" in first
    assert "AMD Ryzen 7 5800X" in first
    assert ("has RAPL power counters" if rapl else "has no RAPL power counters") in first
    commands = [line.strip() for line in lines if line.startswith("    ")]
    assert "powerfleet simulate --engine direct" in commands
    assert any(c.startswith("powerfleet profile --backend cpu ") for c in commands)
    assert "python -m simulations.virtual_jetson build /tmp/vboard --board nano" in commands
    assert "powerfleet doctor --sysfs-root /tmp/vboard" in commands

    j = fleet("doctor", "--sysfs-root", str(root), "--json")
    report = json.loads(j.stdout)
    # the keys a bug report always had, and the new ones
    assert {"sysfs_root", "board", "gpu", "power", "clock_state", "ready"} <= set(report)
    assert report["ready"]["profile"] is False
    m = report["machine"]
    assert m["kind"] == "pc" and m["nvidia_gpu"]["present"] is nvidia
    assert m["rapl"] == {
        "present": rapl, "packages": int(rapl), "readable": rapl,
        "powercap_root": str(root / "sys/class/powercap"),
    }  # fmt: skip
    assert m["nvidia_gpu"]["nvml"] is False  # a copied tree: NVML is not probed
    cpu = [
        c for c in report["can_run"] if c["command"].startswith("powerfleet profile --backend cpu")
    ]
    assert ("power from RAPL" in cpu[0]["what"]) is rapl


def test_restore_with_nothing_to_restore_on_a_pc_exits_0(tmp_path):
    root = pc_tree(tmp_path / "root", nvidia=False, rapl=False)
    r = fleet("restore", "--sysfs-root", str(root))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("powerfleet restore: nothing to restore")
    assert "not a Jetson" in lines[0]
    j = fleet("restore", "--sysfs-root", str(root), "--json")
    assert j.returncode == 0
    assert json.loads(j.stdout) == {
        "restored": False,
        "state_file": str(root / "var/lib/powerfleet/jetson-clocks.json"),
        "devfreq": None,
        "waited_s": 0.0,
    }
