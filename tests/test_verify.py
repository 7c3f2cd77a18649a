"""Verify before trusting: a wrongly predicted choice is probed, corrected, and re-selected."""

from __future__ import annotations

from fleet.agent.predict import predict_profile
from fleet.agent.predict_design import design_probes
from fleet.agent.profile_io import read_rows
from fleet.core.efficiency import load_efficiency
from fleet.core.selection import select
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


def test_a_point_predicted_under_budget_but_over_it_is_corrected_and_reselected():
    eff = load_efficiency(EFF)
    table = truth()
    rows = predicted_table()
    wrong = next(r for r in rows if (r["batch_size"], float(r["freq_mhz"])) == (16, 614.4))
    assert wrong["source"] == "predicted" and float(table[(16, 614.4)]["peak_power_w"]) > 4.5
    wrong["peak_power_w"] = 4.4  # the model's mistake: looks feasible at 4.5 W and fastest
    wrong["peak_power_bound_w"] = 4.45  # and its validation did not see it coming
    assert (select(profile_from_rows(rows), eff, 4.5).freq_mhz) == 614.4
    probed = []

    def measure(b: int, f: float) -> dict:
        probed.append((b, f))
        return dict(table[(b, f)])

    got = select_verified(rows, eff, 4.5, measure)
    assert probed[0] == (16, 614.4)
    first = got.corrections[0]
    assert first.reason.startswith("over budget")
    assert first.measured_peak_w == float(table[(16, 614.4)]["peak_power_w"])
    key = (got.choice.batch_size, got.choice.freq_mhz)
    assert float(table[key]["peak_power_w"]) <= 4.5  # the final choice truly fits
    assert key == (16, 537.6)  # and is the full grid's answer (test_coverage_predict_cli)
    final = {(int(r["batch_size"]), float(r["freq_mhz"])): r for r in got.rows}
    assert final[key]["source"] == "measured"
    assert final[(16, 614.4)]["source"] == "measured"
    assert len(probed) == len(got.corrections) <= 6


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


def test_a_better_point_predicted_just_over_budget_is_probed_and_taken():
    eff = load_efficiency(EFF)
    table = truth()
    rows = predicted_table()
    hidden = next(r for r in rows if (r["batch_size"], float(r["freq_mhz"])) == (16, 614.4))
    hidden["peak_power_w"] = 5.1  # 2 % over 5 W by prediction; 4.65 W in truth
    assert select(profile_from_rows(rows), eff, 5.0).freq_mhz != 614.4
    got = select_verified(rows, eff, 5.0, lambda b, f: dict(table[(b, f)]))
    assert (got.choice.batch_size, got.choice.freq_mhz) == (16, 614.4)
    assert (16, 614.4) in [(c.batch_size, c.freq_mhz) for c in got.corrections]
    # with no margin the hidden point stays hidden
    got = select_verified(rows, eff, 5.0, lambda b, f: dict(table[(b, f)]), margin=0.0)
    assert (got.choice.batch_size, got.choice.freq_mhz) != (16, 614.4)
