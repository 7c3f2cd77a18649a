import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.agent.measure.staircase import Measurement, probes_saved, staircase_plan
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile, frontier
from fleet.core.selection import select
from fleet.method.point import Point

BATCHES = [4, 8, 16, 32, 64, 128]
FREQS = [76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2, 768.0, 844.8, 921.6]


@st.composite
def monotone_grids(draw):
    """Power rising with b and f, time falling with f: the paper's premise for the plan."""
    nb = draw(st.integers(1, len(BATCHES)))
    nf = draw(st.integers(1, len(FREQS)))
    bs, fs = BATCHES[:nb], FREQS[:nf]
    db = draw(st.lists(st.floats(0.0, 2.0), min_size=nb, max_size=nb))
    df = draw(st.lists(st.floats(0.0, 2.0), min_size=nf, max_size=nf))
    grid = {}
    for i, b in enumerate(bs):
        for j, f in enumerate(fs):
            power = 2.0 + sum(db[: i + 1]) + sum(df[: j + 1])
            time = b * 0.01 * (1 + 3.0 / (j + 1))
            grid[(b, f)] = Measurement(time, power, power * 0.9)
    budget = draw(st.floats(1.5, 2.0 + sum(db) + sum(df) + 1))
    return bs, fs, grid, budget


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(monotone_grids())
def test_staircase_finds_the_full_grid_frontier_with_fewer_probes(case):
    bs, fs, grid, budget = case
    result = staircase_plan(bs, fs, budget, lambda b, f: grid[(b, f)])
    full = Profile([Point(b, f, m[0], m[1], m[2]) for (b, f), m in grid.items()], "grid")
    expected = frontier(full, budget)
    assert {b: p.freq_mhz for b, p in result.frontier.items()} == {
        b: p.freq_mhz for b, p in expected.items()
    }
    assert len(result.probes) <= result.grid_size
    assert probes_saved(result) == result.grid_size - len(result.probes)
    # never probes a point twice
    keys = [(p.batch_size, p.freq_mhz) for p in result.probes]
    assert len(keys) == len(set(keys))


def test_staircase_probe_order_and_savings_hand_traced():
    bs, fs = [8, 32], [100.0, 200.0, 300.0, 400.0]
    power = {8: [2, 3, 4, 5], 32: [3, 4, 5, 6]}
    grid = {(b, f): Measurement(0.1, power[b][j], None) for b in bs for j, f in enumerate(fs)}
    r = staircase_plan(bs, fs, 4.5, lambda b, f: grid[(b, f)])
    # b=32 from the bottom: 100 (3 W), 200 (4 W), 300 (5 W: over) -> 200
    # b=8 from 200: 200 (3 W), 300 (4 W), 400 (5 W: over) -> 300
    assert [(p.batch_size, p.freq_mhz) for p in r.probes] == [
        (32, 100.0),
        (32, 200.0),
        (32, 300.0),
        (8, 200.0),
        (8, 300.0),
        (8, 400.0),
    ]
    assert {b: p.freq_mhz for b, p in r.frontier.items()} == {32: 200.0, 8: 300.0}
    assert probes_saved(r) == 2


def test_staircase_walks_down_when_noise_breaks_monotonicity():
    bs, fs = [8, 32], [100.0, 200.0, 300.0]
    power = {32: [3.0, 4.0, 5.0], 8: [3.5, 4.6, 4.0]}  # b=8 at 200 MHz is a noisy spike
    grid = {(b, f): Measurement(0.1, power[b][j], None) for b in bs for j, f in enumerate(fs)}
    r = staircase_plan(bs, fs, 4.5, lambda b, f: grid[(b, f)])
    assert r.frontier[8].freq_mhz == 100.0  # walked down from 200 instead of trusting it
    assert all(p.measurement.peak_power_w <= 4.5 for p in r.frontier.values())


def test_out_of_memory_batch_is_skipped_and_plan_goes_on():
    bs, fs = [8, 128], [100.0, 200.0]
    calls = []

    def measure(b, f):
        calls.append((b, f))
        return None if b == 128 else Measurement(0.1, 3.0, 2.5)

    r = staircase_plan(bs, fs, 5.0, measure)
    assert 128 not in r.frontier and r.frontier[8].freq_mhz == 200.0
    assert calls[0] == (128, 100.0) and (128, 200.0) not in calls


def test_staircase_choice_matches_full_grid_choice():
    bs = [8, 16, 32, 64]
    fs = FREQS[:8]
    grid = {
        (b, f): Measurement(b * 0.004 * 600 / f, 1.5 + b / 16 + f / 150, 1.2 + b / 20 + f / 180)
        for b in bs
        for f in fs
    }
    eff = Efficiency({8: 8000.0, 16: 9000.0, 32: 12000.0, 64: 20000.0})
    full = Profile([Point(b, f, *m) for (b, f), m in grid.items()], "full")
    for budget in (4.0, 5.0, 6.0):
        r = staircase_plan(bs, fs, budget, lambda b, f: grid[(b, f)])
        probed = Profile(
            [Point(p.batch_size, p.freq_mhz, *p.measurement) for p in r.probes], "probed"
        )
        a, b = select(probed, eff, budget), select(full, eff, budget)
        assert (a.batch_size, a.freq_mhz) == (b.batch_size, b.freq_mhz)
        assert len(r.probes) < r.grid_size


def test_bad_arguments():
    with pytest.raises(ValueError, match="is not a budget"):
        staircase_plan([8], [100.0], 0, lambda b, f: None)
    with pytest.raises(ValueError, match="at least one"):
        staircase_plan([], [100.0], 5, lambda b, f: None)
