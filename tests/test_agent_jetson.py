"""Jetson backend and exit guard against fake sysfs trees built from real files.

The trees mirror what Nano (JetPack 4, iio ina3221x), TX2 NX (JetPack 4, iio ina3221x) and
Orin (JetPack 5+, hwmon ina3221) expose; every path goes through ``sysfs_root``.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from fleet.agent.devices import DeviceError, open_backend
from fleet.agent.devices.guard import install_restore_handlers, locked
from fleet.agent.devices.jetson import JetsonBackend
from simulations.virtual_boards import BOARDS, put
from simulations.virtual_boards import write_devfreq as devfreq
from simulations.virtual_boards import write_hwmon_rails as hwmon_rails
from simulations.virtual_boards import write_iio_rails as iio_rails
from simulations.virtual_jetson import build_board
from simulations.virtual_kernel import kernel_accepts

REPO = Path(__file__).resolve().parents[1]

NANO_HZ = list(BOARDS["nano"].freqs_hz)
TX2_HZ = list(BOARDS["tx2nx"].freqs_hz)
ORIN_HZ = list(BOARDS["orin"].freqs_hz)


def make_nano(root: Path) -> Path:
    return build_board(root, "nano").node


def make_tx2nx(root: Path) -> Path:
    return build_board(root, "tx2nx").node


def make_orin(root: Path) -> Path:
    return build_board(root, "orin").node


def read(path: Path) -> str:
    return path.read_text().strip()


# -- discovery ----------------------------------------------------------------------------------
def test_nano_discovery_and_describe(tmp_path):
    make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.node.name == "57000000.gpu" and b.node.of_node == "gpu"
    assert b.rail.name == "POM_5V_IN" and b.rail.layout == "iio-ina3221x"
    d = b.describe()
    assert d["backend"] == "jetson" and d["devfreq"] == "57000000.gpu" and d["of_node"] == "gpu"
    assert d["rail"] == "POM_5V_IN" and d["sensor"] == "iio-ina3221x"
    assert d["board"] == "NVIDIA Jetson Nano Developer Kit"


def test_tx2nx_discovery(tmp_path):
    make_tx2nx(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.node.name == "17000000.gp10b"
    assert b.rail.name == "VDD_IN"  # the TX2 NX has no POM_5V_* rails
    assert b.read_power_w() == pytest.approx(6.123)
    assert b.frequencies()[-1] == pytest.approx(1300.5)


def test_orin_discovery_hwmon_and_dedup(tmp_path):
    make_orin(tmp_path)
    b = open_backend("jetson", sysfs_root=str(tmp_path))
    assert b.node.name == "17000000.ga10b" and b.node.of_node == ""
    assert b.rail.name == "VDD_IN" and b.rail.layout == "hwmon-ina3221"
    assert b.read_power_w() == pytest.approx(5072 * 1471 / 1e6)  # mV x mA -> W
    with pytest.raises(DeviceError) as err:
        JetsonBackend(sysfs_root=str(tmp_path), rail="nope")
    # Each rail listed once although the hwmon device is reachable by two paths.
    assert str(err.value).count("VDD_SOC") == 1


def test_hwmon_found_through_sys_class(tmp_path):
    devfreq(tmp_path, "17000000.ga10b", ORIN_HZ)
    hwmon_rails(tmp_path, "", [("VDD_IN", 5000, 2000)], via_class=True)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.read_power_w() == pytest.approx(10.0)


def test_explicit_gpu_node(tmp_path):
    make_orin(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path), gpu_node="15340000.vic")
    assert b.frequencies() == [115.2, 729.6]
    with pytest.raises(DeviceError, match="'nope' not found.*17000000.ga10b"):
        JetsonBackend(sysfs_root=str(tmp_path), gpu_node="nope")


def test_missing_devfreq_node_error_names_directory(tmp_path):
    iio_rails(tmp_path, "6-0040", [("POM_5V_IN", 1, 1, 1)])
    devfreq(tmp_path, "15340000.vic", [115200000])
    with pytest.raises(DeviceError) as err:
        JetsonBackend(sysfs_root=str(tmp_path))
    msg = str(err.value)
    assert str(tmp_path / "sys/class/devfreq") in msg
    assert "57000000.gpu" in msg and "17000000.ga10b" in msg and "15340000.vic" in msg
    assert "\n" not in msg


def test_frequencies_ascending_mhz(tmp_path):
    make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.frequencies() == [h / 1e6 for h in NANO_HZ]
    assert b.frequencies()[:3] == [76.8, 153.6, 230.4] and b.frequencies()[-1] == 921.6


# -- power rails --------------------------------------------------------------------------------
def test_rail_default_and_by_name_mw(tmp_path):
    make_nano(tmp_path)
    assert JetsonBackend(sysfs_root=str(tmp_path)).read_power_w() == pytest.approx(4.321)
    gpu = JetsonBackend(sysfs_root=str(tmp_path), rail="pom_5v_gpu")  # case-insensitive
    assert gpu.rail.name == "POM_5V_GPU" and gpu.read_power_w() == pytest.approx(1.0)


def test_iio_without_power_file_uses_voltage_times_current(tmp_path):
    devfreq(tmp_path, "57000000.gpu", NANO_HZ, of_name="gpu")
    iio_rails(tmp_path, "6-0040", [("POM_5V_IN", 0, 5080, 1200)], power=False)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.read_power_w() == pytest.approx(5.080 * 1.200)


def test_unknown_rail_lists_rails_found(tmp_path):
    make_nano(tmp_path)
    with pytest.raises(DeviceError) as err:
        JetsonBackend(sysfs_root=str(tmp_path), rail="VDD_GPU_SOC")
    msg = str(err.value)
    assert "'VDD_GPU_SOC' not found" in msg
    assert "POM_5V_IN, POM_5V_GPU, POM_5V_CPU" in msg


def test_no_rail_at_all(tmp_path):
    # No sensor is not a construction error (the clocks still lock); the reason names where
    # it looked, and power-dependent work refuses with it.
    devfreq(tmp_path, "57000000.gpu", NANO_HZ, of_name="gpu")
    b = JetsonBackend(sysfs_root=str(tmp_path))
    assert b.read_power_w() is None and b.rail is None
    assert "no power sensor found" in b.power_unavailable and "ina3221x" in b.power_unavailable
    assert b.describe()["power"].startswith("none (no power sensor found")


def test_no_board_input_rail_asks_for_a_name(tmp_path):
    devfreq(tmp_path, "57000000.gpu", NANO_HZ, of_name="gpu")
    iio_rails(tmp_path, "6-0040", [("POM_5V_GPU", 1000, 5000, 200)])
    # 57000000.gpu is a Nano's GPU: its total (POM_5V_IN) is missing, and the rails found are named
    with pytest.raises(DeviceError, match="POM_5V_IN of its power total .*POM_5V_GPU"):
        JetsonBackend(sysfs_root=str(tmp_path))
    assert JetsonBackend(sysfs_root=str(tmp_path), rail="POM_5V_GPU").read_power_w() == 1.0


# -- locking --------------------------------------------------------------------------------------
def test_lock_write_order_and_restore(tmp_path):
    d = make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    mn, mx = str(d / "min_freq"), str(d / "max_freq")

    b.lock(614.4)  # raising the floor (76.8 -> 614.4): max first
    assert b.writes == [(mx, "614400000"), (mn, "614400000")]
    assert read(d / "min_freq") == read(d / "max_freq") == "614400000"

    b.writes.clear()
    b.lock(230.4)  # below the current floor: min first
    assert b.writes == [(mn, "230400000"), (mx, "230400000")]

    b.writes.clear()
    b.lock(921.6)  # above the current ceiling: max first
    assert b.writes == [(mx, "921600000"), (mn, "921600000")]

    b.writes.clear()
    b.restore()  # back to 76.8..921.6 (originals, not the intermediate locks)
    assert b.writes == [(mx, "921600000"), (mn, "76800000")]
    assert read(d / "min_freq") == "76800000" and read(d / "max_freq") == "921600000"
    assert read(d / "governor") == "nvhost_podgov"

    b.writes.clear()
    b.restore()  # idempotent: nothing more to write
    assert b.writes == []


def test_every_write_sequence_is_kernel_valid(tmp_path):
    d = make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    for f in [921.6, 76.8, 384.0, 153.6, 614.4, 76.8]:
        b.lock(f)
    b.restore()
    assert kernel_accepts(b.writes, NANO_HZ[0], NANO_HZ[-1])
    # The naive order (always min then max) would have been rejected on the first raise.
    naive = [(str(d / "min_freq"), "921600000"), (str(d / "max_freq"), "921600000")]
    assert not kernel_accepts(naive, NANO_HZ[0], 614400000)


def test_restore_puts_back_governor_changed_meanwhile(tmp_path):
    d = make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    b.lock(384.0)
    put(d / "governor", "userspace\n")
    b.restore()
    assert read(d / "governor") == "nvhost_podgov"
    assert (str(d / "governor"), "nvhost_podgov") in b.writes


def test_unavailable_frequency_lists_valid(tmp_path):
    make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    with pytest.raises(DeviceError) as err:
        b.lock(500.0)
    msg = str(err.value)
    assert "500.0 MHz is not in" in msg and "available_frequencies" in msg
    assert "76.8, 153.6, 230.4, 307.2, 384, 460.8, 537.6, 614.4" in msg and "921.6" in msg
    assert b.writes == []


def test_restore_after_exception_in_with(tmp_path):
    d = make_nano(tmp_path)
    with pytest.raises(RuntimeError):
        with JetsonBackend(sysfs_root=str(tmp_path)) as b:
            b.lock(230.4)
            assert read(d / "max_freq") == "230400000"
            raise RuntimeError("training blew up")
    assert read(d / "min_freq") == "76800000" and read(d / "max_freq") == "921600000"

    b2 = JetsonBackend(sysfs_root=str(tmp_path))
    with pytest.raises(ValueError):
        with locked(b2, 614.4):
            assert read(d / "min_freq") == "614400000"
            raise ValueError("again")
    assert read(d / "min_freq") == "76800000" and read(d / "max_freq") == "921600000"


def test_write_failure_is_a_device_error_naming_the_path(tmp_path):
    d = make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    b.lock(230.4)
    (d / "max_freq").unlink()
    (d / "max_freq").mkdir()  # a real failure that happens as root too
    with pytest.raises(DeviceError) as err:
        b.lock(614.4)
    assert str(err.value).startswith("cannot write {}: ".format(d / "max_freq"))


def test_permission_denied_message(tmp_path):
    """A real EACCES: chmod 0444 when not root; as root, drop the effective uid temporarily."""
    base = tempfile.mkdtemp(prefix="pf-perm-")
    try:
        os.chmod(base, 0o755)
        root = Path(base)
        d = make_nano(root)
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
        b = JetsonBackend(sysfs_root=base)
        b.lock(230.4)
        os.chmod(str(d / "max_freq"), 0o444)
        dropped = False
        if os.geteuid() == 0:
            try:
                os.seteuid(65534)
                dropped = True
            except OSError:
                pytest.skip("running as root and cannot drop privileges to test EACCES")
        try:
            with pytest.raises(DeviceError) as err:
                b.lock(614.4)
        finally:
            if dropped:
                os.seteuid(0)
        assert str(err.value) == (
            "cannot write {}: permission denied; run as root or grant write access "
            "(e.g. udev rule/chmod)".format(d / "max_freq")
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- exit paths -----------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import signal, sys, time
    # SIGINT as an interactive shell leaves it (a background job, e.g. CI under nohup, starts
    # with it ignored, and the guard rightly keeps an ignored signal ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    from fleet.agent.devices.guard import install_restore_handlers
    b = JetsonBackend(sysfs_root=sys.argv[1])
    install_restore_handlers(b)
    b.lock(float(sys.argv[2]))
    print("locked", flush=True)
    # Hold the clock until the signal. Not a blocking read of stdin: Python runs a handler only
    # between bytecodes, and a signal landing after the print's last check but before read()
    # blocks would wait for input that never comes (seen once in CI). The loop's jump back
    # checks for pending signals; sleep() is cut short by one.
    while True:
        time.sleep(0.05)
    """
).format(repo=str(REPO))


