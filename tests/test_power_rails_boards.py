"""Power measurement on every board row: the rails found, the ones summed, and boards with none.

Each test writes a board's sysfs tree as real files (device-tree identity, GPU devfreq node,
power monitors in the driver layout its JetPack uses) and builds the real Jetson backend on it.
The numbers asserted are hand-computed from the values written: a mW file is W x 1000, hwmon is
mV x mA, the INA238's ``power1_input`` is microwatts. Where a board's input power is a sum
(AGX Xavier, AGX Orin) the rails left out (an ``NC`` channel, a disabled one with no label, the
"sum of shunt voltages" channel, the AGX Orin rail fed from another) carry values that would
change the sum if they were counted.
"""

import json
from pathlib import Path

import pytest

from fleet.agent.devices import DeviceError
from fleet.agent.devices.jetson import JetsonBackend
from fleet.agent.loop.closedloop import ClosedLoop
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.agent.measure.sampler import sensor_hz
from fleet.cli import main
from fleet.method.budget import FixedBudget
from fleet.method.point import Point
from tests.conftest import run_cli

HZ = (306000000, 408000000, 510000000)


def put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def identity(root: Path, model: str, *compatible: str) -> None:
    """The device tree's model and compatible strings (NUL-terminated, as the kernel writes)."""
    put(root / "proc/device-tree/model", model + "\x00")
    put(root / "proc/device-tree/compatible", "".join(c + "\x00" for c in compatible))


def gpu(root: Path, node: str = "17000000.ga10b") -> Path:
    """A devfreq node without ``cur_freq`` (a lock then has nothing to wait for)."""
    d = root / "sys/class/devfreq" / node
    put(d / "available_frequencies", " ".join(str(h) for h in HZ) + "\n")
    put(d / "min_freq", f"{HZ[0]}\n")
    put(d / "max_freq", f"{HZ[-1]}\n")
    put(d / "governor", "nvhost_podgov\n")
    return d


def iio(root: Path, address: str, rails, extra=None) -> Path:
    """JetPack 4's ina3221x: rails = [(name, mW)], channels from 0; ``extra``: more files."""
    d = root / "sys/bus/i2c/drivers/ina3221x" / address / "iio:device0"
    for n, (name, mw) in enumerate(rails):
        put(d / f"rail_name_{n}", name + "\n")
        put(d / f"in_power{n}_input", f"{mw}\n")
        put(d / f"in_voltage{n}_input", "5000\n")
        put(d / f"in_current{n}_input", f"{mw // 5}\n")
    for name, text in (extra or {}).items():
        put(d / name, text)
    return d


def hwmon(root: Path, chip: str, address: str, channels, index: int, extra=None) -> Path:
    """JetPack 5+ hwmon: channels = {n: (label or None, mV, mA)}; None: no label file (the
    device tree disabled the channel). ``extra``: more files (update_interval, currN_crit)."""
    d = root / "sys/bus/i2c/drivers" / chip / address / "hwmon" / f"hwmon{index}"
    put(d / "name", chip + "\n")
    for n, (label, mv, ma) in channels.items():
        if label is not None:
            put(d / f"in{n}_label", label + "\n")
        put(d / f"in{n}_input", f"{mv}\n")
        put(d / f"curr{n}_input", f"{ma}\n")
    for name, text in (extra or {}).items():
        put(d / name, text)
    return d


def ina3221(root, address, channels, index, extra=None):
    d = hwmon(root, "ina3221", address, channels, index, extra)
    put(d / "in7_label", "sum of shunt voltages\n")  # not a rail
    put(d / "in7_input", "80\n")
    put(d / "curr7_input", "9000\n")
    return d


# -- the boards ----------------------------------------------------------------------------------
def nano(root: Path) -> None:
    compatible = ("nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210")
    identity(root, "NVIDIA Jetson Nano Developer Kit", *compatible)
    gpu(root, "57000000.gpu")
    iio(root, "6-0040", [("POM_5V_IN", 4321), ("POM_5V_GPU", 1000), ("POM_5V_CPU", 750)])


def nano_2gb(root: Path) -> Path:
    identity(root, "NVIDIA Jetson Nano 2GB Developer Kit", "nvidia,p3542-0000+p3448-0003",
             "nvidia,jetson-nano-2gb", "nvidia,jetson-nano", "nvidia,tegra210")  # fmt: skip
    return gpu(root, "57000000.gpu")


