"""The calibrated reference files against the paper, and the seeds' draws of the truth.

The grid is regenerated from the committed profiles and efficiency files exactly as
`powerfleet experiment paper` does, then divided cell by cell against the paper's Tables 2-4
(transcribed in simulations/paper_cells.csv).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet.core.efficiency import Efficiency
from fleet.reports.experiment import (
    Case,
    Grid,
    OracleBeatenError,
    _check_oracle,
    run_grid,
    seed_truths,
)
from simulations.calibrate import predict
from simulations.calibrate.audit import fitted_cells
from simulations.calibrate.calibration_file import CALIBRATION_PATH
from simulations.calibrate.evaluate import ratio_errors
from simulations.calibrate.floors import baseline_floors, line_floor
from simulations.calibrate.paper import BOARDS_OF, METHODS, load_cells
from simulations.devicemodel import fitted, physics
from tests.conftest import ROOT
from tests.test_paper_audit import RATIO_MISSES

SIM = ROOT / "simulations"

#: Goal of issues 13 and 21: mean |ratio error| of B1/ours and B2/ours per model and board.
GOAL = 0.10


@pytest.fixture(scope="module")
def grid_rows():
    grid = Grid(SIM / "profiles", SIM / "efficiency", seeds=5)
    return run_grid(grid)


def _project_values(rows) -> dict[tuple, float]:
    out = {}
    for r in rows:
        if r["method"] in METHODS and isinstance(r.get("time_mean_s"), float):
            out[(r["model"], r["device"], r["dataset"], r["budget_w"], r["method"])] = r[
                "time_mean_s"
            ]
    return out


def test_ratio_errors_meet_the_goal(grid_rows):
    """Against the audited cells (Table 3's faulty Dickens B2 cell corrected, simulations/
    calibrate/audit.py); the misses the committed fit leaves are listed, with their reason, in
    tests/test_paper_audit.py (RATIO_MISSES), which also checks each is a real miss."""
    cells = fitted_cells(load_cells())
    errs = ratio_errors(_project_values(grid_rows), cells)
    # every model and board the paper reports, both ratios
    assert set(errs) == {
        (m, b, ref) for m, boards in BOARDS_OF.items() for b in boards for ref in ("b1", "b2")
    }
    for key, err in errs.items():
        assert err <= RATIO_MISSES.get(key, GOAL), (key, round(err, 3))
    # with the faulty cell corrected no column of the paper sets a floor above the goal
    assert all(v < GOAL for v in baseline_floors(cells).values())


def test_no_method_beats_the_oracle(grid_rows):
    by = {}
    for r in grid_rows:
        by.setdefault((r["model"], r["device"], r["dataset"], r["budget_w"]), {})[r["method"]] = r
    assert len(by) == 3 * 2 * 2 * 3  # models x boards x datasets x budgets
    for key, methods in by.items():
        best = methods["oracle"]["time_mean_s"]
        for name, r in methods.items():
            t = r.get("time_mean_s")
            if isinstance(t, float) and math.isfinite(t):
                assert t >= best * (1 - 1e-12), (key, name)
                if r.get("gap_to_oracle_pct") is not None:
                    assert r["gap_to_oracle_pct"] >= -1e-9


def test_a_method_faster_than_the_oracle_stops_the_report():
    case = Case("resnet18", "nano", "svhn", "p", "x", "t")
    _check_oracle({"oracle": [10.0, 10.0], "ours": [10.0, 12.0]}, case, 4.5)
    with pytest.raises(OracleBeatenError, match="ours .* beat the oracle .* on the mean"):
        _check_oracle({"oracle": [10.0, 10.0], "ours": [10.0, 9.0]}, case, 4.5)
    # the paper's oracle is one configuration chosen on the mean: another may win one seed
    _check_oracle({"oracle": [10.0, 12.0], "ours": [11.0, 11.5]}, case, 4.5)


def test_seed_draws_keep_the_recorded_mean_and_spread():
    truth = Efficiency(
        {4: 1000.0, 8: 1500.0, 16: 2500.0}, std={4: 100.0, 8: 150.0, 16: 300.0}, source="x"
    )
    draws = seed_truths(truth, 5, "salt")
    for b, n in truth.samples.items():
        vals = np.array([d.samples[b] for d in draws])
        assert vals.mean() == pytest.approx(n, rel=1e-12)
        assert vals.std() == pytest.approx(truth.std[b], rel=1e-12)
    again = seed_truths(truth, 5, "salt")
    assert [d.samples for d in draws] == [d.samples for d in again]


def test_vectorised_model_is_devicemodel():
    """calibrate fits the formulas devicemodel generates from (same numbers, noise-free)."""
    for dev in fitted.DEVICES.values():
        for key in ("resnet18", "mobilenetv2", "transformer"):
            wl = fitted.WORKLOADS[key]
            ts, peak, mean = predict.grid(dev, wl)
            for i, b in enumerate(wl.batch_sizes):
                for j, f in enumerate(dev.freqs_mhz):
                    t = physics.time_per_batch_s(dev, wl, b, f) / b
                    assert ts[i, j] == pytest.approx(t, rel=1e-12)
                    assert peak[i, j] == pytest.approx(
                        physics.peak_power_w(dev, wl, b, f), rel=1e-12
                    )
                    assert mean[i, j] == pytest.approx(
                        physics.mean_power_w(dev, wl, b, f), rel=1e-12
                    )


def test_efficiency_files_are_the_fit_and_say_their_target():
    data = CALIBRATION_PATH
    assert data.exists(), "simulations/calibration.json is committed"
    for (model, ds), curve in fitted.EFFICIENCY_CURVES.items():
        assert curve.fitted, (model, ds)
        text = (SIM / "efficiency" / f"{model}_{ds}.csv").read_text()
        assert f"target_accuracy={curve.target_accuracy:g}" in text
        rows = [ln.split(",") for ln in text.splitlines() if ln and not ln.startswith("#")][1:]
        for row in rows:
            b, n = int(row[0]), int(row[1])
            assert n == round(dict(curve.fitted)[b])
            assert float(row[6]) == curve.target_accuracy


def test_paper_cells_transcription():
    """Spot checks against the paper's text (§5.2 quotes these ratios)."""
    cells = {c.key: c.time_s for c in load_cells()}
    assert len(cells) == 96
    # "reducing the training time by 1.7x and 1.8x" (Table 4, SVHN) and 2.14x (Table 3)
    t = ("resnet18", "tx2nx", "svhn", 4.5)
    assert cells[(*t, "b1")] / cells[(*t, "ours")] == pytest.approx(1.71, abs=0.01)
    d = ("transformer", "nano", "dickens", 7.0)
    assert cells[(*d, "b2")] / cells[(*d, "ours")] == pytest.approx(2.14, abs=0.01)


