"""`powerfleet profile --backend jetson --sysfs-root DIR` end to end on the virtual Jetson.

The trees are real files laid out like a Nano (iio ina3221x) and an Orin (hwmon ina3221), driven
by the emulator's kernel process: locks snap and settle with a lag, and the rail reports the
device model's power at the clock really running. The command runs as a user would (a
subprocess), trains small_cnn on the CPU at every locked clock, and must measure each point at
its own clock and leave min/max/governor exactly as it found them, all along the way.
"""

import json

import pytest

from fleet.core.profile import load_profile
from simulations.virtual_jetson import ClockRecorder, build_board
from tests.conftest import run_cli
from tests.hardware_helpers import SETTLE_GUARD_S
from tests.test_agent_jetson import NANO_HZ

LOAD = 4  # the batch size the emulated board is told is running (power follows it)


def profile_board(board, out, *extra: str):
    """`powerfleet profile` on the board's tree: small_cnn at 3x16x16, b=2 and 4, one step per
    point, no warm-up, points of 0.15 s and 3 samples, not the default 2 s and 40 (what is
    tested here is the sweep, not the sizing: tests/test_point_sizing.py) (``extra``: the
    mode's own flags), the summary as JSON."""
    return run_cli(
        "profile", "--backend", "jetson", "--sysfs-root", str(board.root),
        "--model", "small_cnn", "--input-shape", "3x16x16", "--batch-sizes", "2,4",
        "--settle-timeout-s", str(SETTLE_GUARD_S),  # the kernel stand-in answers when it runs
        "--steps", "1", "--warmup", "0", "--min-point-s", "0.15", "--min-power-samples", "3",
        *extra, "--out", str(out), "--json",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nano", "orin"])
def test_full_grid_profile_on_a_virtual_board(tmp_path, kind):
    board = build_board(tmp_path / "root", kind, workload="small_cnn")
    hz = board.freqs_hz
    before = board.bounds()
    out = tmp_path / "profile.csv"
    with board.kernel(process=True, load=LOAD, lag_s=0.05), ClockRecorder(board) as rec:
        r = profile_board(board, out, "--sampler-hz", "50")
        after = board.bounds()
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["rows"] == 2 * len(hz)
    prof = load_profile(out)
    assert prof.freqs_mhz == sorted(h / 1e6 for h in hz)
    assert prof.batch_sizes == [2, 4]
    # every point measured at its own clock: peak and mean are the model's power there (to the
    # sensor's 1 mA x 5 V resolution on hwmon; the
    # sampler never saw the previous clock's power, although cur_freq lags each lock by 50 ms)
    for p in prof.points:
        expected = board.model_power_w(round(p.freq_mhz * 1e6), LOAD)
        assert p.peak_power_w == pytest.approx(expected, abs=0.003), p
        assert p.mean_power_w == pytest.approx(expected, abs=0.003), p
    # over time: the pins the recorder saw are the table's (each clock's power above says it
    # was pinned; whether a 0.15 s pin falls between two polls is the host's), the governor
    # never changed, and the bounds came back to what they were
    pins = {c["min_freq"] for c in rec.seen if c["min_freq"] == c["max_freq"]}
    assert pins and pins <= set(hz)
    assert {c["governor"] for c in rec.seen} == {before["governor"]}
    assert after == before and rec.seen[-1]["min_freq"] == before["min_freq"]
    assert "source=virtual" in out.read_text()  # a virtual board says so: the host's times


@pytest.mark.slow
def test_staircase_profile_probes_fewer_points_and_restores(tmp_path):
    board = build_board(tmp_path / "root", "nano", workload="small_cnn")
    before = board.bounds()
    out = tmp_path / "stair.csv"
    # the modeled power fits 5 W at every clock, so b=4 climbs them all and b=2 starts at the top
    assert board.model_power_w(max(NANO_HZ), LOAD) < 5.0
    with board.kernel(process=True, load=LOAD):
        r = profile_board(board, out, "--budget-w", "5")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["probes"] == len(NANO_HZ) + 1 and s["grid_size"] == 2 * len(NANO_HZ)
    assert board.bounds() == before


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


@pytest.mark.slow
def test_profile_measures_the_idle_rail_before_the_sweep(tmp_path):
    """The board runs its load only while the profiler pins a clock (``load_while_pinned``), so
    before the sweep, at the owner's clocks, the rail is the model's idle power: the profile's
    ``idle_power_w`` must be that (the device model's idle_w plus the idle GPU's share at the
    lowest clock, 1.273 W on a Nano), not a training point's power."""
    board = build_board(tmp_path / "root", "nano", workload="small_cnn")
    out = tmp_path / "profile.csv"
    with board.kernel(process=True, load=LOAD, load_while_pinned=True, lag_s=0.05):
        r = profile_board(board, out, "--freqs", "921.6")
    assert r.returncode == 0, r.stderr
    idle = board.idle_power_w()
    assert idle == pytest.approx(board.spec.device.idle_w, abs=0.05)  # 1.25 W + 23 mW
    assert json.loads(r.stdout)["idle_power_w"] == pytest.approx(idle, abs=0.002)
    prof = load_profile(out)
    assert prof.idle_power_w == pytest.approx(idle, abs=0.002)
    # the sweep itself still measured the training load at the pinned clock
    for p in prof.points:
        assert p.mean_power_w == pytest.approx(
            board.model_power_w(round(p.freq_mhz * 1e6), LOAD), abs=0.003
        )
    assert "idle_window_s=1" in out.read_text()
