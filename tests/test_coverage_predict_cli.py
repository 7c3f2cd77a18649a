"""Coverage refusal and completion, `powerfleet predict` round trip, `profile --predict`, and
`select --json`'s "predicted" flag: real CLI subprocesses on the reference Nano profile."""

from __future__ import annotations

import json
import subprocess

import pytest

from fleet.core.choice import align
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from fleet.method.profile_io import read_rows
from fleet.trust.coverage import check_coverage, missing_points, read_coverage
from tests.conftest import ROOT, run_cli

NANO = str(ROOT / "simulations" / "profiles" / "nano_resnet18.csv")
EFF = str(ROOT / "simulations" / "efficiency" / "resnet18_svhn.csv")


def full_grid(budget: float | None) -> tuple[int, float]:
    """The brute-force answer on the complete reference profile: what coverage protects."""
    profile, eff, _ = align(load_profile(NANO), load_efficiency(EFF))
    c = select(profile, eff, budget)
    return c.batch_size, c.freq_mhz


def select_json(profile: str, budget: str) -> subprocess.CompletedProcess:
    return run_cli(
        "select", "--profile", profile, "--efficiency", EFF, "--budget-w", budget, "--json"
    )


@pytest.fixture(scope="module")
def staircase5(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("cov") / "stair5.csv"
    r = run_cli(
        "profile", "--backend", "replay", "--replay-profile", NANO, "--model", "resnet18",
        "--budget-w", "5", "--out", str(out), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["probes"] == staircase_probes(NANO, 5.0)
    return str(out)


def staircase_probes(path: str, budget: float) -> int:
    """By hand: the staircase climbs the largest batch from the lowest clock to its first point
    over the budget, then each smaller batch from the last feasible clock of the one before."""
    prof = load_profile(path)
    peak = {(p.batch_size, p.freq_mhz): p.peak_power_w for p in prof.points}
    freqs = sorted({f for _, f in peak})
    n, start = 0, 0
    for b in sorted({b for b, _ in peak}, reverse=True):
        top = max(j for j, f in enumerate(freqs) if peak[(b, f)] <= budget)
        n += top - start + 1 + (top + 1 < len(freqs))
        start = top
    return n


@pytest.fixture(scope="module")
def predicted(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("pred") / "predict.csv"
    r = run_cli(
        "profile", "--backend", "replay", "--replay-profile", NANO, "--model", "resnet18",
        "--predict", "--out", str(out), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["probes"], summary["predicted"], summary["plan"]) == (18, 54, "predict")
    return str(out)


@pytest.mark.slow
def test_staircase_profile_refused_above_its_budget_naming_it(staircase5):
    r = select_json(staircase5, "7")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == ""
    assert "made by the staircase for 5 W" in lines[0]
    assert "covers budgets up to 5 W" in lines[0]
    assert "could fit and beat the choice" in lines[0]  # names an unmeasured, better point
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_staircase_profile_answers_at_its_own_budget_as_the_full_grid(staircase5):
    mine = json.loads(select_json(staircase5, "5").stdout)
    full = json.loads(select_json(NANO, "5").stdout)
    assert (mine["batch_size"], mine["freq_mhz"]) == (full["batch_size"], full["freq_mhz"])
    assert mine["predicted"] is False


@pytest.mark.slow
def test_refusal_lifted_once_the_grid_is_filled(staircase5, predicted):
    full = json.loads(select_json(NANO, "7").stdout)
    assert (full["batch_size"], full["freq_mhz"]) == full_grid(7.0)
    r = select_json(predicted, "7")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["batch_size"], got["freq_mhz"]) == full_grid(7.0)  # prediction is that good


@pytest.mark.slow
def test_select_json_says_predicted_on_a_predicted_choice(predicted):
    rows = {
        (int(r["batch_size"]), float(r["freq_mhz"])): r["source"]
        for _n, r in read_rows(predicted)[1]
    }
    assert sum(s != "predicted" for s in rows.values()) == 18
    flags = []
    for budget in ("4.5", "5", "7"):
        got = json.loads(select_json(predicted, budget).stdout)
        key = (got["batch_size"], got["freq_mhz"])
        assert got["predicted"] is (rows[key] == "predicted")  # the flag tells the truth
        flags.append(got["predicted"])
    assert any(flags)  # interior knobs are not probed, and the budgets land on some


def test_missing_points_are_what_the_device_should_probe(staircase5):
    profile, eff, _ = align(load_profile(staircase5), load_efficiency(EFF))
    cov = read_coverage(staircase5)
    assert cov.staircase_budget_w == 5.0 and len(cov.batch_sizes) * len(cov.knobs) == 72
    choice = select(profile, eff, 7.0)
    gaps = missing_points(profile, cov, eff, 7.0, choice)
    assert full_grid(7.0) in gaps  # the point the staircase never saw is one to probe
    # every gap is truly unmeasured, and a point over 7 W on its own row's evidence is not one
    assert all(profile.point(b, f) is None for b, f in gaps)
    check_coverage(profile, cov, eff, 5.0, select(profile, eff, 5.0))  # no raise at 5 W


@pytest.mark.slow
def test_predict_cli_round_trip_keeps_measured_rows(tmp_path, predicted):
    header, numbered, comments = read_rows(predicted)
    sparse = tmp_path / "sparse.csv"
    keep = [r for _n, r in numbered if r["source"] != "predicted"]
    lines = [",".join(header)] + [",".join(r[h] for h in header) for r in keep]
    sparse.write_text("# probed on a replayed nano\n" + "\n".join(lines) + "\n")
    full = tmp_path / "full.csv"
    r = run_cli(
        "predict", "--profile", str(sparse), "--batch-sizes", "4,8,16,32,64,128",
        "--freqs", "76.8,153.6,230.4,307.2,384,460.8,537.6,614.4,691.2,768,844.8,921.6",
        "--out", str(full), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["predicted"] == 54
    _h, out_rows, out_comments = read_rows(str(full))
    by_key = {(int(x["batch_size"]), float(x["freq_mhz"])): x for _n, x in out_rows}
    assert len(by_key) == 72
    for row in keep:
        got = by_key[(int(row["batch_size"]), float(row["freq_mhz"]))]
        for col in ("time_per_batch_s", "peak_power_w", "mean_power_w", "source"):
            assert got[col] == row[col]
    assert sum(x["source"] == "predicted" for x in by_key.values()) == 54
    assert "probed on a replayed nano" in out_comments
    assert any(c.startswith("predicted: 54 of 72 rows") for c in out_comments)
    assert any(c.startswith("predict_peak_power_w: method=shape") for c in out_comments)
    load_profile(str(full))  # a valid profile for select


def test_predict_cli_too_few_probes_exits_2_one_line(tmp_path):
    sparse = tmp_path / "two.csv"
    sparse.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w\n4,100,1.0,3.0\n4,200,0.6,3.5\n"
    )
    r = run_cli(
        "predict", "--profile", str(sparse), "--freqs", "100,150,200",
        "--out", str(tmp_path / "o.csv"),
    )  # fmt: skip
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "too few" in r.stderr and "2 or more batch sizes" in r.stderr
    assert not (tmp_path / "o.csv").exists()