def test_line_floor_is_the_brute_force_minimum():
    """The vertex enumeration equals a dense search over intercept and slope (both >= 0)."""
    rng = np.random.default_rng(7)
    x = np.array([1 / 307.2, 1 / 614.4, 1 / 921.6])
    a_grid = np.linspace(0.0, 20000.0, 801)
    c_grid = np.linspace(0.0, 6.0e6, 801)
    A, C = np.meshgrid(a_grid, c_grid, indexing="ij")
    for _ in range(5):
        t = rng.uniform(3000.0, 15000.0, 3)
        w = 1.0 / rng.uniform(3000.0, 10000.0, 3)
        dense = sum(wk * np.abs(A + C * xk - tk) for xk, tk, wk in zip(x, t, w, strict=True)).min()
        exact = line_floor(list(x), list(t), list(w))
        assert exact <= dense + 1e-9
        assert exact == pytest.approx(dense, rel=0.01)  # the grid is 7,500 s·MHz coarse
    # points on such a line have no floor
    assert line_floor(list(x), [500 + 4e6 * v for v in x], [1.0] * 3) < 1e-9


def test_table3_dickens_b2_is_off_any_one_batch_line():
    """By hand: on the Nano's caps a line through 4.5 W and no limit puts 7 W at (t1 + 3 t3) / 4;
    Dickens B2 (14278, ?, 7867) gives 9475 against the paper's 12941, a ratio error of
    3466 / 6043 on that cell alone, and Austen's closest line misses by 171 / 3982."""
    floors = baseline_floors(load_cells())
    dickens = (12941 - (14278 + 3 * 7867) / 4) / 6043
    austen = (6081 - (9425 + 3 * 5193) / 4) / 3982
    assert floors[("transformer", "nano", "b2")] == pytest.approx(
        (dickens + abs(austen)) / 6, rel=1e-6
    )
    assert floors[("transformer", "nano", "b2")] > GOAL
    assert all(v < 0.02 for k, v in floors.items() if k != ("transformer", "nano", "b2"))
