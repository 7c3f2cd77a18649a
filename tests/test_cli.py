"""The CLI as a user runs it: real subprocesses, real files, stdout/stderr/exit codes."""

import json

import pytest

from tests.conftest import run_cli

HEADER = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"
ROWS = [
    "8,307.2,0.10,4.0,3.5",
    "8,460.8,0.07,4.8,4.0",
    "32,307.2,0.30,4.6,4.0",
    "32,460.8,0.20,5.5,5.0",
]


@pytest.fixture
def files(write):
    prof = write("p.csv", HEADER, ROWS)
    eff = write("e.csv", "batch_size,samples_to_accuracy", ["8,10000", "32,15000", "64,"])
    return prof, eff


def test_select_json_contract(files):
    prof, eff = files
    r = run_cli(
        "select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "5", "--json"
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["batch_size"] == 8 and out["freq_mhz"] == 460.8
    assert out["peak_power_w"] == 4.8
    assert out["predicted_time_s"] == pytest.approx(0.07 / 8 * 10000)
    # the dropped batch size is said, on stderr, in one line
    assert "64" in r.stderr and "not in the profile" in r.stderr


def test_select_says_when_the_choice_is_expected_over_its_budget_in_a_longer_run(write, files):
    """A measured point records ``peak_forecast_w`` (its peak over a 10x longer run): the choice
    is the same (selection holds to ``peak_power_w``), its JSON carries the forecast, and where
    the forecast lies above the budget stderr says so in one line before the run."""
    _prof, eff = files
    rows = [r + f",{f}" for r, f in zip(ROWS, ("4.1", "4.95", "4.7", "5.6"), strict=True)]
    prof = write("pf.csv", HEADER + ",peak_forecast_w", rows)
    for budget, warned in (("5", False), ("4.9", True)):
        r = run_cli(
            "select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", budget,
            "--json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert (out["batch_size"], out["freq_mhz"], out["peak_power_w"]) == (8, 460.8, 4.8)
        assert out["peak_forecast_w"] == 4.95
        said = [line for line in r.stderr.splitlines() if "peak_forecast_w" in line]
        assert len(said) == int(warned), r.stderr
        if warned:
            assert "4.9 W budget" in said[0] and "expected at 5.0 W" in said[0]
    plain = run_cli("select", "--profile", str(files[0]), "--efficiency", str(eff), "--budget-w",
                    "4.9", "--json")  # fmt: skip
    assert json.loads(plain.stdout)["peak_forecast_w"] is None  # a profile without the column


def test_select_flips_with_budget(files):
    prof, eff = files
    # unlimited: b=8 @460.8 -> 87.5 s vs b=32 @460.8 -> 93.75 s; at 4.7 W only 307.2 for both
    r = run_cli(
        "select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "4.7", "--json"
    )
    out = json.loads(r.stdout)
    assert (out["batch_size"], out["freq_mhz"]) == (8, 307.2)


def test_select_energy_objective_and_table(files):
    prof, eff = files
    r = run_cli(
        "select",
        "--profile",
        str(prof),
        "--efficiency",
        str(eff),
        "--budget-w",
        "none",
        "--objective",
        "energy",
    )
    assert r.returncode == 0
    assert "objective: energy" in r.stdout and "460.8" in r.stdout


@pytest.mark.slow
def test_infeasible_budget_exits_2_naming_lowest_peak(files):
    prof, eff = files
    r = run_cli(
        "select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "3", "--json"
    )
    assert r.returncode == 2
    assert r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("powerfleet select: infeasible:")]
    assert len(lines) == 1
    assert "lowest measured peak power is 4 W at batch_size=8, freq_mhz=307.2" in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("budget", ["0", "-3", "abc"])
def test_bad_budget(files, budget):
    prof, eff = files
    r = run_cli("select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", budget)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--budget-w" in r.stderr and "is not a budget" in r.stderr


def test_malformed_profile_one_line_no_traceback(write, files):
    _, eff = files
    bad = write("bad.csv", "batch_size,freq_mhz,time_per_batch_s", ["8,307,0.1"])
    r = run_cli("select", "--profile", str(bad), "--efficiency", str(eff), "--budget-w", "5")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert str(bad) in r.stderr and "peak_power_w" in r.stderr


def test_disjoint_batch_sizes_error(write, files):
    prof, _ = files
    eff = write("e2.csv", "batch_size,samples_to_accuracy", ["16,100"])
    r = run_cli("select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "5")
    assert r.returncode == 2 and "no batch size is in both" in r.stderr


def test_inspect_json_summarises_and_validates(files):
    prof, _ = files
    r = run_cli("inspect", str(prof), "--budgets", "4.5,5,none", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["batch_sizes"] == [8, 32] and s["freqs_mhz"] == [307.2, 460.8]
    assert s["peak_power_w"] == {"min": 4.0, "max": 5.5}
    assert [p["batch_size"] for p in s["frontier"]["4.5 W"]] == [8]
    assert {p["batch_size"]: p["freq_mhz"] for p in s["frontier"]["5 W"]} == {8: 460.8, 32: 307.2}


def test_compare_json_rows_and_table(files):
    prof, eff = files
    r = run_cli(
        "compare", "--profile", str(prof), "--efficiency", str(eff), "--budgets", "5,none", "--json"
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    five = {x["method"]: x for x in rows if x["budget_w"] == 5.0}
    assert five["b1"]["batch_size"] == 32 and five["b1"]["cap_mhz"] == 307.2
    assert five["ours"]["speedup_vs_b1"] == pytest.approx((0.3 / 32 * 15000) / (0.07 / 8 * 10000))
    r = run_cli(
        "compare",
        "--profile",
        str(prof),
        "--efficiency",
        str(eff),
        "--caps",
        "5=460.8",
        "--budgets",
        "5",
    )
    assert r.returncode == 0 and "b1" in r.stdout and "oracle" in r.stdout


def test_infeasible_names_the_files_lowest_peak_even_when_unused(write, files):
    prof, _ = files
    eff = write("e32.csv", "batch_size,samples_to_accuracy", ["32,15000"])
    r = run_cli("select", "--profile", str(prof), "--efficiency", str(eff), "--budget-w", "4.2")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "lowest measured peak power is 4 W at batch_size=8, freq_mhz=307.2" in lines[0]
    assert "among the batch sizes with an efficiency: 4.6 W at batch_size=32" in lines[0]
