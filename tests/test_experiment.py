"""The experiment report regenerated small, and its numbers checked against `compare`."""

import json

import pytest

from tests.conftest import ROOT, run_cli

SIM = ROOT / "simulations"


@pytest.mark.slow
def test_small_report_numbers_match_compare(tmp_path):
    out = tmp_path / "exp"
    r = run_cli(
        "experiment", "paper", "--out", str(out), "--seeds", "1", "--devices", "nano", "--json"
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert (out / "report.md").exists() and (out / "results.csv").exists()
    assert len(list((out / "figures").glob("*.png"))) >= 5
    # The baselines' cap covers every model on the device: pass the other profiles to compare.
    c = run_cli(
        "compare",
        "--profile",
        str(SIM / "profiles/nano_resnet18.csv"),
        "--efficiency",
        str(SIM / "efficiency/resnet18_cifar10-proxy.csv"),
        "--truth",
        str(SIM / "efficiency/resnet18_cinic.csv"),
        "--cap-profile",
        str(SIM / "profiles/nano_mobilenetv2.csv"),
        "--cap-profile",
        str(SIM / "profiles/nano_transformer.csv"),
        "--budgets",
        "4.5,7,none",
        "--json",
    )
    assert c.returncode == 0, c.stderr
    expected = json.loads(c.stdout)["rows"]
    mine = [x for x in rows if x["model"] == "resnet18" and x["dataset"] == "cinic"]
    assert len(mine) == len(expected) == 15
    for e in expected:
        m = next(x for x in mine if x["method"] == e["method"] and x["budget_w"] == e["budget_w"])
        assert (m["batch_size"], m["freq_mhz"]) == (e["batch_size"], e["freq_mhz"])
        assert m["time_mean_s"] == pytest.approx(e["predicted_time_s"], rel=1e-12)
        assert m["energy_mean_j"] == pytest.approx(e["predicted_energy_j"], rel=1e-12)
        assert m["time_std_s"] == 0.0
    report = (out / "report.md").read_text()
    ours = next(x for x in mine if x["method"] == "ours" and x["budget_w"] == 4.5)
    assert f"{ours['time_mean_s']:,.0f} ± 0" in report
    assert "modeled / modeled / modeled" in report


@pytest.mark.slow
def test_seeds_spread_is_deterministic(tmp_path):
    a = run_cli(
        "experiment",
        "paper",
        "--out",
        str(tmp_path / "a"),
        "--devices",
        "nano",
        "--models",
        "resnet18",
        "--seeds",
        "3",
    )
    b = run_cli(
        "experiment",
        "paper",
        "--out",
        str(tmp_path / "b"),
        "--devices",
        "nano",
        "--models",
        "resnet18",
        "--seeds",
        "3",
    )
    assert a.returncode == b.returncode == 0
    ra = (tmp_path / "a" / "results.csv").read_text()
    assert ra == (tmp_path / "b" / "results.csv").read_text()
    rows = json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    assert any(r["time_std_s"] > 0 for r in rows)


@pytest.mark.slow
def test_report_command_on_a_run_dir(tmp_path):
    run = tmp_path / "run"
    s = run_cli("simulate", "--engine", "direct", "--run-dir", str(run))
    assert s.returncode == 0, s.stderr
    r = run_cli("report", str(run), "--json")
    assert r.returncode == 0, r.stderr
    md = (run / "report.md").read_text()
    rep = json.loads((run / "report.json").read_text())
    for d in rep["devices"]:
        assert f"| {d['device']} | {d['device_type']} |" in md
    assert f"budget violations: {len(rep['fleet']['budget_violations'])}" in md
    assert json.loads(r.stdout)["figures"]
    bad = run_cli("report", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and "nowhere: not found (expected a run directory)" in bad.stderr
