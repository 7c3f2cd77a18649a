"""The board emulator itself: snapping, rejection, lag, modeled power, drift, noise, layouts."""

import statistics
import time

import pytest

from fleet.agent.devices.jetson import JetsonBackend
from simulations.devicemodel.fitted import WORKLOADS
from simulations.devicemodel.physics import mean_power_w
from simulations.virtual_boards import BOARDS
from simulations.virtual_jetson import HANG_GUARD_S, ClockRecorder, build_board, wait_for


@pytest.mark.slow
@pytest.mark.parametrize("process", [False, True])
def test_requests_snap_to_the_table_and_min_over_max_is_rejected(tmp_path, process):
    board = build_board(tmp_path, "nano")
    hz = board.freqs_hz
    with board.kernel(process=process, lag_s=0.0):
        (board.node / "max_freq").write_text(str(hz[3] + 1000))  # between two OPPs: down
        assert wait_for(lambda: board.clocks()["max_freq"] == hz[3], 3)
        (board.node / "min_freq").write_text(str(hz[1] + 1000))  # between two OPPs: up
        assert wait_for(lambda: board.clocks()["min_freq"] == hz[2], 3)
        (board.node / "min_freq").write_text(str(hz[5]))  # above max: EINVAL, file put back
        assert wait_for(lambda: board.status().get("rejected") == 1, 3)
        assert board.clocks()["min_freq"] == hz[2] and board.clocks()["max_freq"] == hz[3]


@pytest.mark.slow
def test_cur_freq_follows_with_the_configured_lag(tmp_path):
    board = build_board(tmp_path, "tx2nx")
    b = JetsonBackend(str(tmp_path), state_dir=str(tmp_path / "s"))
    with board.kernel(process=True, load=16, lag_s=0.25):
        assert wait_for(lambda: board.clocks()["cur_freq"] == max(board.freqs_hz), 3)
        t0 = time.monotonic()
        b.lock(318.75)
        assert b.wait_settled(timeout_s=HANG_GUARD_S)
        took = time.monotonic() - t0
        b.restore()
    # never sooner than the lag (a lower bound holds on any host; how much later is the host's)
    assert took >= 0.2


@pytest.mark.parametrize("kind", sorted(BOARDS))
def test_power_is_the_device_model_at_the_running_clock_with_drift(tmp_path, kind):
    board = build_board(tmp_path, kind, workload="resnet18")
    spec = BOARDS[kind]
    b = JetsonBackend(str(tmp_path), state_dir=str(tmp_path / "s"))
    f = sorted(board.freqs_hz)[2]
    with board.kernel(process=False, load=32, lag_s=0.0):
        b.lock(f / 1e6, settle=True)
        expected = mean_power_w(spec.device, WORKLOADS["resnet18"], 32, f / 1e6)
        assert wait_for(lambda: abs(b.read_power_w() - expected) < 0.003, 3)
        board.set_drift(add_w=0.8)
        assert wait_for(lambda: abs(b.read_power_w() - expected - 0.8) < 0.003, 3)
        board.set_drift(scale=1.5)
        assert wait_for(lambda: abs(b.read_power_w() - expected * 1.5) < 0.004, 3)
        board.set_drift()
        board.set_load(None)  # idle draws less than training
        assert wait_for(lambda: b.read_power_w() < expected - 0.3, 3)
        b.restore()


@pytest.mark.slow
def test_noise_has_the_configured_spread(tmp_path):
    board = build_board(tmp_path, "nano")
    with board.kernel(process=True, load=64, noise_w=0.1), ClockRecorder(board, 0.01) as rec:
        # 60 readings however long a loaded host takes to record them (the kernel's noise is
        # per tick; the recorder may read one tick twice, which only narrows the spread)
        assert wait_for(lambda: len(rec.seen) > 60, HANG_GUARD_S)
    watts = [r["power_w"] for r in rec.seen]
    assert 0.05 < statistics.pstdev(watts) < 0.2


def test_orin_is_hwmon_with_vdd_in(tmp_path):
    board = build_board(tmp_path, "orin")
    b = JetsonBackend(str(tmp_path), state_dir=str(tmp_path / "s"))
    assert b.rail.layout == "hwmon-ina3221" and b.rail.name == "VDD_IN"
    assert b.node.name == "17000000.ga10b"
    with board.kernel(process=False, load=None):
        assert wait_for(
            lambda: abs(b.read_power_w() - board.model_power_w(board.clocks()["cur_freq"])) < 0.003,
            3,
        )
