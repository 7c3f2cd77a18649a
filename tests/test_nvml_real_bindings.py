"""The NVML backend through the real pynvml (nvidia-ml-py), the fake card behind its C ABI.

``tests/test_nvml.py`` runs the backend against ``fake_nvml`` standing for the pynvml module;
here the real ``pynvml.py`` runs unchanged and only ``libnvidia-ml.so`` is the fake
(``simulations/fake_nvml_lib.py``), so a call the real bindings would refuse (argument types,
str vs bytes, return shapes such as the field values' ctypes array of unions) fails here before it
fails on a card. Needs nvidia-ml-py (the ``nvml`` extra) installed, or a folder holding its
``pynvml.py`` in ``$POWERFLEET_PYNVML_DIR``; skipped otherwise. No GPU, no driver.
"""

from __future__ import annotations

import os
import sys

import pytest

from fleet.agent.devices import DeviceError, open_backend
from fleet.agent.devices.clockstate import load_nvml
from fleet.agent.devices.nvml_restore import restore_saved
from simulations import fake_nvml, fake_nvml_lib
from tests.test_nvml import left_by_a_killed_run, over_the_ripple


@pytest.fixture
def real(tmp_path, monkeypatch):
    """(the real pynvml on the fake library, the card's settings file)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # put back whatever was there
    nv = fake_nvml_lib.load(os.environ.get("POWERFLEET_PYNVML_DIR"))
    if nv is None:
        pytest.skip("nvidia-ml-py is not installed (nor $POWERFLEET_PYNVML_DIR set)")
    card = tmp_path / "card.json"
    monkeypatch.setenv(fake_nvml.ENV, str(card))
    fake_nvml.configure(card)
    yield nv, card
    fake_nvml.set_load(0.0)


def test_current_mode_reads_through_the_real_bindings(real):
    nv, _card = real
    b = open_backend("nvml")
    assert b.uuid == "GPU-fake-h100-0000"  # a str whatever the bindings return
    d = b.describe()
    assert (d["gpu"], d["driver"]) == ("NVIDIA H100 80GB HBM3", "580.159.04")
    assert (d["power"], d["energy"], d["power_limit_w"]) == ("instant", "counter", 700.0)
    assert b.limit_range_w() == (200.0, 700.0) and b.frequencies() == []
    fake_nvml.set_load(1.0)
    watts = over_the_ripple(b.read_power_w)  # the field values' union, in mW
    fake_nvml.set_load(0.0)
    assert all(700 * 0.95 <= w <= 700 * 1.05 for w in watts) and max(watts) > 700.0
    assert b.sm_clock_mhz() == 345.0 and b.energy_counter_mj() > 0
    assert {"nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEnergyConsumption"} <= nv.nvmlLib.called


def test_knobs_refused_set_and_restored_through_the_real_bindings(real, tmp_path):
    _nv, card = real
    state = tmp_path / "state"
    b = open_backend("nvml", allow_power_limit=True, state_dir=str(state))
    with pytest.raises(DeviceError, match="set the power limit on GPU 0: permission denied"):
        b.lock(300)  # the real NVMLError_NoPermission, read by its .value
    fake_nvml.set_privileged(True)
    with pytest.raises(DeviceError, match="750 W is outside"):
        b.lock(750)
    b.lock(300)
    assert fake_nvml.card_settings(card)["limit_mw"] == 300000
    b.restore()
    assert fake_nvml.card_settings(card)["limit_mw"] == 700000
    clocks = open_backend("nvml", allow_clock_changes=True, state_dir=str(state))
    assert clocks.frequencies()[0] == 210.0 and clocks.frequencies()[-1] == 1980.0
    clocks.lock(705)
    assert fake_nvml.card_settings(card)["locked_mhz"] == 705
    clocks.restore()
    assert fake_nvml.card_settings(card)["locked_mhz"] is None


def test_powerfleet_restore_finds_the_gpu_by_uuid_through_the_real_bindings(real, tmp_path):
    nv, card = real
    fake_nvml.set_privileged(True)
    state = tmp_path / "state"
    left_by_a_killed_run(state, 250)
    done = restore_saved(str(state), lambda: nv)
    assert [r["uuid"] for r in done] == ["GPU-fake-h100-0000"]
    assert fake_nvml.card_settings(card)["limit_mw"] == 700000 and load_nvml(str(state)) == []