def tx2nx(root: Path) -> None:
    identity(root, "lanai-3636", "nvidia,p3509-0000+p3636-0001", "nvidia,tegra186")
    gpu(root, "17000000.gp10b")
    extra = {"polling_delay_0": "200ms\n", "crit_current_limit_0": "7000 ma\n"}
    iio(root, "7-0040", [("VDD_IN", 5123), ("VDD_CPU_GPU", 2000), ("VDD_SOC", 900)], extra)


def agx_xavier(root: Path, driver: str) -> None:
    identity(root, "Jetson-AGX", "nvidia,p2972-0000", "nvidia,galen", "nvidia,jetson-xavier",
             "nvidia,tegra194")  # fmt: skip
    gpu(root, "17000000.gv11b")
    if driver == "iio":  # JetPack 4: mW
        iio(root, "1-0040", [("GPU", 1500), ("CPU", 900), ("SOC", 1200)])
        iio(root, "1-0041", [("CV", 0), ("VDDRQ", 600), ("SYS5V", 1800)])
    else:  # JetPack 5: mV x mA
        ina3221(root, "1-0040", {1: ("GPU", 5000, 300), 2: ("CPU", 5008, 180),
                                 3: ("SOC", 4992, 240)}, 1)  # fmt: skip
        ina3221(root, "1-0041", {1: ("CV", 5000, 0), 2: ("VDDRQ", 5016, 120),
                                 3: ("SYS5V", 5000, 360)}, 2)  # fmt: skip


def agx_orin(root: Path, with_sys5v: bool = True) -> None:
    identity(root, "NVIDIA Jetson AGX Orin Developer Kit", "nvidia,p3737-0000+p3701-0005",
             "nvidia,p3701-0005", "nvidia,tegra234")  # fmt: skip
    gpu(root, "17000000.gpu")
    chans = {1: ("VDD_GPU_SOC", 5000, 1200), 2: ("VDD_CPU_CV", 5000, 400)}
    if with_sys5v:
        chans[3] = ("VIN_SYS_5V0", 5000, 700)
    sensor = {"update_interval": "7\n", "curr1_crit": "19000\n", "curr2_crit": "8000\n"}
    ina3221(root, "1-0040", chans, 1, sensor)
    # 0x41: channel 1 labelled NC (NVIDIA's tree), channel 3 disabled (upstream: no label file);
    # VDDQ_VDD2_1V8AO is fed from VIN_SYS_5V0 and must not be added
    ina3221(root, "1-0041", {1: ("NC", 5000, 3000), 2: ("VDDQ_VDD2_1V8AO", 5000, 200),
                             3: (None, 5000, 9999)}, 2)  # fmt: skip


def thor(root: Path, ina238_label=None) -> None:
    identity(root, "NVIDIA Jetson AGX Thor Developer Kit", "nvidia,p3971-0000+p3834-0000",
             "nvidia,tegra264")  # fmt: skip
    gpu(root, "gpu-gpc-0")
    gpu(root, "gpu-nvd-0")
    ina238 = {"power1_input": "61234567\n", "update_interval": "50\n"}  # microwatts
    if ina238_label is not None:
        ina238["in1_label"] = ina238_label + "\n"
    hwmon(root, "ina238", "2-0044", {1: (None, 48000, 1275)}, 4, ina238)
    ina3221(root, "2-0040", {1: ("VDD_GPU", 5000, 2000), 2: ("VDD_CPU_SOC_MSS", 5000, 1000),
                             3: ("VIN_SYS_5V0", 5000, 600)}, 3)  # fmt: skip


def backend(root: Path, **kw) -> JetsonBackend:
    return JetsonBackend(sysfs_root=str(root), state_dir=str(root / "state"), **kw)


# -- one rail, iio -------------------------------------------------------------------------------
def test_nano_reads_its_input_rail(tmp_path):
    nano(tmp_path)
    b = backend(tmp_path)
    assert b.read_power_w() == pytest.approx(4.321)
    d = b.describe()
    assert d["rail"] == "POM_5V_IN" and d["power_rails"] == ["POM_5V_IN"]
    assert d["sensor"] == "iio-ina3221x" and d["power_sensors"] == "ina3221x iio 6-0040"
    assert d["all_rails"] == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert "Jetson Nano" in d["power_total"]
    assert d["sensor_period_s"] is None and b.sensor_period_s is None  # the tree does not say


