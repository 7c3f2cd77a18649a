import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.common.errors import InfeasibleError, InputError
from fleet.core.baselines import run_baseline
from fleet.core.choice import make_choice
from fleet.core.compare import compare
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile
from fleet.core.selection import SelectionIndex, safe_frequency_cap, select
from fleet.method.point import Point
from fleet.method.selection import ChooseIndex, best_per_batch, choose

BATCHES = [4, 8, 16, 32, 64, 128]
FREQS = [76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4]


@st.composite
def profiles_and_efficiencies(draw):
    bs = draw(st.lists(st.sampled_from(BATCHES), min_size=1, max_size=6, unique=True))
    fs = draw(st.lists(st.sampled_from(FREQS), min_size=1, max_size=8, unique=True))
    points = []
    for b in bs:
        for f in fs:
            if draw(st.booleans()) and draw(st.booleans()):
                continue  # a hole in the grid (not measured)
            t = draw(st.floats(0.01, 2.0))
            peak = draw(st.floats(1.0, 12.0))
            mean = draw(st.floats(0.5, 1.0)) * peak
            points.append(Point(b, f, t, peak, mean))
    if not points:
        points.append(Point(bs[0], fs[0], 0.1, 3.0, 2.0))
    samples = {
        b: (math.nan if draw(st.integers(0, 5)) == 0 else float(draw(st.integers(100, 10**6))))
        for b in bs
    }
    budget = draw(st.one_of(st.none(), st.floats(0.5, 13.0)))
    return Profile(points, "random.csv"), Efficiency(samples, source="random-eff.csv"), budget


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(profiles_and_efficiencies(), st.sampled_from(["time", "energy"]))
def test_select_is_the_documented_argmin(case, objective):
    profile, eff, budget = case
    expected = choose(profile.points, eff.reached, budget, objective)
    if expected is None:
        with pytest.raises(InfeasibleError):
            select(profile, eff, budget, objective)
        return
    got = select(profile, eff, budget, objective)
    assert (got.batch_size, got.freq_mhz) == (expected.batch_size, expected.freq_mhz)
    # never over budget, never an unreached batch size
    assert budget is None or got.peak_power_w <= budget
    assert not math.isnan(eff.samples[got.batch_size])
    # and optimal against an independent exhaustive scan written out longhand
    best = min(
        (p.mean_power_w if objective == "energy" else 1.0)
        * p.time_per_batch_s
        / p.batch_size
        * eff.samples[p.batch_size]
        for p in profile.points
        if not math.isnan(eff.samples[p.batch_size])
        and (budget is None or p.peak_power_w <= budget)
    )
    value = got.predicted_energy_j if objective == "energy" else got.predicted_time_s
    assert value == pytest.approx(best, rel=1e-12)


NAN = math.nan
TIES = [0.05, 0.1, 0.2, 0.4]  # few values, so equal costs and equal peaks happen
PEAKS = [2.0, 3.0, 4.0, 5.0]


@st.composite
def hostile_points(draw):
    """Points as the kernel may meet them: holes, NaN peaks (time-only points, whose mean falls
    back to the NaN peak), predicted bounds, repeated times and peaks (ties), and now and then
    two rows for one (batch, frequency)."""
    bs = draw(st.lists(st.sampled_from(BATCHES), min_size=1, max_size=4, unique=True))
    fs = draw(st.lists(st.sampled_from(FREQS), min_size=1, max_size=4, unique=True))
    points = []
    for b in bs:
        for f in fs:
            for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
                t = draw(st.one_of(st.sampled_from(TIES), st.floats(0.01, 2.0)))
                peak = draw(st.one_of(st.just(NAN), st.sampled_from(PEAKS), st.floats(1.0, 9.0)))
                mean = peak * draw(st.sampled_from([0.5, 0.8, 1.0]))
                bound = draw(st.one_of(st.just(NAN), st.just(NAN), st.sampled_from(PEAKS)))
                if not math.isnan(bound) and not math.isnan(peak):
                    bound = max(bound, peak)
                points.append(Point(b, f, t, peak, mean, bound))
    eff = {b: draw(st.sampled_from([1000.0, 2000.0, 4000.0])) for b in bs if draw(st.booleans())}
    budget = draw(
        st.one_of(
            st.none(),
            st.just(math.inf),
            st.sampled_from(PEAKS + [0.5, 1.0]),  # exactly a peak, or below every one
            st.floats(0.5, 10.0),
        )
    )
    return points, eff, budget


@settings(max_examples=600, deadline=None)
@given(hostile_points(), st.sampled_from(["time", "energy"]))
def test_fast_path_is_the_kernel_rule_exactly(case, objective):
    """The host's indexed search (``ChooseIndex``, under ``SelectionIndex``) returns the very
    point the kernel's ``choose`` returns, and ``SelectionIndex.select`` builds its Choice from
    it or refuses exactly when the kernel finds nothing (one equation 4, two speeds)."""
    points, eff, budget = case
    want = choose(points, eff, budget, objective)
    index = ChooseIndex(points)
    assert index.choose(eff, budget, objective) is want
    for b in index.batch_sizes:
        front = best_per_batch(points, budget, objective, [b])
        assert index.best_point(b, budget, objective) is front.get(b)
    if not points:
        return
    profile = Profile(points, "hostile.csv")
    samples = {b: eff.get(b, NAN) for b in {p.batch_size for p in points}}
    try:
        got = SelectionIndex(profile).select(Efficiency(samples), budget, objective)
    except InputError:  # InfeasibleError included
        assert want is None
        return
    assert repr(got) == repr(make_choice(want, eff[want.batch_size], "ours", objective))  # NaNs


