"""`powerfleet profile --backend jetson --sysfs-root DIR` end to end on board-shaped trees.

The trees are real files laid out like a Nano (iio ina3221x) and an Orin (hwmon ina3221); the
command runs as a user would (a subprocess), trains small_cnn on the CPU at every locked clock,
and must leave the devfreq node exactly as it found it.
"""

import json

import pytest

from fleet.profile import load_profile
from tests.conftest import run_cli
from tests.test_agent_jetson import NANO_HZ, ORIN_HZ, make_nano, make_orin, read


def snapshot(node):
    return {k: read(node / k) for k in ("min_freq", "max_freq", "governor")}


@pytest.mark.parametrize(
    "board,hz,watts", [("nano", NANO_HZ, 4.321), ("orin", ORIN_HZ, 5.072 * 1.471)]
)
def test_full_grid_profile_on_a_board_tree(tmp_path, board, hz, watts):
    root = tmp_path / "root"
    node = (make_nano if board == "nano" else make_orin)(root)
    before = snapshot(node)
    out = tmp_path / "profile.csv"
    r = run_cli(
        "profile",
        "--backend",
        "jetson",
        "--sysfs-root",
        str(root),
        "--model",
        "small_cnn",
        "--input-shape",
        "3x16x16",
        "--batch-sizes",
        "2,4",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--sampler-hz",
        "50",
        "--out",
        str(out),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["rows"] == 2 * len(hz)
    prof = load_profile(out)
    assert prof.freqs_mhz == sorted(h / 1e6 for h in hz)
    assert prof.batch_sizes == [2, 4]
    # the rail reads a constant here, so every peak is exactly the board input power
    assert {round(p.peak_power_w, 3) for p in prof.points} == {round(watts, 3)}
    assert snapshot(node) == before
    assert "source=measured" in out.read_text()


def test_staircase_profile_probes_fewer_points_and_restores(tmp_path):
    root = tmp_path / "root"
    node = make_nano(root)
    before = snapshot(node)
    out = tmp_path / "stair.csv"
    r = run_cli(
        "profile",
        "--backend",
        "jetson",
        "--sysfs-root",
        str(root),
        "--model",
        "small_cnn",
        "--input-shape",
        "3x16x16",
        "--batch-sizes",
        "2,4",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--budget-w",
        "5",
        "--out",
        str(out),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # 4.321 W fits 5 W everywhere: b=4 climbs all 6 clocks, b=2 starts at the top: 7 probes
    assert s["probes"] == len(NANO_HZ) + 1 and s["grid_size"] == 2 * len(NANO_HZ)
    assert snapshot(node) == before


def test_missing_devfreq_node_is_one_line(tmp_path):
    (tmp_path / "root/sys/class/devfreq").mkdir(parents=True)
    r = run_cli(
        "profile",
        "--backend",
        "jetson",
        "--sysfs-root",
        str(tmp_path / "root"),
        "--model",
        "small_cnn",
        "--batch-sizes",
        "2",
        "--out",
        str(tmp_path / "x.csv"),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "devfreq" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()
