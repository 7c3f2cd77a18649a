"""CPU (RAPL) and replay backends, and the open_backend factory.

RAPL counters are real files under a fake powercap tree that the test advances; time comes from
an injected clock. NVML is tests/test_nvml.py, against the fake card simulations/fake_nvml.py.
"""

from pathlib import Path

import pytest

from fleet.agent.devices import BACKENDS, DeviceError, open_backend
from fleet.agent.devices.cpu import CpuBackend
from fleet.agent.devices.replay import ReplayBackend
from fleet.agent.measure.staircase import Measurement, staircase_plan


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def rapl(root: Path, pkg: int, energy_uj: int, max_range: int = 262143328850, name=None) -> Path:
    d = root / f"intel-rapl:{pkg}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text((name or f"package-{pkg}") + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def set_energy(d: Path, uj: int) -> None:
    (d / "energy_uj").write_text(f"{uj}\n")


# -- CPU / RAPL -----------------------------------------------------------------------------------
def test_rapl_power_from_energy_differences(tmp_path):
    p0 = rapl(tmp_path, 0, 1000000)
    core = rapl(tmp_path / "intel-rapl:0", 0, 5)  # sub-domain intel-rapl:0:0 must be ignored
    core.rename(tmp_path / "intel-rapl:0:0")
    clock = Clock()
    cpu = CpuBackend(powercap_root=str(tmp_path), clock=clock)
    assert [d.name for d in cpu.domains] == ["package-0"]
    clock.t += 0.5
    set_energy(p0, 1000000 + 7500000)  # 7.5 J in 0.5 s
    assert cpu.read_power_w() == pytest.approx(15.0)
    clock.t += 2.0
    set_energy(p0, 8500000 + 10000000)  # 10 J in 2 s
    assert cpu.read_power_w() == pytest.approx(5.0)
    assert cpu.describe() == {"backend": "cpu", "power": "rapl", "rapl_domains": "package-0"}


def test_rapl_sums_packages_and_handles_wraparound(tmp_path):
    p0 = rapl(tmp_path, 0, 999000000, max_range=1000000000)
    p1 = rapl(tmp_path, 1, 0)
    clock = Clock()
    cpu = CpuBackend(powercap_root=str(tmp_path), clock=clock)
    clock.t += 1.0
    set_energy(p0, 2000000)  # wrapped: 1 J to the top, then 2 J
    set_energy(p1, 4000000)
    assert cpu.read_power_w() == pytest.approx(3.0 + 4.0)


def test_rapl_same_instant_repeats_last_value(tmp_path):
    p0 = rapl(tmp_path, 0, 0)
    clock = Clock()
    cpu = CpuBackend(powercap_root=str(tmp_path), clock=clock)
    clock.t += 1.0
    set_energy(p0, 3000000)
    assert cpu.read_power_w() == pytest.approx(3.0)
    assert cpu.read_power_w() == pytest.approx(3.0)  # dt == 0: no new information


def test_cpu_time_only_without_rapl(tmp_path):
    cpu = CpuBackend(powercap_root=str(tmp_path / "absent"))
    assert cpu.read_power_w() is None
    assert cpu.describe() == {"backend": "cpu", "power": "unavailable"}
    assert cpu.frequencies() == []
    with pytest.raises(DeviceError, match="no frequency control"):
        cpu.lock(1000.0)
    cpu.restore()  # nothing to do, must not fail


def test_cpu_unreadable_counter_is_time_only(tmp_path):
    d = rapl(tmp_path, 0, 0)
    (d / "energy_uj").unlink()
    (d / "energy_uj").mkdir()  # unreadable as root too
    cpu = CpuBackend(powercap_root=str(tmp_path))
    assert cpu.read_power_w() is None and cpu.describe()["power"] == "unavailable"