def _profile(rows):
    return Profile([Point(*r) for r in rows], "hand.csv")


def test_predicted_time_and_energy_hand_computed():
    prof = _profile([(8, 460.8, 0.07, 4.8, 4.0), (32, 460.8, 0.2, 5.5, 5.0)])
    eff = Efficiency({8: 10_000.0, 32: 15_000.0})
    c = select(prof, eff, None)
    # b=8: 0.07/8*10000 = 87.5 s; b=32: 0.2/32*15000 = 93.75 s
    assert (c.batch_size, c.predicted_time_s) == (8, pytest.approx(87.5))
    assert c.predicted_energy_j == pytest.approx(87.5 * 4.0)


def test_energy_objective_can_pick_slower_cooler_point():
    prof = _profile([(32, 460.8, 0.20, 6.0, 6.0), (32, 307.2, 0.25, 4.0, 3.0)])
    eff = Efficiency({32: 3200.0})
    assert select(prof, eff, None, "time").freq_mhz == 460.8  # 20 s at 6 W = 120 J
    assert select(prof, eff, None, "energy").freq_mhz == 307.2  # 25 s at 3 W = 75 J


def test_tie_breaks_lower_power_first():
    # Same predicted time at two points: the lower peak wins, deterministically.
    prof = _profile([(16, 614.4, 0.2, 6.0, 5.0), (16, 537.6, 0.2, 5.5, 5.0)])
    eff = Efficiency({16: 1600.0})
    assert select(prof, eff, None).freq_mhz == 537.6


def test_unreached_batch_is_never_selected():
    prof = _profile([(8, 307.2, 0.1, 4.0, 3.0), (64, 307.2, 0.2, 4.1, 3.5)])
    eff = Efficiency({8: 1000.0, 64: math.nan})
    assert select(prof, eff, None).batch_size == 8


def test_no_common_batch_sizes_is_an_error():
    prof = _profile([(8, 307.2, 0.1, 4.0, 3.0)])
    with pytest.raises(InputError, match="no batch size is in both"):
        select(prof, Efficiency({16: 10.0}), None)


def test_index_answers_many_budgets_like_fresh_selection():
    prof = _profile(
        [
            (b, f, 1.0 / f * b**0.8, 2 + b / 32 + f / 200, 2 + b / 40 + f / 250)
            for b in BATCHES
            for f in FREQS
        ]
    )
    eff = Efficiency({b: 1000.0 * (1 + b / 64) for b in BATCHES})
    index = SelectionIndex(prof)
    for budget in [3.5, 4.0, 4.5, 5.0, 6.0, 7.0, None]:
        a = index.select(eff, budget)
        b = choose(prof.points, eff.reached, budget)
        assert (a.batch_size, a.freq_mhz) == (b.batch_size, b.freq_mhz)


def test_baselines_hand_computed():
    # Power rises with b and f; at 5 W the clock safe for every batch is 307.2 MHz.
    rows = []
    for b, base in [(8, 3.0), (32, 3.6), (128, 4.4)]:
        for k, f in enumerate([230.4, 307.2, 384.0, 460.8]):
            rows.append((b, f, b * 0.01 / (f / 230.4), base + 0.5 * k, base + 0.4 * k))
    prof = _profile(rows)
    # peaks at 307.2: 3.5, 4.1, 4.9 (<=5); at 384: 4.0, 4.6, 5.4 (>5)
    assert safe_frequency_cap([prof], 5.0) == 307.2
    assert safe_frequency_cap([prof], None) == 460.8
    eff = Efficiency({8: 1000.0, 32: 1500.0, 128: 4000.0})
    b1 = run_baseline("b1", prof, eff, 5.0, 307.2)
    b2 = run_baseline("b2", prof, eff, 5.0, 307.2)
    assert (b1.batch_size, b1.freq_mhz) == (128, 307.2)
    assert (b2.batch_size, b2.freq_mhz) == (8, 307.2)
    ours = select(prof, eff, 5.0)
    # ours: b=8 can run at 460.8 (peak 4.5): 8*0.01/2 /8 * 1000 = 5 s
    assert (ours.batch_size, ours.freq_mhz) == (8, 460.8)
    assert ours.predicted_time_s == pytest.approx(5.0)
    with pytest.raises(InfeasibleError, match="at the lowest clock 230.4 MHz batch_size=128"):
        safe_frequency_cap([prof], 4.0)


def test_compare_costs_every_method_with_the_truth():
    rows = []
    for b in (8, 32):
        for k, f in enumerate([307.2, 460.8, 614.4]):
            rows.append((b, f, b * 0.01 * (307.2 / f), 3 + b / 16 + k, 3 + b / 20 + k))
    prof = _profile(rows)
    proxy = Efficiency({8: 1000.0, 32: 1100.0}, source="proxy")
    truth = Efficiency({8: 1000.0, 32: 3000.0}, source="truth")
    out = compare(prof, proxy, [None], truth)
    by = {r["method"]: r for r in out}
    # proxy says b=32 (time/sample at 614.4: 0.005 * 1100 = 5.5 vs 0.005 * 1000 = 5.0) -> b=8
    assert by["oracle"]["batch_size"] == 8
    assert by["b1"]["batch_size"] == 32
    # B1 costed with truth: 0.32*0.5/32*3000 = 15 s; oracle 0.08*0.5/8*1000 = 5 s
    assert by["b1"]["predicted_time_s"] == pytest.approx(15.0)
    assert by["oracle"]["predicted_time_s"] == pytest.approx(5.0)
    assert by["oracle"]["speedup_vs_b1"] == pytest.approx(3.0)
    assert by["ours"]["gap_to_oracle_pct"] == pytest.approx(0.0)
