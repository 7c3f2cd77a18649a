"""Verify before trusting: a wrongly predicted choice is probed, corrected, and re-selected."""

from __future__ import annotations

import pytest

from fleet.agent.prediction.design import design_probes
from fleet.agent.prediction.predict import predict_profile
from fleet.core.efficiency import load_efficiency
from fleet.core.selection import select
from fleet.method.profile_io import read_rows
from fleet.trust.verify import profile_from_rows, select_verified
from tests.conftest import ROOT

NANO = str(ROOT / "simulations" / "profiles" / "nano_resnet18.csv")
EFF = str(ROOT / "simulations" / "efficiency" / "resnet18_svhn.csv")


def truth() -> dict:
    return {(int(r["batch_size"]), float(r["freq_mhz"])): r for _n, r in read_rows(NANO)[1]}


def predicted_table() -> list[dict]:
    table = truth()
    bs = sorted({k[0] for k in table})
    fs = sorted({k[1] for k in table})
    probes = [dict(table[k], source="measured") for k in design_probes(bs, fs)]
    return predict_profile(probes, bs, fs).rows


def grid_best(eff, budget: float) -> tuple[tuple[int, float], float]:
    """Brute force over the full measured grid: the best (b, f) within ``budget`` and how far
    the runner-up is behind it (a case is only a test of the choice if that is clear of the
    prediction's ~1 % error)."""
    costs = sorted(
        (float(r["time_per_batch_s"]) / k[0] * eff.samples[k[0]], k)
        for k, r in truth().items()
        if float(r["peak_power_w"]) <= budget and k[0] in eff.samples
    )
    return costs[0][1], costs[1][0] / costs[0][0] - 1


@pytest.mark.slow
def test_a_point_predicted_under_budget_but_over_it_is_corrected_and_reselected():
    eff = load_efficiency(EFF)
    table = truth()
    rows = predicted_table()
    best, lead = grid_best(eff, 4.5)
    assert best == (16, 537.6) and lead > 0.01  # no near-tie at 4.5 W
    # b=8 at 614.4 MHz is 11 mW over 4.5 W in truth: the point a small error hides
    wrong = next(r for r in rows if (r["batch_size"], float(r["freq_mhz"])) == (8, 614.4))
    assert wrong["source"] == "predicted" and float(table[(8, 614.4)]["peak_power_w"]) > 4.5
    wrong["peak_power_w"] = 4.4  # the model's mistake: looks feasible at 4.5 W and fastest
    wrong["peak_power_bound_w"] = 4.45  # and its validation did not see it coming
    chosen = select(profile_from_rows(rows), eff, 4.5)
    assert (chosen.batch_size, chosen.freq_mhz) == (8, 614.4)
    probed = []

    def measure(b: int, f: float) -> dict:
        probed.append((b, f))
        return dict(table[(b, f)])

    got = select_verified(rows, eff, 4.5, measure)
    assert probed[0] == (8, 614.4)
    first = got.corrections[0]
    assert first.reason.startswith("over budget")
    assert first.measured_peak_w == float(table[(8, 614.4)]["peak_power_w"])
    key = (got.choice.batch_size, got.choice.freq_mhz)
    assert float(table[key]["peak_power_w"]) <= 4.5  # the final choice truly fits
    assert key == best  # and is the full grid's answer
    final = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in got.rows}
    assert final[key]["source"] == "measured"
    assert final[(8, 614.4)]["source"] == "measured"
    assert len(probed) == len(got.corrections) <= 6


@pytest.mark.slow
def test_a_measured_choice_needs_no_probe():
    eff = load_efficiency(EFF)
    rows = predicted_table()
    # No budget: the choice lands on the highest clock, which the design always probes.
    got = select_verified(rows, eff, None, lambda b, f: (_ for _ in ()).throw(AssertionError))
    full = select(profile_from_rows([dict(r) for r in truth().values()]), eff, None)
    assert (got.choice.batch_size, got.choice.freq_mhz) == (full.batch_size, full.freq_mhz)
    measured = {
        (int(r["batch_size"]), float(r["freq_mhz"])) for r in rows if r["source"] != "predicted"
    }
    assert (got.choice.batch_size, got.choice.freq_mhz) in measured
    assert got.corrections == []


@pytest.mark.slow
def test_a_better_point_predicted_just_over_budget_is_probed_and_taken():
    eff = load_efficiency(EFF)
    table = truth()
    rows = predicted_table()
    best, lead = grid_best(eff, 4.5)
    assert lead > 0.01  # the full grid's best leads clearly: hiding it changes the choice
    hidden = next(r for r in rows if (r["batch_size"], float(r["freq_mhz"])) == best)
    assert hidden["source"] == "predicted" and float(table[best]["peak_power_w"]) <= 4.5
    hidden["peak_power_w"] = 4.5 * 1.02  # 2 % over 4.5 W by prediction, within it in truth
    first = select(profile_from_rows(rows), eff, 4.5)
    assert (first.batch_size, first.freq_mhz) != best
    got = select_verified(rows, eff, 4.5, lambda b, f: dict(table[(b, f)]))
    assert (got.choice.batch_size, got.choice.freq_mhz) == best
    assert best in [(c.batch_size, c.freq_mhz) for c in got.corrections]
    # with no margin the hidden point stays hidden
    got = select_verified(rows, eff, 4.5, lambda b, f: dict(table[(b, f)]), margin=0.0)
    assert (got.choice.batch_size, got.choice.freq_mhz) != best