# -- replay ---------------------------------------------------------------------------------------
PROFILE = """\
# replayed test profile
batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,device,status
8,300,0.40,4.0,3.5,nano,ok
8,600,0.25,6.0,5.0,nano,ok
8,900,0.20,9.0,,nano,ok
32,300,1.20,5.0,4.5,nano,ok
32,600,0.70,8.0,7.0,nano,ok
32,900,0.55,12.0,10.0,nano,ok
64,300,,,,nano,oom
64,600,,,,nano,oom
64,900,,,,nano,oom
"""


def replay(tmp_path) -> ReplayBackend:
    path = tmp_path / "profile.csv"
    path.write_text(PROFILE)
    return ReplayBackend(str(path))


def test_replay_frequencies_lock_and_log(tmp_path):
    r = replay(tmp_path)
    assert r.frequencies() == [300.0, 600.0, 900.0]
    assert r.batch_sizes() == [8, 32, 64]
    r.lock(600)
    with pytest.raises(DeviceError, match="450 MHz is not in .*valid MHz: 300, 600, 900"):
        r.lock(450)
    r.lock(900.0)
    assert r.lock_log == [600.0, 450.0, 900.0]
    assert r.locked_mhz == 900.0
    r.restore()
    r.restore()
    assert r.locked_mhz is None and r.restores == 1
    assert r.describe()["device"] == "nano" and r.describe()["backend"] == "replay"


def test_replay_power_follows_lock_and_workload(tmp_path):
    r = replay(tmp_path)
    assert r.read_power_w() is None  # nothing locked, nothing running
    r.lock(600)
    assert r.read_power_w() is None
    r.set_workload(32)
    assert r.read_power_w() == 7.0
    r.lock(900)
    r.set_workload(8)
    assert r.read_power_w() == 9.0  # no mean recorded: the peak stands in
    r.set_workload(64)
    assert r.read_power_w() is None  # the point did not run


def test_replay_measure(tmp_path):
    r = replay(tmp_path)
    assert r.measure(32, 600) == Measurement(0.70, 8.0, 7.0)
    assert r.measure(8, 900) == Measurement(0.20, 9.0, None)
    assert r.measure(64, 300) is None  # status oom
    assert r.measure(16, 300) is None  # not in the file
    assert r.measure(8, 450) is None
    assert r.lock_log == []  # a pure lookup


def test_staircase_runs_against_replay(tmp_path):
    r = replay(tmp_path)
    res = staircase_plan([8, 32, 64], r.frequencies(), 8.5, r.measure)
    assert res.frontier[32].freq_mhz == 600.0
    assert res.frontier[8].freq_mhz == 600.0  # 900 MHz peaks at 9 W > 8.5 W
    assert 64 not in res.frontier


def test_replay_bad_files(tmp_path):
    with pytest.raises(DeviceError, match="file not found"):
        ReplayBackend(str(tmp_path / "missing.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("batch_size,freq_mhz,time_per_batch_s\n8,300,0.4\n")
    with pytest.raises(DeviceError, match="missing column.*peak_power_w"):
        ReplayBackend(str(bad))
    bad.write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,fast,0.4,3\n")
    with pytest.raises(DeviceError, match="line 2: freq_mhz = 'fast', expected a finite number"):
        ReplayBackend(str(bad))


# -- factory --------------------------------------------------------------------------------------
def test_open_backend_kinds_and_errors(tmp_path):
    assert sorted(BACKENDS) == ["cpu", "jetson", "nvml", "replay"]
    assert isinstance(open_backend("cpu", powercap_root=str(tmp_path)), CpuBackend)
    path = tmp_path / "p.csv"
    path.write_text(PROFILE)
    assert isinstance(open_backend("Replay", profile_csv=str(path)), ReplayBackend)
    with pytest.raises(DeviceError, match="unknown device backend 'tpu'; valid kinds: cpu, jetson"):
        open_backend("tpu")
    with pytest.raises(DeviceError, match="does not take option.*rail.*valid options"):
        open_backend("cpu", rail="VDD_IN")