def test_tx2nx_reads_vdd_in_with_its_polling_delay_and_limit(tmp_path):
    tx2nx(tmp_path)
    b = backend(tmp_path)
    assert b.read_power_w() == pytest.approx(5.123)
    d = b.describe()
    assert d["rail"] == "VDD_IN" and "Jetson TX2 NX" in d["power_total"]
    assert b.sensor_period_s == pytest.approx(0.2)  # "200ms"
    assert d["current_limits_ma"] == {"VDD_IN": 7000.0}  # "7000 ma"


# -- sums ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("driver", ["iio", "hwmon"])
def test_agx_xavier_is_the_sum_of_six_rails_over_two_sensors(tmp_path, driver):
    agx_xavier(tmp_path, driver)
    b = backend(tmp_path)
    # iio: 1.5 + 0.9 + 1.2 + 0 + 0.6 + 1.8 W; hwmon: 5000x300 + 5008x180 + 4992x240 + 5000x0
    # + 5016x120 + 5000x360 uW = 1.5 + 0.90144 + 1.19808 + 0 + 0.60192 + 1.8 W
    expected = 6.0 if driver == "iio" else 6.00144
    assert b.read_power_w() == pytest.approx(expected, abs=1e-9)
    d = b.describe()
    assert d["power_rails"] == ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"]
    assert d["rail"] == "GPU+CPU+SOC+CV+VDDRQ+SYS5V"
    assert "1-0040" in d["power_sensors"] and "1-0041" in d["power_sensors"]
    assert "Jetson AGX Xavier" in d["power_total"]


def test_agx_orin_sums_three_rails_and_skips_nc_disabled_and_the_shunt_sum(tmp_path):
    agx_orin(tmp_path)
    b = backend(tmp_path)
    # 5000 x (1200 + 400 + 700) uW = 11.5 W; NC (15 W), VDDQ_VDD2_1V8AO (1 W), the disabled
    # channel (~50 W) and channel 7 are not in it
    assert b.read_power_w() == pytest.approx(11.5)
    d = b.describe()
    assert d["power_rails"] == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"]
    assert d["all_rails"] == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]
    assert d["sensor"] == "hwmon-ina3221"
    assert b.sensor_period_s == pytest.approx(0.007)  # update_interval 7 ms
    assert d["current_limits_ma"] == {"VDD_GPU_SOC": 19000.0, "VDD_CPU_CV": 8000.0}


