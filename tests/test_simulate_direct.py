"""`powerfleet simulate --engine direct` on the shipped scenarios, checked device by device."""

import json
import math

import pytest

from fleet.common.errors import InfeasibleError
from fleet.config.fleetfile import load_fleet
from fleet.core.choice import align
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from fleet.core.selection import select
from tests.conftest import ROOT, run_cli

DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"


@pytest.mark.slow
def test_default_fleet_json_matches_select_and_respects_budgets(tmp_path):
    r = run_cli(
        "simulate",
        "--fleet",
        str(DEFAULT),
        "--engine",
        "direct",
        "--run-dir",
        str(tmp_path / "run"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    fleet = load_fleet(DEFAULT)
    assert [d["device"] for d in rep["devices"]] == [d.name for d in fleet.devices]
    for row, spec in zip(rep["devices"], fleet.devices, strict=True):
        for key in (
            "device",
            "device_type",
            "budget_w",
            "profile",
            "efficiency",
            "batch_size",
            "freq_mhz",
            "time_s",
            "energy_j",
            "peak_power_w",
            "status",
        ):
            assert key in row
        prof, eff, _ = align(load_profile(row["profile"]), load_efficiency(row["efficiency"]))
        try:
            c = select(prof, eff, row["budget_w"])
        except InfeasibleError:
            assert row["status"] == "infeasible" and row["batch_size"] is None
            continue
        assert (row["batch_size"], row["freq_mhz"]) == (c.batch_size, c.freq_mhz)
        if row["budget_w"] is not None and not spec.schedule:
            assert row["peak_power_w"] <= row["budget_w"]
        segs = row["segments"] or []
        if any(seg["reason"] == "learned" for seg in segs):
            # it learnt its own efficiency and moved (learn_efficiency = "online" by default):
            # each stretch at its own point's profiled mean power, within the budget
            assert len(segs) >= 2 and segs[0]["batch_size"] == c.batch_size
            for seg in segs:
                pt = next(
                    p for p in prof.points
                    if (p.batch_size, p.freq_mhz) == (seg["batch_size"], seg["freq_mhz"])
                )  # fmt: skip
                dur = seg["end_s"] - seg["start_s"]
                assert seg["energy_j"] == pytest.approx(pt.mean_power_w * dur, rel=1e-9)
                if row["budget_w"] is not None:
                    assert pt.peak_power_w <= row["budget_w"]
            assert row["energy_j"] == pytest.approx(sum(seg["energy_j"] for seg in segs))
            continue
        # energy = profiled mean power x time (single-budget devices)
        if not spec.schedule:
            assert row["energy_j"] == pytest.approx(c.mean_power_w * row["time_s"], rel=1e-9)
    f = rep["fleet"]
    ok = [d for d in rep["devices"] if d["status"] == "ok"]
    assert f["energy_j"] == pytest.approx(sum(d["energy_j"] for d in ok))
    assert f["round_time_s"] == max(d["time_s"] for d in ok)
    assert f["budget_violations"] == []
    assert f["status_counts"] == {"ok": 7, "infeasible": 1}
    on_disk = json.loads((tmp_path / "run" / "report.json").read_text())
    assert on_disk["fleet"] == rep["fleet"]
    csv_lines = (tmp_path / "run" / "devices.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(fleet.devices)


@pytest.mark.slow
def test_one_device_choice_equals_the_select_command(tmp_path):
    r = run_cli(
        "simulate",
        "--fleet",
        str(DEFAULT),
        "--engine",
        "direct",
        "--run-dir",
        str(tmp_path / "run"),
        "--json",
    )
    row = json.loads(r.stdout)["devices"][0]
    s = run_cli(
        "select",
        "--profile",
        row["profile"],
        "--efficiency",
        row["efficiency"],
        "--budget-w",
        str(row["budget_w"]),
        "--json",
    )
    chosen = json.loads(s.stdout)
    assert (chosen["batch_size"], chosen["freq_mhz"]) == (row["batch_size"], row["freq_mhz"])
    assert chosen["peak_power_w"] == row["peak_power_w"]


@pytest.mark.slow
def test_schedule_device_never_exceeds_the_budget_in_force(tmp_path):
    r = run_cli(
        "simulate",
        "--fleet",
        str(DEFAULT),
        "--engine",
        "direct",
        "--run-dir",
        str(tmp_path / "run"),
        "--json",
    )
    dusk = next(d for d in json.loads(r.stdout)["devices"] if d["device"] == "nano-dusk")
    segs = dusk["segments"]
    assert [s["budget_w"] for s in segs] == [7.0, 4.5]
    assert all(s["peak_power_w"] <= s["budget_w"] for s in segs)
    assert segs[0]["end_s"] == 3000.0 and segs[1]["freq_mhz"] < segs[0]["freq_mhz"]
    assert math.isclose(sum(s["energy_j"] for s in segs), dusk["energy_j"])


@pytest.mark.slow
def test_large_fleet_direct(tmp_path):
    r = run_cli(
        "simulate",
        "--fleet",
        str(ROOT / "simulations/fleets/large.toml"),
        "--engine",
        "direct",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert r.returncode == 0, r.stderr
    assert "1000 devices" in r.stdout and "budget violations: 0" in r.stdout


@pytest.mark.slow
def test_bad_fleet_file_is_one_line(tmp_path):
    bad = tmp_path / "f.toml"
    bad.write_text('[run]\nmodel="resnet18"\nefficiency="x.csv"\ntarget_accuracy=0.9\n')
    r = run_cli("simulate", "--fleet", str(bad), "--engine", "direct")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "file not found" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "large", "analogue"])
def test_every_shipped_scenario_runs_within_budgets(tmp_path, name):
    from simulations.runner import simulate

    rep = simulate(ROOT / "simulations" / "fleets" / f"{name}.toml", "direct", tmp_path / name)
    assert rep["fleet"]["budget_violations"] == []
    assert rep["fleet"]["trained"] >= 1
    for d in rep["devices"]:
        assert d["status"] in ("ok", "infeasible")
        if d["status"] == "ok" and d["budget_w"] is not None:
            assert all(s["peak_power_w"] <= s["budget_w"] for s in d["segments"] if s["budget_w"])
