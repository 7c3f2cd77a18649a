"""The budget's one statistic (fleet/method/power_window.py): the sensor's power averaged over a
stated window, the window each backend states, and the time and energy spent above a budget.

Numbers are hand-computed; no verdict depends on this machine's speed (times are given)."""

from __future__ import annotations

import random
import sys

import pytest

from fleet.agent.devices import open_backend
from fleet.agent.measure.sampler import budget_window
from fleet.method.power_window import (
    NVML_INSTANT_AVERAGE_S,
    OverBudget,
    WindowedPower,
    peak_of,
    peak_spread,
    windowed,
)
from simulations import fake_nvml


def test_without_averaging_the_statistic_is_the_reading():
    wp = WindowedPower(0.0)
    assert [wp.add(t, w) for t, w in [(0.0, 3.0), (0.1, 9.0), (0.2, 4.0)]] == [3.0, 9.0, 4.0]
    assert peak_of([0.0, 0.1, 0.2], [3.0, 9.0, 4.0], 0.0) == 9.0


def test_the_moving_average_weights_each_reading_by_the_time_it_stands_for():
    # readings at 0, 0.5, 1.0, 1.25, 2.0 s; each stands for the time since the previous one
    times = [0.0, 0.5, 1.0, 1.25, 2.0]
    watts = [10.0, 20.0, 30.0, 40.0, 50.0]
    series = windowed(times, watts, 1.0)
    values = [v for _, v, _ in series]
    fulls = [ok for _, _, ok in series]
    # t=0: alone; t=0.5: (0,0.5] at 20 -> 20 (partial); t=1: 0.5x20 + 0.5x30 -> 25 (full);
    # t=1.25: [0.25,1.25]: 0.25x20 + 0.5x30 + 0.25x40 = 30; t=2: [1,2]: 0.25x40 + 0.75x50 = 47.5
    assert values == pytest.approx([10.0, 20.0, 25.0, 30.0, 47.5])
    assert fulls == [False, False, True, True, True]
    assert peak_of(times, watts, 1.0) == pytest.approx(47.5)
    # shorter than one window: the highest partial value stands
    assert peak_of(times[:2], watts[:2], 1.0) == pytest.approx(20.0)
    wp = WindowedPower(1.0)
    wp.add(1.0, 1.0)
    with pytest.raises(ValueError, match="time order"):
        wp.add(0.5, 1.0)


def test_a_short_spike_is_averaged_away_a_lasting_one_is_not():
    """The H100 case in miniature: 20 Hz readings of 130 W with a 0.1 s spike to 151 W (the
    instantaneous field's excursions under a 135 W budget) stay under 135 W as 1 s means;
    0.8 s at 151 W does not."""
    times = [0.05 * i for i in range(60)]
    spike = [151.0 if 20 <= i < 22 else 130.0 for i in range(60)]
    assert max(spike) > 135.0
    assert peak_of(times, spike, 1.0) == pytest.approx(130.0 + 2 * 21.0 / 20)  # 132.1 W
    lasting = [151.0 if 20 <= i < 36 else 130.0 for i in range(60)]
    assert peak_of(times, lasting, 1.0) == pytest.approx(130.0 + 16 * 21.0 / 20)  # 146.8 W


def test_the_peak_spread_compares_the_two_halves():
    times = [0.1 * i for i in range(40)]
    flat = [100.0] * 40
    assert peak_spread(times, flat, 0.0) == 0.0
    rising = [100.0 + (5.0 if i == 35 else 0.0) for i in range(40)]
    assert peak_spread(times, rising, 0.0) == pytest.approx(5.0)
    assert peak_spread(times[:3], flat[:3], 0.0) is None  # too few values to tell


def test_over_budget_counts_time_energy_and_excursions():
    ob = OverBudget()
    # budget 10 W; readings every 0.5 s: 9, 12, 14, 8, 11 (each judged on the stretch it closes)
    for t, v in [(0.0, 9.0), (0.5, 12.0), (1.0, 14.0), (1.5, 8.0), (2.0, 11.0)]:
        ob.add(t, v, 10.0)
    # stretches: (0,0.5] 12 W over, (0.5,1] 14 W over, (1,1.5] 8 W under, (1.5,2] 11 W over
    assert ob.seconds == pytest.approx(1.5)
    assert ob.joules == pytest.approx(0.5 * 2 + 0.5 * 4 + 0.5 * 1)
    assert (ob.excursions, ob.samples, ob.longest_s) == (2, 3, pytest.approx(1.0))
    ob.add(2.5, 50.0, None)  # no budget: nothing is over
    assert ob.seconds == pytest.approx(1.5)


def test_each_backend_states_its_window(monkeypatch, tmp_path):
    # NVML's instantaneous field: averaged over 1 s; its 1 s API already is that average
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)  # the fake card, in memory
    monkeypatch.delenv(fake_nvml.ENV, raising=False)
    fake_nvml.configure()
    assert budget_window(open_backend("nvml"), 20.0) == (NVML_INSTANT_AVERAGE_S, 1.0)
    # a driver without the instantaneous field: the 1 s API, known from the open
    fake_nvml.configure(instant_field=False)
    assert budget_window(open_backend("nvml"), 20.0) == (0.0, 1.0)
    # RAPL's reading is the mean since the previous one: one sampling period
    cpu = open_backend("cpu", powercap_root=str(tmp_path))
    assert budget_window(cpu, 20.0) == (0.0, pytest.approx(0.05))


def test_a_jetson_rail_is_its_own_window(tmp_path):
    from simulations.virtual_jetson import build_board

    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    backend = open_backend("jetson", sysfs_root=str(board.root), state_dir=str(tmp_path / "s"))
    avg, window = budget_window(backend, 20.0)
    assert avg == 0.0  # the INA3221's conversion already averages
    period = backend.sensor_period_s
    assert window == pytest.approx(period if period else 0.05)


def test_the_h100_run_under_135_w_has_no_excursion_of_the_statistic():
    """train_135.json in miniature: 280 readings at 20 Hz around 128 W, 4 of them single
    excursions to 151.3 W over the 135 W budget. As NVML's 1 s statistic nothing is over (a
    steady workload chosen under its budget); judged reading by reading, as before, the run
    spent 4 readings (0.2 s) over and its status could not tell."""
    from fleet.agent.loop.segments import SegmentLog

    rng = random.Random(135)
    spikes = {40, 101, 177, 250}
    readings = [(0.05 * i, 151.273 if i in spikes else rng.gauss(128.0, 2.0)) for i in range(280)]
    for average_s, over_s, excursions in ((1.0, 0.0, 0), (0.0, 0.2, 4)):
        log = SegmentLog(average_s=average_s, window_s=average_s or 0.05)
        log.open(0.0, 64, 345.0, 135.0, "start")
        for t, w in readings:
            log.account(t, w, 135.0)
        this = log.this_call(14.0, [], [])
        assert this["over_budget_s"] == pytest.approx(over_s)
        assert this["over_budget_excursions"] == excursions
        assert (this["peak_power_w"] < 135.0) is (average_s > 0)