def test_a_missing_rail_of_the_total_is_one_line_naming_rail_sensors_and_board(tmp_path):
    agx_orin(tmp_path, with_sys5v=False)
    with pytest.raises(DeviceError) as err:
        backend(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    assert "Jetson AGX Orin" in msg and "VIN_SYS_5V0" in msg
    assert "VDD_GPU_SOC, VDD_CPU_CV (ina3221 hwmon 1-0040)" in msg
    assert "VDDQ_VDD2_1V8AO (ina3221 hwmon 1-0041)" in msg
    # naming the rails is the way out the message gives
    b = backend(tmp_path, rail="VDD_GPU_SOC+VDD_CPU_CV")
    assert b.read_power_w() == pytest.approx(8.0)


# -- INA238 (Thor) -------------------------------------------------------------------------------
@pytest.mark.parametrize("label", [None, "VIN"])
def test_thor_reads_the_ina238_in_microwatts(tmp_path, label):
    thor(tmp_path, label)
    b = backend(tmp_path)
    assert b.read_power_w() == pytest.approx(61.234567)  # not 48 V x 1.275 A = 61.2 W
    d = b.describe()
    assert d["rail"] == "VIN" and d["sensor"] == "hwmon-ina238"  # unlabelled: the table's name
    assert "ina238 hwmon 2-0044" in d["power_sensors"]
    assert "ina3221 hwmon 2-0040" in d["power_sensors"]
    assert b.sensor_period_s == pytest.approx(0.05)


def test_rail_sum_across_sensors_and_case(tmp_path):
    thor(tmp_path)
    b = backend(tmp_path, rail="vdd_gpu + VDD_CPU_SOC_MSS")
    assert b.read_power_w() == pytest.approx(5000 * (2000 + 1000) / 1e6)  # 15 W
    assert b.describe()["rail"] == "VDD_GPU+VDD_CPU_SOC_MSS"
    both = backend(tmp_path, rail="VIN+VIN_SYS_5V0")
    assert both.read_power_w() == pytest.approx(61.234567 + 3.0)


@pytest.mark.parametrize(
    "rail, words",
    [
        ("VDD_IN", ["'VDD_IN' not found", "VIN (ina238 hwmon 2-0044)",
                    "VDD_GPU, VDD_CPU_SOC_MSS, VIN_SYS_5V0 (ina3221 hwmon 2-0040)"]),
        ("VDD_GPU+", ["expected a rail name or a sum A+B+C"]),
        ("VDD_GPU+vdd_gpu", ["'VDD_GPU' is named twice"]),
    ],
)  # fmt: skip
def test_bad_rail_is_one_line(tmp_path, rail, words):
    thor(tmp_path)
    with pytest.raises(DeviceError) as err:
        backend(tmp_path, rail=rail)
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_unknown_board_defaults_to_the_input_rail_or_lists_the_rails(tmp_path):
    gpu(tmp_path, "17000000.ga10b")  # no device tree: the table cannot say which board
    ina3221(tmp_path, "1-0040", {1: ("VDD_IN", 5000, 1000), 2: ("VDD_SOC", 5000, 100)}, 1)
    assert backend(tmp_path).read_power_w() == pytest.approx(5.0)
    other = tmp_path / "other"
    gpu(other, "17000000.ga10b")
    ina3221(other, "1-0040", {1: ("FOO", 5000, 1000), 2: ("BAR", 5000, 100)}, 1)
    with pytest.raises(DeviceError, match=r"POM_5V_IN or VDD_IN\) among power rails: FOO, BAR"):
        backend(other)


# -- no sensor -----------------------------------------------------------------------------------
def test_nano_2gb_builds_locks_and_has_no_power(tmp_path):
    node = nano_2gb(tmp_path)
    b = backend(tmp_path)
    assert b.read_power_w() is None and b.rail is None and b.sensor_period_s is None
    assert b.describe()["power"] == "none (Jetson Nano 2GB has no power sensor)"
    assert b.power_unavailable == "Jetson Nano 2GB has no power sensor"
    b.lock(408)  # the clocks still lock ...
    assert (node / "min_freq").read_text() == (node / "max_freq").read_text() == "408000000"
    b.restore()  # ... and come back
    assert (node / "min_freq").read_text() == str(HZ[0])
    assert (node / "max_freq").read_text() == str(HZ[-1])


@pytest.mark.slow
def test_profile_on_a_board_without_a_sensor_is_one_line_exit_2(tmp_path):
    nano_2gb(tmp_path / "root")
    out = tmp_path / "p.csv"
    r = run_cli("profile", "--backend", "jetson", "--sysfs-root", str(tmp_path / "root"),
                "--model", "small_cnn", "--batch-sizes", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "cannot measure power" in lines[0] and "Jetson Nano 2GB has no power sensor" in lines[0]
    assert "recorded profile of the same board type" in lines[0]
    assert not out.exists()


def _recorded(tmp_path: Path) -> tuple:
    """A recorded profile of this board (its clocks), an efficiency file and tiny images."""
    import numpy as np

    prof = tmp_path / "recorded.csv"
    rows = ["batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"]
    for b, scale in ((8, 1.0), (16, 1.8)):
        for f, watts in ((306, 2.0), (408, 3.0), (510, 4.5)):
            step_s, peak = 0.002 * scale * 510 / f, watts * scale
            rows.append(f"{b},{f},{step_s},{peak},{peak * 0.9}")
    prof.write_text("\n".join(rows) + "\n")
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,samples_to_accuracy\n8,400\n16,480\n")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 160)
    x = rng.integers(0, 256, (160, 8, 8)).astype(np.uint8)
    x[y == 1, :, :4] = 255
    data = tmp_path / "tiny.npz"
    np.savez(data, x_train=x[:128], y_train=y[:128], x_test=x[128:], y_test=y[128:])
    return prof, eff, data


@pytest.mark.slow
def test_train_with_a_recorded_profile_runs_and_says_power_was_not_measured(tmp_path, capsys):
    root = tmp_path / "root"
    node = nano_2gb(root)
    prof, eff, data = _recorded(tmp_path)
    code = main([
        "train", "--backend", "jetson", "--sysfs-root", str(root), "--device", "cpu",
        "--model", "small_cnn", "--dataset", str(data), "--efficiency", str(eff),
        "--profile", str(prof), "--budget-w", "3.5", "--max-samples", "64",
        "--target-accuracy", "1.0", "--no-drift", "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["samples"] > 0 and out["power_measured"] is False and out["power_samples"] == 0
    assert out["energy_j"] is None and out["guard_events"] == []
    note = [n for n in out["notes"] if "power is not measured" in n]
    assert note and "Jetson Nano 2GB has no power sensor" in note[0]
    assert "recorded profile only" in note[0] and "guard is off" in note[0]
    # the budget was met from the profile: the point chosen fits 3.5 W there (b=8 at 408 MHz:
    # 3 W; b=16 fits only at 306 MHz: 3.6 W > 3.5 W), and the clocks came back
    seg = out["segments"][0]
    assert (seg["batch_size"], seg["freq_mhz"]) == (8, 408) and seg["budget_w"] == 3.5
    assert (node / "min_freq").read_text().strip() == str(HZ[0])
    assert (node / "max_freq").read_text().strip() == str(HZ[-1])


def test_train_without_a_profile_on_a_board_without_a_sensor_is_one_line(tmp_path, capsys):
    root = tmp_path / "root"
    nano_2gb(root)
    prof, eff, data = _recorded(tmp_path)
    code = main([
        "train", "--backend", "jetson", "--sysfs-root", str(root), "--device", "cpu",
        "--model", "small_cnn", "--dataset", str(data), "--efficiency", str(eff),
        "--budget-w", "3.5",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "--profile" in err


# -- the sensor's refresh bounds the sampling rate -----------------------------------------------
def test_update_interval_caps_every_sampler_the_backend_feeds(tmp_path):
    gpu(tmp_path, "17000000.ga10b")
    ina3221(tmp_path, "1-0040", {1: ("VDD_IN", 5000, 1000)}, 1, {"update_interval": "500\n"})
    b = backend(tmp_path)
    assert b.sensor_period_s == pytest.approx(0.5)
    assert sensor_hz(b, 20.0) == pytest.approx(2.0) and sensor_hz(b, 1.0) == pytest.approx(1.0)
    points = [Point(8, 408.0, 0.01, 4.0, 3.5), Point(8, 510.0, 0.008, 6.0, 5.0)]
    plan = LoopPlan(points, {8: 100.0}, FixedBudget(5.0))
    loop = ClosedLoop(b, plan, hooks=LoopHooks(hz=20.0, restore_on_exit=True))
    assert loop.hz == pytest.approx(2.0) and loop.sampler.hz == pytest.approx(2.0)
    assert any("sampling power at 2 Hz" in n for n in loop.notes)


@pytest.mark.slow
def test_profiler_samples_no_faster_than_the_sensor(tmp_path):
    from tests.hardware_helpers import sweep

    gpu(tmp_path, "17000000.ga10b")
    ina3221(tmp_path, "1-0040", {1: ("VDD_IN", 5000, 1000)}, 1, {"update_interval": "250\n"})
    b = backend(tmp_path)
    result = sweep(
        b, "small_cnn", "3x8x8", batch_sizes=[2], freqs=[306.0], steps=1, warmup=0,
        sampler_hz=20.0, min_window_s=0.0, idle_s=0.0,
    )  # fmt: skip
    assert result.metadata["sampler_hz"] == pytest.approx(4.0)  # 1 / 0.25 s
    assert result.rows[0]["peak_power_w"] == pytest.approx(5.0)


@pytest.mark.slow
def test_the_agent_on_a_board_without_a_sensor(tmp_path):
    """``python -m fleet.agent --backend jetson``: hello says there is no power, ``power``
    reads null, and ``profile`` is refused with the one line, the agent still serving."""
    import subprocess
    import sys

    root = tmp_path / "root"
    nano_2gb(root)
    profile = {"cmd": "profile", "model": "small_cnn", "batch_sizes": [2]}
    requests = [{"cmd": "hello"}, {"cmd": "power"}, profile, {"cmd": "power"}]
    argv = [sys.executable, "-m", "fleet.agent", "--backend", "jetson",
            "--sysfs-root", str(root), "--state-dir", str(tmp_path / "state"),
            "--work-dir", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run(
        argv, input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True,
        text=True, timeout=120, cwd=str(Path(__file__).resolve().parents[1]),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    hello, power, profile, again = [json.loads(line) for line in proc.stdout.splitlines()]
    assert hello["capabilities"]["power"] is False
    assert hello["device"]["power"] == "none (Jetson Nano 2GB has no power sensor)"
    assert power["power_w"] is None and power["available"] is False
    assert profile["ok"] is False and "cannot measure power" in profile["error"]
    assert "\n" not in profile["error"] and again["power_w"] is None
