"""Prediction chosen by cross-validation, its power bound and the adaptive probes (issue 21).

Numbers are checked against tables whose truth is known in closed form, and the issue's goals
are asserted on the data in the repo (the reference profiles, clock-driven and driven by a
power limit) with the benchmark's own scoring (``benchmarks/predict_eval.py``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from benchmarks.predict_eval import evaluate_grid, is_full, load_grid, power_limit_view
from fleet.agent.prediction.adapt import next_probes
from fleet.agent.prediction.design import frame_probes
from fleet.agent.prediction.models import frame
from fleet.agent.prediction.predict import BOUND_COLUMN, predict_profile
from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.method.profile_io import write_rows
from tests.test_predict import BATCHES, CAPS, NANO, capped, physical, rows_at

PROFILES = ["nano_resnet18", "nano_transformer", "tx2nx_mobilenetv2", "tx2nx_small_cnn"]


def test_frame_model_is_exact_on_log_additive_plus_bilinear_tables():
    bs, ks = [4, 8, 16, 32, 64], [100.0, 200.0, 350.0, 500.0]

    def y(b: int, k: float) -> float:
        u, v = math.log2(b), k
        return math.exp(0.3 * u * u - 0.001 * v + 2e-4 * u * v + 1.0)

    probes = {p: y(*p) for p in frame_probes(bs, ks)}
    inner = [(b, k) for b in bs[1:-1] for k in ks[1:-1]]
    got = frame(probes, bs, ks, inner)
    for p in inner:
        assert got[p] == pytest.approx(y(*p), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("truth", [physical, capped])
def test_the_chosen_model_is_never_worse_than_separable_on_the_probes(truth):
    knobs = NANO if truth is physical else CAPS
    pred = predict_profile(rows_at(frame_probes(BATCHES, knobs), truth), BATCHES, knobs)
    for q, err in pred.errors.items():
        assert err <= pred.candidates[q]["separable"] + 1e-12
        assert err == min(pred.candidates[q].values())


@pytest.mark.slow
def test_power_limit_grids_choose_the_cap_model_and_clock_grids_the_shared_curve():
    clock = predict_profile(rows_at(frame_probes(BATCHES, NANO), physical), BATCHES, NANO)
    assert clock.methods["time_per_batch_s"] == "shape"
    limit = predict_profile(rows_at(frame_probes(BATCHES, CAPS), capped), BATCHES, CAPS)
    assert limit.methods["peak_power_w"] == "cap"
    assert "cap" not in clock.candidates["peak_power_w"]  # a clock in MHz is no power limit


@pytest.mark.slow
def test_every_predicted_row_carries_a_bound_at_or_above_its_prediction():
    pred = predict_profile(rows_at(frame_probes(BATCHES, NANO), physical), BATCHES, NANO)
    predicted = [r for r in pred.rows if r["source"] == "predicted"]
    assert predicted and all(r[BOUND_COLUMN] >= r["peak_power_w"] for r in predicted)
    assert all(BOUND_COLUMN not in r for r in pred.rows if r["source"] == "measured")
    # the bound covers the truth on this table, which is what the margin is for
    for r in predicted:
        assert physical(r["batch_size"], float(r["freq_mhz"]))[1] <= r[BOUND_COLUMN] * 1.0001


def _two_point_profile(tmp_path, bound: float | None) -> str:
    rows = [
        {"batch_size": 8, "freq_mhz": 500, "time_per_batch_s": 0.5, "peak_power_w": 4.0},
        {"batch_size": 8, "freq_mhz": 900, "time_per_batch_s": 0.3, "peak_power_w": 4.9},
    ]
    if bound is not None:
        rows[1].update({"source": "predicted", BOUND_COLUMN: bound})
    path = str(tmp_path / "p.csv")
    write_rows(path, rows, [])
    return path


def test_selection_holds_a_predicted_point_to_its_bound(tmp_path):
    eff = Efficiency({8: 1000.0})
    assert select(load_profile(_two_point_profile(tmp_path, None)), eff, 5.0).freq_mhz == 900
    guarded = load_profile(_two_point_profile(tmp_path, 5.1))
    assert select(guarded, eff, 5.0).freq_mhz == 500  # 4.9 W predicted, could be 5.1 W
    assert select(guarded, eff, 5.2).freq_mhz == 900


def test_a_bound_below_its_prediction_is_refused_in_one_line(tmp_path):
    path = _two_point_profile(tmp_path, 4.0)
    msg = r"line 3: peak_power_bound_w='4' is below peak_power_w='4.9'"
    with pytest.raises(InputError, match=msg):
        load_profile(path)


def test_next_probes_name_the_straddling_faster_point_and_an_unverified_choice():
    def row(b, k, t, p, src="measured", bound=None):
        out = {"batch_size": b, "freq_mhz": k, "time_per_batch_s": t, "peak_power_w": p}
        out["source"] = src
        if bound is not None:
            out[BOUND_COLUMN] = bound
        return out

    rows = [
        row(8, 300, 1.0, 3.0),
        row(8, 600, 0.6, 4.8, "predicted", 5.2),  # faster, may or may not fit 5 W
        row(8, 900, 0.4, 6.5, "predicted", 6.8),  # faster still, but surely over 5 W
        row(16, 300, 1.6, 3.5, "predicted", 3.6),  # fits for sure and is the choice: verify it
    ]
    got = next_probes(rows, [5.0], [{8: 1.0, 16: 1.0}], 5, margin=0.05)
    assert got == [(8, 600.0), (16, 300.0)]  # best predicted time to accuracy first
    assert next_probes(rows, [5.0], [{8: 1.0, 16: 1.0}], 1, margin=0.05) == [(8, 600.0)]
    assert next_probes(rows, [9.0], [{8: 1.0, 16: 1.0}], 5, margin=0.05) == [(8, 900.0)]


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILES)
def test_goals_on_the_repo_grids_frame_and_adaptive_probes(name):
    """Issue 21's goals (time and power <= 3 % mean, worst regret <= 5 %, 0 over budget) on
    the reference profiles, clock-driven and driven by a power limit, frame + adaptive probes;
    and the naive separable fit of the same probes does worse on each count that it misses."""
    table = load_grid(f"simulations/profiles/{name}.csv")
    assert is_full(table)
    for grid in (table, power_limit_view(table)):
        ours = evaluate_grid(grid, "frame+adapt", "ours")
        assert ours["time_mean"] <= 0.03 and ours["power_mean"] <= 0.03, name
        assert max(ours["regrets"]) <= 0.05, name
        assert ours["over_budget"] == 0, name
        naive = evaluate_grid(grid, "frame+adapt", "separable")
        assert naive["time_mean"] > ours["time_mean"]


@pytest.mark.slow
def test_cli_reports_the_models_and_names_next_probes(tmp_path):
    sparse = tmp_path / "sparse.csv"
    write_rows(str(sparse), rows_at(frame_probes(BATCHES, NANO), physical), [])
    cmd = [sys.executable, "-m", "fleet", "predict", "--profile", str(sparse)]
    out = subprocess.run(
        [*cmd, "--out", str(tmp_path / "full.csv"), "--json", "--next", "2", "--budgets", "5,7"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["methods"]["time_per_batch_s"] == "shape"
    assert set(doc["candidates"]["peak_power_w"]) >= {"shape", "separable", "frame", "interp"}
    assert 0 < len(doc["next_probes"]) <= 2
    probed = {(b, float(k)) for b, k in frame_probes(BATCHES, NANO)}
    assert all((p["batch_size"], p["freq_mhz"]) not in probed for p in doc["next_probes"])
    full = load_profile(tmp_path / "full.csv")
    assert any(not math.isnan(p.peak_power_bound_w) for p in full.points)
    bad = subprocess.run(
        [*cmd, "--out", str(tmp_path / "x.csv"), "--next", "2"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "--budgets" in bad.stderr


@pytest.mark.slow
def test_profile_predict_adapts_its_probes_to_the_budgets_given(tmp_path):
    """A replayed Nano profiled in predict mode with budgets: the extra probes land where the
    choice is in doubt, and the choice at each budget is then the full grid's, measured."""
    nano = "simulations/profiles/nano_resnet18.csv"
    eff = "simulations/efficiency/resnet18_svhn.csv"
    out = tmp_path / "adapted.csv"
    base = [sys.executable, "-m", "fleet", "profile", "--backend", "replay"]
    base += ["--replay-profile", nano, "--model", "resnet18", "--predict", "--json"]
    got = subprocess.run(
        [*base, "--out", str(out), "--adapt-budgets", "4.5,7", "--adapt-efficiency", eff],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    assert 18 < summary["probes"] <= 18 + 72 // 10  # the design, then at most a tenth more
    adapted = load_profile(out)
    truth = load_profile(nano)
    for budget in (4.5, 7.0):
        mine = select(adapted, load_efficiency(eff), budget)
        best = select(truth, load_efficiency(eff), budget)
        assert (mine.batch_size, mine.freq_mhz) == (best.batch_size, best.freq_mhz)
        assert math.isnan(adapted.point(mine.batch_size, mine.freq_mhz).peak_power_bound_w)
    bad = subprocess.run(
        [*base[:-2], "--json", "--out", str(out), "--adapt-budgets", "4.5"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--adapt-budgets applies to --predict" in bad.stderr


@pytest.mark.parametrize("true_peak, chosen", [(4.95, 900.0), (5.05, 500.0)])
def test_verification_probes_a_better_point_the_bound_held_back(true_peak, chosen):
    """Predicted 4.9 W with a bound of 5.1 W at a 5 W budget: selection holds back, and
    verify-before-trust measures the point; it is taken only if it really fits."""
    from fleet.trust.verify import select_verified

    rows = [
        {"batch_size": 8, "freq_mhz": 500.0, "time_per_batch_s": 0.5, "peak_power_w": 4.0},
        {"batch_size": 8, "freq_mhz": 900.0, "time_per_batch_s": 0.3, "peak_power_w": 4.9},
    ]
    rows[0]["source"] = "measured"
    rows[1].update({"source": "predicted", BOUND_COLUMN: 5.1})
    probed = []

    def measure(b: int, f: float) -> dict:
        probed.append((b, f))
        return {"batch_size": b, "freq_mhz": f, "time_per_batch_s": 0.3, "peak_power_w": true_peak}

    got = select_verified(rows, Efficiency({8: 1000.0}), 5.0, measure)
    assert probed == [(8, 900.0)]
    assert got.choice.freq_mhz == chosen


# --- issue 30: out of sample, on the published real grids committed in the repo ---------------

REAL = "benchmarks/published/dlbench_dvfs"


@pytest.fixture(scope="module")
def real_results():
    """Frame design on every committed real grid: ours and the separable fit of the same probes
    (scored by the benchmark's own code; a few seconds of CPU, no timing in any verdict)."""
    import glob
    import os

    from benchmarks.predict_eval import fixed_batch

    out = {}
    for path in sorted(glob.glob(f"{REAL}/*.csv")):
        table = load_grid(path)
        per_step = fixed_batch(path)
        out[os.path.basename(path)] = {
            p: evaluate_grid(table, "frame", p, per_step) for p in ("ours", "separable")
        }
    return out


def test_the_published_grids_carry_their_provenance_and_are_full():
    import glob

    from fleet.method.profile_io import read_rows

    paths = sorted(glob.glob(f"{REAL}/*.csv"))
    assert len(paths) == 12
    for path in paths:
        _header, _rows, comments = read_rows(path)
        assert any(
            c.startswith("source: https://github.com/blackjack2015/dlbench_dvfs") for c in comments
        )
        assert "commit: 18fe93d0c00ed9f9b0686ee1f3bfdd1410eafd4e" in comments
        assert "licence: none stated; published measurements are facts" in comments
        assert "derived by: benchmarks/published/derive_dlbench.py" in comments
        assert is_full(load_grid(path)), path


def test_goals_on_the_published_real_grids_with_the_frame_design(real_results):
    """Issue 30's goals on real grids, frame design, no extra probes: time and power <= 3 %
    mean error, 0 picks over budget; worst regret <= 10 % on every grid but the GTX 980
    winograd convolution (time not monotone in either clock, up to 11 % noise: its worst regret
    is 23.9 %, docs/published-data.md), and never worse than separable beyond the 0.5 % noise
    floor on any grid's held-out cells."""
    import statistics

    ours = {g: r["ours"] for g, r in real_results.items()}
    assert statistics.mean(r["time_mean"] for r in ours.values()) <= 0.03
    assert statistics.mean(r["power_mean"] for r in ours.values()) <= 0.03
    assert sum(r["over_budget"] for r in ours.values()) == 0
    missed = sorted(g for g, r in ours.items() if max(r["regrets"]) > 0.10)
    assert missed == ["gtx980_conv_winograd.csv"]
    assert statistics.median(x for r in ours.values() for x in r["regrets"]) <= 0.01
    for grid, r in real_results.items():
        for q in ("time_mean", "power_mean"):
            assert r["ours"][q] <= r["separable"][q] + 0.005, (grid, q)
    # the separable fit alone is not safe: its predicted power picks points over the budget
    assert sum(r["separable"]["over_budget"] for r in real_results.values()) > 0


def test_real_regret_is_the_power_bounds_not_the_time_models(real_results):
    """Why the worst regret is what it is (docs/published-data.md): the same choices knowing
    every point's true power lose at most 5 % on every real grid (predicted time ranks the
    points right), while held to the prediction alone they go over the budget. What is left of
    the regret is the price of a safe bound on points that sit just under a budget."""
    ours = [r["ours"] for r in real_results.values()]
    for grid, r in real_results.items():
        assert max(r["ours"]["exact_power_regrets"]) <= 0.05, grid
        assert r["ours"]["exact_power_over_budget"] == 0, grid
    assert sum(r["no_margin_over_budget"] for r in ours) > 0
    assert sum(r["over_budget"] for r in ours) == 0


def test_folds_hold_out_a_whole_row_interior_and_keep_its_ends():
    from fleet.agent.prediction.select import folds

    obs = {p: 1.0 for p in frame_probes([4, 8, 16, 32], [100.0, 200.0, 300.0, 400.0])}
    got = folds(obs)
    assert [f.held for f in got] == [[(4, 200.0), (4, 300.0)], [(32, 200.0), (32, 300.0)]]
    for f in got:
        assert set(f.kept) == set(obs) - set(f.held)


def test_the_simplest_model_within_one_standard_error_is_kept():
    from fleet.agent.prediction.select import within_noise

    cells = list(range(6))
    noisy = {  # interp 0.1 % better on average than separable: noise, separable kept
        "separable": [0.010, -0.012, 0.011, -0.010, 0.012, -0.011],
        "interp": [0.009, -0.011, 0.010, -0.009, 0.011, -0.010],
    }
    assert within_noise(noisy, cells)[0] == "separable"
    clear = {  # shape 3 % better on every cell: it earns its place
        "separable": [0.04, -0.04, 0.04, -0.04, 0.04, -0.04],
        "shape": [0.01, -0.01, 0.01, -0.01, 0.01, -0.01],
    }
    assert within_noise(clear, cells) == ["shape"]


LIMIT_BS, LIMIT_KS = [8, 16, 32, 64], [100.0, 150.0, 200.0, 250.0, 300.0]


def limit_grid(free: dict[int, float]):
    """A power-limit grid: power ``min(share_b * limit, free_b)`` with a different share per
    batch size (a real card sits at 0.9-1.0 of a limit); its frame probes and interior cells."""
    share = {8: 0.93, 16: 0.99, 32: 0.95, 64: 0.97}

    def power(b: int, k: float) -> float:
        return min(share[b] * k, free[b])

    probes = {p: power(*p) for p in frame_probes(LIMIT_BS, LIMIT_KS)}
    inner = [(b, k) for b in LIMIT_BS[1:-1] for k in LIMIT_KS[1:-1]]
    return power, probes, inner


def test_the_cap_model_learns_each_rows_own_share_of_the_limit():
    """Power ``min(share_b * limit, free_b)`` with a different share per batch size (a real card
    sits at 0.9-1.0 of a limit): the frame's probes give the power model exactly."""
    from fleet.agent.prediction.models import cap

    bs, ks = LIMIT_BS, LIMIT_KS
    power, probes, inner = limit_grid({8: 160.0, 16: 230.0, 32: 280.0, 64: 1e9})
    got = cap(probes, bs, ks, inner, {"peak_power_w": probes})
    for p in inner:
        assert got[p] == pytest.approx(power(*p), rel=1e-12), p


def test_goals_on_noisy_power_limit_grids():
    """The modeled power-limit grids as a card reads them (own share of the limit per batch
    size, 1 % noise per reading): the power-limit model is kept, 0 picks over budget, time and
    power within 3 %; the separable fit of the same probes goes over budget."""
    import zlib

    from benchmarks.predict_eval import noisy_limit_view

    over = {"ours": 0, "separable": 0}
    for name in PROFILES:
        grid = power_limit_view(load_grid(f"simulations/profiles/{name}.csv"))
        grid = noisy_limit_view(grid, zlib.crc32(f"{name}.csv".encode()))
        for predictor in over:
            got = evaluate_grid(grid, "frame", predictor)
            over[predictor] += got["over_budget"]
            if predictor == "ours":
                assert got["methods"]["peak_power_w"] == "cap", name
                assert got["time_mean"] <= 0.03 and got["power_mean"] <= 0.03, name
    assert over["ours"] == 0 and over["separable"] > 0


def test_the_noisy_views_read_with_the_noise_asked_for():
    """``--reading-noise`` (the benchmark's): with no noise a noisy power-limit view is each batch
    size's own share of the exact view, one ratio per row; with noise the readings scatter around
    those ratios by about the sd asked for. The clock view is the exact grid without noise."""
    import statistics

    from benchmarks.predict_eval import noisy_limit_view, noisy_view

    exact = power_limit_view(load_grid("simulations/profiles/nano_resnet18.csv"))
    quiet = noisy_limit_view(exact, 7, noise=0.0)
    rows: dict[int, set[float]] = {}
    for (b, k), row in quiet.items():
        assert row["time_per_batch_s"] == exact[(b, k)]["time_per_batch_s"]
        rows.setdefault(b, set()).add(
            round(row["peak_power_w"] / exact[(b, k)]["peak_power_w"], 12)
        )
    assert all(len(r) == 1 and 0.92 <= next(iter(r)) <= 1.0 for r in rows.values())
    for sd in (0.0025, 0.02):
        loud = noisy_limit_view(exact, 7, noise=sd)  # the same seed: the same shares
        errs = [loud[p]["peak_power_w"] / quiet[p]["peak_power_w"] - 1.0 for p in exact]
        errs += [loud[p]["time_per_batch_s"] / exact[p]["time_per_batch_s"] - 1.0 for p in exact]
        assert 0.6 * sd <= statistics.pstdev(errs) <= 1.4 * sd, sd
    clock = load_grid("simulations/profiles/nano_resnet18.csv")
    assert noisy_view(clock, 3, noise=0.0) == clock


def test_one_or_two_held_out_cells_give_at_least_the_unvalidated_margin():
    """A 3 x 3 frame holds out two cells. The data are exact for separable, which misses them by
    nothing; but two misses say little about the next, so the bound keeps the 10 % margin of an
    unvalidated model. With one cell its spread is unknown: only the 0.5 % noise floor protects
    the simpler model, and a model far better on that cell is kept."""
    from fleet.agent.prediction.select import UNVALIDATED_MARGIN, choose, within_noise

    bs, ks = [4, 8, 16], [100.0, 200.0, 300.0]

    def y(b: int, k: float) -> float:
        return math.exp(0.3 * math.log2(b) + 0.002 * k)

    probes = {p: y(*p) for p in frame_probes(bs, ks)}
    got = choose("peak_power_w", {"peak_power_w": probes}, bs, ks, [(8, 200.0)])
    assert got.model == "separable" and got.cv_error == pytest.approx(0.0, abs=1e-12)
    assert got.margin == pytest.approx(UNVALIDATED_MARGIN)
    assert got.upper[(8, 200.0)] == pytest.approx(y(8, 200.0) * (1 + UNVALIDATED_MARGIN))
    assert within_noise({"separable": [0.05], "shape": [0.0]}, [0]) == ["shape"]
    assert within_noise({"separable": [0.003], "shape": [0.0]}, [0])[0] == "separable"


def test_a_power_limits_bound_never_exceeds_the_largest_share_any_probe_drew():
    """On a power-limit knob a wide statistical bound (here: separable forced onto rows that
    plateau at different limits) is cut to ``share * (1 + margin) * limit``, the largest share
    of its limit any probe drew; it never drops below the prediction. On a clock knob nothing
    is cut."""
    from fleet.agent.prediction.select import choose

    bs, ks = LIMIT_BS, LIMIT_KS
    power, probes, inner = limit_grid({8: 120.0, 16: 230.0, 32: 280.0, 64: 1e9})
    got = choose("peak_power_w", {"peak_power_w": probes}, bs, ks, inner, ["separable"])
    top = max(p / k for (_b, k), p in probes.items())
    assert top == pytest.approx(0.99)
    cut = 0
    for b, k in inner:
        raw = got.values[(b, k)] * (1 + got.margin)
        ceiling = top * (1 + got.margin) * k
        assert got.upper[(b, k)] == pytest.approx(max(min(raw, ceiling), got.values[(b, k)]))
        assert got.upper[(b, k)] >= power(b, k)  # still above the truth
        cut += raw > ceiling
    assert cut > 0  # the case is real: separable's bound went above what the limit allows

    clock = {(b, k * 5): v for (b, k), v in probes.items()}  # same numbers, a MHz knob
    got = choose("peak_power_w", {"peak_power_w": clock}, bs, [k * 5 for k in ks],
                 [(b, k * 5) for b, k in inner], ["separable"])  # fmt: skip
    for p, v in got.values.items():
        assert got.upper[p] == pytest.approx(v * (1 + got.margin))