@pytest.mark.parametrize("sig,codes", [(signal.SIGTERM, (143, -15)), (signal.SIGINT, None)])
def test_restore_on_signal_in_real_process(tmp_path, sig, codes):
    d = make_nano(tmp_path)
    put(d / "governor", "nvhost_podgov\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), "614.4"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert read(d / "min_freq") == read(d / "max_freq") == "614400000"
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
    err = proc.stderr.read()
    if codes is not None:
        assert rc in codes, err
    else:
        assert rc != 0 and "KeyboardInterrupt" in err  # SIGINT chains to Python's own handler
    assert read(d / "min_freq") == "76800000"
    assert read(d / "max_freq") == "921600000"
    assert read(d / "governor") == "nvhost_podgov"


def test_handlers_chain_previous_and_uninstall(tmp_path):
    d = make_nano(tmp_path)
    b = JetsonBackend(sysfs_root=str(tmp_path))
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(read(d / "min_freq")))
    try:
        uninstall = install_restore_handlers(b, signals=(signal.SIGUSR1,))
        b.lock(614.4)
        os.kill(os.getpid(), signal.SIGUSR1)
        # The previous handler ran after the restore: it saw the original floor.
        assert seen == ["76800000"]
        uninstall()
        b.lock(614.4)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == ["76800000", "614400000"]  # no restore once uninstalled
        b.restore()
    finally:
        signal.signal(signal.SIGUSR1, old)


@pytest.mark.parametrize(
    "node,of_node,board,expected",
    [
        ("57000000.gpu", "gpu", "NVIDIA Jetson Nano Developer Kit", "jetson-nano"),
        ("17000000.gp10b", "gp10b", "NVIDIA Jetson TX2 NX Developer Kit", "jetson-tx2nx"),
        ("17000000.gp10b", "gp10b", "quill", "jetson-tx2"),  # quill is the TX2, not the TX2 NX
        ("17000000.gp10b", "gp10b", "", ""),  # TX2 and TX2 NX share gp10b: the node cannot tell
        ("17000000.ga10b", "", "NVIDIA Jetson Orin Nano Developer Kit", "jetson-orin-nano"),
        ("17000000.gpu", "gpu", "", "jetson-orin"),  # an Orin the table cannot place: the family
        ("15340000.vic", "", "", ""),
    ],
)
def test_device_type_names_match_the_fleet_types(node, of_node, board, expected):
    from fleet.agent.devices.board_identity import device_type

    assert device_type(node, of_node, board) == expected


def test_describe_names_the_device_type(tmp_path):
    make_nano(tmp_path)
    assert JetsonBackend(str(tmp_path)).describe()["device"] == "jetson-nano"
