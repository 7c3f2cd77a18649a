"""Issue 21's reference audit: the paper's cells checked, and the goals on the committed data.

Everything here reads files in the repo (paper_cells.csv, calibration.json, the committed
docs/paper-report/results.json and the reference profiles); nothing refits.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from simulations.calibrate.audit import (
    PAPER_CELLS,
    copied_stds,
    faulty_cells,
    fitted_cells,
    ours_runs_baseline,
)
from simulations.calibrate.calibration_file import CALIBRATION_PATH, key_text
from simulations.calibrate.goals import GAP_SLACK_PCT, RATIO_GOAL, measure
from simulations.calibrate.paper import load_cells
from tests.conftest import ROOT

RESULTS = ROOT / "docs" / "paper-report" / "results.json"
SIM = ROOT / "simulations"

#: Ratio errors the committed fit misses (issue 21 goal 0.10), with the value it reaches. The
#: ResNet18 device model cannot hold together the paper's ours/fastest (W_GAP), Fig. 1 and
#: Fig. 2 and the profiles' physics (hinges in .objective) and its B1/ours, B2/ours spread
#: across 4.5 W -> 7 W: the paper's ours gains 1.6-2.1x from 4.5 W to 7 W, the model's 1.3-1.5x,
#: so ours at 4.5 W is too fast against the baselines at their 4.5 W cap. Weight sweeps (ratio
#: weight 3.5 / 6 / 8, ours/fastest 6 / 10 / 15) left these at 0.13-0.35; the committed weights
#: keep every other goal (docs/paper-report/report.md, "Audit").
RATIO_MISSES = {
    ("resnet18", "nano", "b1"): 0.14,
    ("resnet18", "tx2nx", "b1"): 0.14,
    ("resnet18", "tx2nx", "b2"): 0.11,
}


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())


def test_cells_are_counted_honestly():
    cells = load_cells()
    assert len(cells) == 96 and PAPER_CELLS == 120
    assert {c.model for c in cells} == {"resnet18", "mobilenetv2", "transformer"}


def test_the_faulty_cell_is_table3_dickens_b2_at_7w():
    (f,) = faulty_cells(load_cells())
    assert f.cell.key == ("transformer", "nano", "dickens", 7.0, "b2")
    assert f.ratio == pytest.approx(12941 / 6081)
    # B2 runs one batch: Dickens/Austen in its row at 4.5 W and without a limit, by hand
    row = (14278 / 9425, 7867 / 5193)
    assert f.row_ratios == pytest.approx(row)
    assert f.corrected_s == pytest.approx(6081 * sum(row) / 2)
    assert 9200 < f.corrected_s < 9225
    # the other 11 Dickens/Austen pairs of Table 3 sit within 1.514-1.518
    assert len(f.all_ratios) == 11 and 1.514 < min(f.all_ratios) <= max(f.all_ratios) < 1.518
    # its std/mean (532/12941) is 2 % from none of the Dickens cells' values
    assert all(abs(f.rel_std / r - 1) > 0.02 for r in f.row_rel_stds)
    fixed = {c.key: c.time_s for c in fitted_cells(load_cells())}
    assert fixed[f.cell.key] == pytest.approx(f.corrected_s)
    assert sum(1 for c in load_cells() if fixed[c.key] != c.time_s) == 1


def test_copied_stds_are_found():
    found = {(x.cell.key, x.source.key) for x in copied_stds(load_cells())}
    assert {
        # the audit's three: Table 4 SVHN B2 4.5 W repeats B1's 1943, Table 4 CINIC B2 7 W
        # repeats Table 2's 897, Table 2 MobileNetV2 SVHN ours 4.5 W (916) is B2's 912
        (("resnet18", "tx2nx", "svhn", 4.5, "b2"), ("resnet18", "tx2nx", "svhn", 4.5, "b1")),
        (("resnet18", "tx2nx", "cinic", 7.0, "b2"), ("resnet18", "nano", "cinic", 7.0, "b2")),
        (("mobilenetv2", "nano", "svhn", 4.5, "ours"), ("mobilenetv2", "nano", "svhn", 4.5, "b2")),
    } <= found
    # beyond them only the fastest row repeating ours's cell and Table 4 CINIC ours 4.5 W
    # (889 against the fastest's 893, std/mean 0.163 matching no other TX2 NX CINIC cell)
    assert {k for k, _ in found} - {
        ("resnet18", "tx2nx", "svhn", 4.5, "b2"),
        ("resnet18", "tx2nx", "cinic", 7.0, "b2"),
        ("mobilenetv2", "nano", "svhn", 4.5, "ours"),
    } == {
        ("mobilenetv2", "nano", "svhn", 4.5, "oracle"),
        ("resnet18", "tx2nx", "cinic", 4.5, "ours"),
    }
    # a cell printed twice with the same mean (ours = fastest) is not a copy
    keys = {k for k, _ in found}
    assert ("resnet18", "nano", "svhn", 7.0, "ours") not in keys


def test_ours_repeats_a_baseline_where_the_paper_prints_it():
    runs = ours_runs_baseline(load_cells())
    for ds in ("svhn", "cinic"):
        for b in (7.0, None):
            assert runs[("mobilenetv2", "nano", ds, b)] == ("b2", None)
    for ds in ("austen", "dickens"):
        assert runs[("transformer", "nano", ds, None)] == ("b1", None)
    assert len(runs) == 6


def test_goals_on_the_committed_report(results):
    m = measure(results, fitted_cells(load_cells()))
    assert len(m["gaps"]) == 24
    for g in m["gaps"]:
        assert g["pct"] <= g["paper_pct"] + GAP_SLACK_PCT, g
    assert m["gap_ok"]
    assert len(m["sensitivity"]) == 6 and m["sensitivity_ok"]
    assert all(s["max_pct"] <= 5.0 for s in m["sensitivity"])
    assert len(m["ratio_errors"]) == 8
    for key, err in m["ratio_errors"].items():
        assert err <= RATIO_MISSES.get(key, RATIO_GOAL), (key, round(err, 3))
    # every documented miss is a real miss (no stale exception hides a met goal)
    for key in RATIO_MISSES:
        assert m["ratio_errors"][key] > RATIO_GOAL, key


def test_leave_one_out_is_stored_beside_the_fit():
    data = json.loads(CALIBRATION_PATH.read_text())
    cells = load_cells()
    assert {key_text(c.key) for c in cells} == set(data["leave_one_out"])
    assert {key_text(c.key) for c in cells} == set(data["cell_log_residuals"])


def test_the_oracle_is_one_configuration_chosen_on_the_mean(results):
    """Brute force: every feasible profile point costed with the target's mean N; the report's
    fastest row must be that argmin, one choice for all seeds."""
    rows = [r for r in results["rows"] if r["method"] == "oracle"]
    assert len(rows) == 36
    for r in rows:
        prof = load_profile(SIM / "profiles" / f"{r['device']}_{r['model']}.csv")
        eff = load_efficiency(SIM / "efficiency" / f"{r['model']}_{r['dataset']}.csv")
        best = None
        for p in prof.points:
            if r["budget_w"] is not None and p.peak_power_w > r["budget_w"]:
                continue
            n = eff.samples.get(p.batch_size)
            if n is None:
                continue
            t = p.time_per_batch_s / p.batch_size * n
            if best is None or t < best[0]:
                best = (t, p.batch_size, p.freq_mhz)
        assert (r["batch_size"], r["freq_mhz"]) == best[1:], r
        assert r["choices_agree"] is True
        assert r["time_mean_s"] == pytest.approx(best[0], rel=1e-9)


@pytest.mark.slow
def test_audit_benchmark_prints_the_evidence():
    got = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "paper_audit.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert got.returncode in (0, 1), got.stderr
    assert "Faulty cell: Table 3 transformer nano dickens B2 7 W" in got.stdout
    assert "2.1281" in got.stdout and "9,212" in got.stdout
    assert "96 are transcribed" in got.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "paper_audit.py"), "--results", "nowhere"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "nowhere" in bad.stderr and "Traceback" not in bad.stderr
