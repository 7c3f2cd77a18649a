"""The NVML backend against a fake NVML that behaves like a card (simulations/fake_nvml.py).

No test here touches a real GPU: ``pynvml`` is the fake module, in this process
(``fake_nvml.install``) or in a subprocess (``fake_nvml.shim_dir`` first on PYTHONPATH), and the
card's settings live in a file the test reads back. What is asserted is what a card would show:
the limit it enforces, the limit restored after a SIGKILL, the clock a point ran at.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.agent.devices import DeviceError, open_backend
from fleet.agent.devices.clockstate import load_nvml
from simulations import fake_nvml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def card(tmp_path, monkeypatch):
    """A fake H100 whose settings live in ``tmp_path/card.json``; pynvml is the fake."""
    path = tmp_path / "card.json"
    monkeypatch.setenv(fake_nvml.ENV, str(path))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    fake_nvml.configure(path)
    yield path
    fake_nvml.set_load(0.0)


def limit_mw(path: Path) -> int:
    return fake_nvml.card_settings(path)["limit_mw"]


# -- the fake itself: what a card refuses and reports ------------------------------------------
def left_by_a_killed_run(state: Path, limit_w: float) -> None:
    """A power limit set and saved in ``state`` by a run that is gone (its pid runs no more):
    what a SIGKILL leaves for the next start or ``powerfleet restore``."""
    open_backend("nvml", allow_power_limit=True, state_dir=str(state)).lock(limit_w)
    path = Path(load_nvml(str(state))[0]["path"])
    record = json.loads(path.read_text())
    record["pid"] = 999999999
    path.write_text(json.dumps(record))


def test_fake_card_refuses_like_a_card_and_its_power_follows_the_limit(card):
    nv = fake_nvml
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200000, 700000]
    with pytest.raises(nv.NVMLError) as err:
        nv.nvmlDeviceSetPowerManagementLimit(h, 300000)
    assert err.value.value == nv.NVML_ERROR_NO_PERMISSION
    assert type(err.value).__name__ == "NVMLError_NoPermission"  # pynvml's subclass per code
    nv.set_privileged(True)
    with pytest.raises(nv.NVMLError) as err:
        nv.nvmlDeviceSetPowerManagementLimit(h, 750000)  # above the card's range
    assert err.value.value == nv.NVML_ERROR_INVALID_ARGUMENT
    nv.set_load(1.0)  # 72 W idle + 680 W demand: held at the 700 W limit
    assert nv.nvmlDeviceGetPowerUsage(h) == 700000
    nv.nvmlDeviceSetPowerManagementLimit(h, 300000)
    assert nv.nvmlDeviceGetPowerUsage(h) == 300000 and limit_mw(card) == 300000
    # the clock moves under load: held back by the limit to 1980 * (300-72)/680 ~ 664 MHz
    assert 600 <= nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) <= 665
    # the counter: 300 W. Each read is bracketed by the clock, so the card's own interval lies
    # between the inner and the outer one however the host delays either read (1 mJ: its unit)
    a = time.monotonic()
    e0 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    b = time.monotonic()
    time.sleep(0.2)
    c = time.monotonic()
    e1 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    d = time.monotonic()
    assert 300.0 * (c - b) - 0.002 <= (e1 - e0) / 1000.0 <= 300.0 * (d - a) + 0.002
    nv.set_load(0.0)
    assert nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) == 345  # idle clock


# -- current clocks mode: no knob, nothing changed ------------------------------------------------
def test_current_mode_offers_no_knob_and_changes_nothing(card, tmp_path):
    b = open_backend("nvml", state_dir=str(tmp_path / "state"))
    assert b.frequencies() == []  # the card picks its clock; rows record the one it ran at
    b.lock(345)  # the clock at open: a no-op
    with pytest.raises(DeviceError, match="clock changes disabled; profile at current clocks"):
        b.lock(705)
    b.restore()
    assert not (tmp_path / "state").exists()
    assert b.read_power_w() == pytest.approx(72.0)  # the instantaneous field, mW -> W
    d = b.describe()
    assert d["gpu"] == "NVIDIA H100 80GB HBM3" and d["mode"] == "current"
    assert d["knob"] == "sm_clock_measured" and d["energy"] == "counter"


def test_locked_clocks_and_average_power_fallback(card, tmp_path):
    fake_nvml.configure(card, instant_field=False, privileged=True)
    state = tmp_path / "state"
    b = open_backend("nvml", allow_clock_changes=True, state_dir=str(state))
    assert b.frequencies()[:2] == [210.0, 225.0] and b.frequencies()[-1] == 1980.0
    with pytest.raises(DeviceError, match="1000 MHz is not a supported graphics clock"):
        b.lock(1000)
    b.lock(705)
    assert fake_nvml.card_settings(card)["locked_mhz"] == 705
    assert load_nvml(str(state))[0]["clocks_locked"] is True  # saved before the change
    b.restore()
    b.restore()
    assert fake_nvml.card_settings(card)["locked_mhz"] is None and load_nvml(str(state)) == []
    assert b.read_power_w() == pytest.approx(72.0)  # the 1 s average: no instant field
    with pytest.raises(DeviceError, match="no NVML GPU at index 3"):
        open_backend("nvml", index=3)
    with pytest.raises(DeviceError, match="choose one knob"):
        open_backend("nvml", allow_clock_changes=True, allow_power_limit=True)


# -- the power limit as a knob --------------------------------------------------------------------
def test_power_limit_knob_saves_first_refuses_clearly_and_restores(card, tmp_path):
    state = tmp_path / "state"
    b = open_backend("nvml", allow_power_limit=True, state_dir=str(state))
    knobs = b.frequencies()
    assert knobs[0] == 200.0 and knobs[-1] == 700.0 and len(knobs) == 21  # 25 W steps, watts
    with pytest.raises(DeviceError, match="set the power limit on GPU 0: permission denied"):
        b.lock(300)
    assert load_nvml(str(state)) == [] and limit_mw(card) == 700000  # nothing left behind
    fake_nvml.set_privileged(True)
    with pytest.raises(DeviceError, match="750 W is outside GPU 0's power-limit range 200-700 W"):
        b.lock(750)
    b.lock(300)
    saved = load_nvml(str(state))
    assert [r["power_limit_mw"] for r in saved] == [700000]  # the limit as found
    assert limit_mw(card) == 300000
    b.lock(250)
    assert load_nvml(str(state))[0]["power_limit_mw"] == 700000  # saved once, before the first
    b.restore()
    assert limit_mw(card) == 700000 and load_nvml(str(state)) == []


def _agent(card: Path, state: Path, shim: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, str(ROOT)]))
    env[fake_nvml.ENV] = str(card)
    return subprocess.Popen(
        [sys.executable, "-m", "fleet.agent", "--backend", "nvml", "--allow-power-limit",
         "--state-dir", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        cwd=str(ROOT),
    )  # fmt: skip


def _ask(proc: subprocess.Popen, request: dict) -> dict:
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    while True:
        reply = json.loads(proc.stdout.readline())
        if reply.get("id") == request["id"] and "ok" in reply:
            return reply


def test_power_limit_set_then_sigkill_then_powerfleet_restore(card, tmp_path):
    """The agent sets 300 W and is killed with SIGKILL: no exit path runs, the card keeps 300 W
    and the state file keeps 700 W; ``powerfleet restore --backend nvml`` puts 700 W back."""
    fake_nvml.set_privileged(True)  # the agent runs as root on the card
    state = tmp_path / "state"
    shim = fake_nvml.shim_dir(tmp_path / "shim")
    proc = _agent(card, state, shim)
    try:
        hello = _ask(proc, {"id": 1, "cmd": "hello"})
        assert hello["ok"] and hello["capabilities"]["frequencies"][-1] == 700.0
        assert _ask(proc, {"id": 2, "cmd": "lock", "freq_mhz": 300})["ok"]
        assert limit_mw(card) == 300000
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert limit_mw(card) == 300000  # nothing ran on the way out
    assert load_nvml(str(state))[0]["power_limit_mw"] == 700000
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, str(ROOT)]))
    env[fake_nvml.ENV] = str(card)
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "restore", "--backend", "nvml", "--state-dir",
         str(state), "--json"],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["restored"] is True and out["gpus"][0]["power_limit_w"] == 700.0
    assert limit_mw(card) == 700000 and load_nvml(str(state)) == []
    again = subprocess.run(
        [sys.executable, "-m", "fleet", "restore", "--backend", "nvml", "--state-dir", str(state)],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120,
    )  # fmt: skip
    assert again.returncode == 0 and "nothing to restore" in again.stderr


def test_next_start_in_a_knob_mode_restores_what_a_killed_run_left(card, tmp_path):
    fake_nvml.set_privileged(True)
    state = tmp_path / "state"
    left_by_a_killed_run(state, 400)
    current = open_backend("nvml", state_dir=str(state))  # current mode changes nothing...
    assert current.recovered is None and limit_mw(card) == 400000
    again = open_backend("nvml", allow_power_limit=True, state_dir=str(state))
    assert again.recovered["power_limit_mw"] == 700000  # ...a knob mode puts it back
    assert limit_mw(card) == 700000 and load_nvml(str(state)) == []


# -- a profile point: the clock it ran at, the counter's energy -----------------------------------
def test_profile_rows_name_the_clock_each_point_ran_at(card, tmp_path):
    pytest.importorskip("torch")
    from tests.hardware_helpers import sweep

    b = open_backend("nvml", state_dir=str(tmp_path / "state"))
    assert b.current_mhz() == 345.0  # idle at open, as the H100 said
    fake_nvml.set_load(0.8)  # the GPU busy while the points run (the fake has no kernels)
    result = sweep(
        b, "small_cnn", batch_sizes=[4, 8], steps=2, warmup=1, sampler_hz=50, idle_s=0,
        min_window_s=0.6,
    )  # fmt: skip
    # 72 + 0.8 * 680 = 616 W fits the 700 W limit: the top clock, less 0-30 MHz of jitter
    for row in result.rows:
        assert 1950 <= row["freq_mhz"] <= 1980 and row["freq_mhz"] == row["sm_clock_mhz"]
        assert row["sm_clock_min_mhz"] <= row["freq_mhz"] <= row["sm_clock_max_mhz"]
        assert row["energy_source"] == "counter"
        assert row["mean_power_w"] == pytest.approx(616.0, rel=0.01)  # the counter's mean
        assert row["sampled_mean_w"] == pytest.approx(616.0, rel=0.05)  # the sampled, beside
    assert result.metadata["knob"] == "sm_clock_measured"


def test_missing_package_is_a_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(DeviceError, match="nvidia-ml-py"):
        open_backend("nvml")


# -- the closed loop and its guard with the power limit as the knob ---------------------------
def test_closed_loop_sets_the_limit_the_guard_lowers_it_and_the_card_gets_it_back(card, tmp_path):
    """A profile made at half load says every limit from 500 W draws ~420 W; trained at full load
    the card draws what the limit lets it, so the guard steps the limit down until the power is
    under the 450 W budget; at the end the limit found (700 W) is back and the state file gone.
    ``pace``: every step lasts at least the LUT's 0.1 s, so 40 steps give the guard 4 s of
    readings on any machine."""
    torch = pytest.importorskip("torch")
    from fleet.agent.models import registry as models
    from fleet.method.budget import FixedBudget
    from fleet.method.selection import lut_from_rows
    from tests.closedloop_helpers import under_budget

    fake_nvml.set_privileged(True)
    state = tmp_path / "state"
    b = open_backend("nvml", allow_power_limit=True, state_dir=str(state))
    rows = [
        {"batch_size": 8, "freq_mhz": 300, "time_per_batch_s": 0.12, "peak_power_w": 310.0},
        {"batch_size": 8, "freq_mhz": 500, "time_per_batch_s": 0.10, "peak_power_w": 420.0},
        {"batch_size": 8, "freq_mhz": 700, "time_per_batch_s": 0.09, "peak_power_w": 420.0},
    ]
    gen = torch.Generator().manual_seed(0)
    data = (torch.randn(512, 1, 28, 28, generator=gen), torch.randint(0, 10, (512,), generator=gen))
    model = models.build_model("small_cnn", 10, (1, 28, 28), seed=0)
    seen = []
    fake_nvml.set_load(1.0)  # 72 + 680 W asked: the limit decides
    try:
        result, summary = under_budget(
            b, model, data, (data[0][:64], data[1][:64]), lut_from_rows(rows), {8: 1000.0},
            FixedBudget(450.0), 8, 1e-3, target_accuracy=1.0, max_samples=8 * 40,
            eval_every_samples=8 * 40, pace=True, sampler_hz=20.0,
            progress=lambda *a: seen.append(limit_mw(card)), progress_interval_s=0.05,
        )  # fmt: skip
    finally:
        fake_nvml.set_load(0.0)
    steps = [(e["from_mhz"], e["to_mhz"]) for e in summary["guard_events"]]
    assert steps == [(700, 500), (500, 300)]  # watts: 700 W then 500 W drew over 450 W
    assert summary["freq_mhz"] == 300 and 300000 in seen  # the card ran at 300 W
    assert limit_mw(card) == 700000 and load_nvml(str(state)) == []  # restored on the way out
    assert summary["counter_energy_j"] > 0


def test_a_measured_clock_profile_is_one_column_for_coverage(tmp_path):
    """Rows at the clocks each point ran at (1980, 1965 MHz) under a grid labelled with the clock
    at open (345): no grid point is lacking (nothing could be locked); a batch size without a
    row is."""
    from fleet.trust.coverage import read_coverage

    head = "# grid_batch_sizes=16,64{}\n# grid_freqs=345\n# knob=sm_clock_measured\n"
    body = (
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w\n16,1980,0.002,124\n64,1965,0.002,130\n"
    )
    full = tmp_path / "full.csv"
    full.write_text(head.format("") + body)
    assert read_coverage(str(full)).lacking() == []
    gap = tmp_path / "gap.csv"
    gap.write_text(head.format(",256") + body)
    assert read_coverage(str(gap)).lacking() == [(256, 345.0)]
    plain = tmp_path / "plain.csv"  # the same rows as a knob grid: every other clock is lacking
    plain.write_text(head.format("").replace("# knob=sm_clock_measured\n", "") + body)
    assert (16, 345.0) in read_coverage(str(plain)).lacking()


def test_profile_with_the_power_limit_as_the_knob_rows_in_watts(card, tmp_path):
    pytest.importorskip("torch")
    from tests.hardware_helpers import sweep

    fake_nvml.set_privileged(True)
    state = tmp_path / "state"
    b = open_backend("nvml", allow_power_limit=True, state_dir=str(state))
    fake_nvml.set_load(1.0)
    result = sweep(
        b, "small_cnn", batch_sizes=[4], freqs=[300, 700], steps=2, warmup=1, sampler_hz=50,
        idle_s=0, min_window_s=0.3,
    )  # fmt: skip
    assert [r["freq_mhz"] for r in result.rows] == [300, 700]  # the knob, in watts
    at = {r["freq_mhz"]: r for r in result.rows}
    assert at[300]["peak_power_w"] == pytest.approx(300, rel=0.05)  # held at the limit
    assert at[700]["peak_power_w"] == pytest.approx(700, rel=0.05)
    assert at[300]["sm_clock_mhz"] < at[700]["sm_clock_mhz"]  # the limit holds the clock back
    assert result.metadata["knob"] == "power_limit_w"
    assert limit_mw(card) == 700000 and load_nvml(str(state)) == []  # restored after the sweep


# -- what the real pynvml does that the backend must take as it is -------------------------------
def test_a_driver_without_the_instant_field_is_known_at_open(card):
    """The budget window is sized from ``power_average_s`` before any sampler reads: it must
    already say 0 (the 1 s API is the average) when the driver has no instantaneous field."""
    fake_nvml.configure(card, instant_field=False)
    b = open_backend("nvml")
    assert b.power_average_s == 0.0 and b.describe()["power"] == "average"
    fake_nvml.configure(card)
    assert open_backend("nvml").power_average_s == 1.0


def over_the_ripple(read) -> list[float]:
    """Readings of the fake's instantaneous field spread over two of its ripple's periods (and
    at least 20). Why not 20 reads in a row: on a fast core they all land in one phase of the
    ripple, maybe its lower half; whether one lies above the average then depends on speed."""
    out, start = [], time.monotonic()
    while len(out) < 20 or time.monotonic() - start < 2.0 / fake_nvml.RIPPLE_HZ:
        out.append(read())
        time.sleep(0.005)
    return out


def test_a_pynvml_without_the_field_constant_still_asks_for_the_field(card, monkeypatch):
    """nvidia-ml-py before 11.515 has no NVML_FI_DEV_POWER_INSTANT; the driver may have the
    field (186 in nvml.h), so it is asked by number rather than given up."""
    monkeypatch.delattr(fake_nvml, "NVML_FI_DEV_POWER_INSTANT")
    b = open_backend("nvml")
    fake_nvml.set_load(1.0)
    readings = over_the_ripple(b.read_power_w)
    fake_nvml.set_load(0.0)
    assert b.describe()["power"] == "instant"
    assert max(readings) > 700.0  # the instantaneous field ripples above the 700 W average


def test_restore_passes_the_uuid_as_bytes_that_every_pynvml_takes(card, tmp_path, monkeypatch):
    """nvidia-ml-py 11.495 and older hand a str straight to ctypes.c_char_p: a TypeError (a
    traceback from ``powerfleet restore``); bytes work there and in every later version."""
    from fleet.agent.devices.nvml_restore import restore_saved

    real = fake_nvml.nvmlDeviceGetHandleByUUID

    def bytes_only(uuid):
        if not isinstance(uuid, bytes):
            raise TypeError("bytes or integer address expected instead of str instance")
        return real(uuid)

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetHandleByUUID", bytes_only)
    fake_nvml.set_privileged(True)
    state = tmp_path / "state"
    left_by_a_killed_run(state, 300)
    assert limit_mw(card) == 300000
    done = restore_saved(str(state), lambda: fake_nvml)
    assert [r["uuid"] for r in done] == ["GPU-fake-h100-0000"] and limit_mw(card) == 700000


def test_no_supported_clocks_and_no_root_are_one_line_errors(card):
    """pynvml answers [] when the driver lists no clocks; locking clocks is a root-only NVML
    device command (``nvidia-smi -acp`` does not open it, so the hint does not offer it)."""
    b = open_backend("nvml", allow_clock_changes=True)
    with pytest.raises(
        DeviceError, match=r"lock graphics clocks on GPU 0: permission denied; run as root$"
    ):
        b.lock(705)
    fake_nvml.configure(card, mem_mhz=[], privileged=True)
    with pytest.raises(DeviceError, match="GPU 0 lists no supported graphics clocks"):
        open_backend("nvml", allow_clock_changes=True).frequencies()
