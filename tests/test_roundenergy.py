"""Round energy: training energy plus every device's idle power while it waits for the round.

Hand-computed fleets through the real files (profiles with and without ``idle_power_w``), the
round report written and read back, the CLI's one-line errors for a bad idle power, and the
what-if's round energy against the report's for the same fleet.
"""

import csv
import json

import pytest

from fleet.core.profile import load_profile
from fleet.planning.roundenergy import round_energy
from fleet.planning.whatif import deadline_vs_time, totals
from fleet.reports.markdown import run_markdown
from fleet.reports.report import read_report, write_report
from tests.conftest import ROOT, run_cli

DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"
HEADER = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"
POINTS = ["8,307.2,0.10,4.2,3.9", "8,460.8,0.07,4.8,4.5", "32,460.8,0.20,5.5,5.0"]


def profile(tmp_path, name, idle=None):
    """A small profile CSV; ``idle`` (a string) becomes the idle_power_w column on every row."""
    lines = [HEADER + ("" if idle is None else ",idle_power_w")]
    lines += [p + ("" if idle is None else f",{idle}") for p in POINTS]
    path = tmp_path / f"{name}.csv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def row(name, prof, status="ok", time_s=None, energy_j=None):
    return {"device": name, "profile": prof, "status": status, "time_s": time_s,
            "energy_j": energy_j}  # fmt: skip


@pytest.fixture
def fleet3(tmp_path):
    """A (1.0 W idle) trains 1,000 s for 5,000 J; B (2.0 W) 600 s for 3,000 J; C (0.5 W) could
    not train. The round lasts 1,000 s: A waits 0 s, B 400 s (800 J), C the whole round (500 J)."""
    return [
        row("a", profile(tmp_path, "a", "1.0"), "ok", 1000.0, 5000.0),
        row("b", profile(tmp_path, "b", "2"), "late", 600.0, 3000.0),
        row("c", profile(tmp_path, "c", "0.5"), "infeasible"),
    ]


def test_round_energy_equals_the_hand_computation(fleet3):
    devices, fleet = round_energy(fleet3)
    assert [d["idle_power_w"] for d in devices] == [1.0, 2.0, 0.5]
    assert [d["wait_s"] for d in devices] == [0.0, 400.0, 1000.0]
    assert [d["idle_wait_j"] for d in devices] == [0.0, 800.0, 500.0]
    assert fleet == {
        "training_energy_j": 8000.0,
        "idle_wait_j": 1300.0,
        "round_energy_j": 9300.0,
        "idle_unknown": 0,
    }
    t = totals(fleet3)  # the what-if's totals carry the same figures
    assert (t["energy_j"], t["round_energy_j"], t["idle_unknown"]) == (8000.0, 9300.0, 0)


def test_devices_that_ran_short_count_their_training_and_can_end_the_round():
    """One device reached the target in 100 s; one ran 300 s to its sample cap without
    reaching it; one was stopped over budget after 50 s; one could not run. All idle at 2 W.
    The round ends when the last one reports (300 s); every joule spent training counts:
    6,800 J of training, waits of 200, 250 and 300 s at 2 W = 1,500 J, 8,300 J in all."""
    rows = [
        {"status": "ok", "time_s": 100.0, "energy_j": 1000.0, "idle_power_w": 2.0},
        {"status": "not reached", "time_s": 300.0, "energy_j": 5000.0, "idle_power_w": 2.0},
        {"status": "over-budget", "time_s": 50.0, "energy_j": 800.0, "idle_power_w": 2.0},
        {"status": "infeasible", "time_s": None, "energy_j": None, "idle_power_w": 2.0},
    ]
    devices, fleet = round_energy(rows)
    assert [d["wait_s"] for d in devices] == [200.0, 0.0, 250.0, 300.0]
    assert fleet["training_energy_j"] == 6800.0
    assert fleet["idle_wait_j"] == 2.0 * (200 + 250 + 300)
    assert fleet["round_energy_j"] == 6800.0 + 1500.0
    assert totals(rows)["energy_j"] == 1000.0  # fleet energy: devices that reached the target


def test_a_board_stopped_by_a_refused_clock_counts_what_it_ran():
    """An ``error`` row of a board whose kernel refused a clock after 120 s (600 J measured)
    counts its training and its shorter wait; an ``error`` row that never ran (an agent that
    did not start) waits the whole round. All idle at 2 W, the round 150 s long."""
    rows = [
        {"status": "ok", "time_s": 150.0, "energy_j": 900.0, "idle_power_w": 2.0},
        {"status": "error", "time_s": 120.0, "energy_j": 600.0, "idle_power_w": 2.0},
        {"status": "error", "time_s": None, "energy_j": None, "idle_power_w": 2.0},
    ]
    devices, fleet = round_energy(rows)
    assert [d["wait_s"] for d in devices] == [0.0, 30.0, 150.0]
    assert fleet["training_energy_j"] == 1500.0
    assert fleet["round_energy_j"] == 1500.0 + 2.0 * (30 + 150)


def test_the_round_report_carries_round_energy_per_device_and_in_total(tmp_path, fleet3):
    write_report(tmp_path / "run", fleet3, {"run": "r"})
    rep = read_report(tmp_path / "run")
    f = rep["fleet"]
    assert (f["energy_j"], f["idle_wait_j"], f["round_energy_j"]) == (8000.0, 1300.0, 9300.0)
    assert [d["idle_wait_j"] for d in rep["devices"]] == [0.0, 800.0, 500.0]
    with open(tmp_path / "run" / "devices.csv") as fh:
        cells = list(csv.DictReader(fh))
    assert [c["idle_power_w"] for c in cells] == ["1.0", "2.0", "0.5"]
    assert [c["idle_wait_j"] for c in cells] == ["0.0", "800.0", "500.0"]
    md = run_markdown(rep, tmp_path / "run")
    assert "- training energy: 8.0 kJ" in md
    assert "- round energy: 9.3 kJ" in md and "1.3 kJ idle" in md
    assert "| 0.80 |" in md  # B's idle wait in the device table (kJ)


def test_a_device_without_idle_power_is_counted_and_not_charged(tmp_path, fleet3):
    fleet3[1]["profile"] = profile(tmp_path, "b-no-idle")  # B: no idle_power_w column
    devices, fleet = round_energy(fleet3)
    assert devices[1]["idle_power_w"] is None and devices[1]["idle_wait_j"] is None
    assert fleet["idle_unknown"] == 1
    assert fleet["round_energy_j"] == 8000.0 + 500.0  # C still waits; B's 400 s is not charged
    fleet3[2]["profile"] = ""  # no profile at all (a board without one): unknown too
    assert round_energy(fleet3)[1]["idle_unknown"] == 2


def test_a_row_that_reports_its_idle_power_needs_no_profile(tmp_path, fleet3):
    fleet3[1] = {**fleet3[1], "profile": "", "idle_power_w": 3.0}
    assert round_energy(fleet3)[0][1]["idle_wait_j"] == 1200.0


def test_deadline_comparison_saves_with_waiting_included(tmp_path):
    """Time objective: A 1,000 s / 5,000 J, B races 400 s / 2,000 J then idles 600 s at 2 W.
    Deadline objective: B runs cooler, 1,000 s / 2,400 J, no waiting. Training energy: B spends
    400 J more; with waiting B saves 2,000 + 1,200 - 2,400 = 800 J."""
    a, b = profile(tmp_path, "a", "1.0"), profile(tmp_path, "b", "2.0")
    t_rows = [row("a", a, "ok", 1000.0, 5000.0), row("b", b, "ok", 400.0, 2000.0)]
    d_rows = [row("a", a, "ok", 1000.0, 5000.0), row("b", b, "ok", 1000.0, 2400.0)]
    cmp = deadline_vs_time(t_rows, d_rows)
    dev_b = cmp["devices"][1]
    assert dev_b["saved_j"] == -400.0
    assert dev_b["time_objective_round_j"] == 3200.0
    assert dev_b["deadline_objective_round_j"] == 2400.0
    assert dev_b["round_saved_j"] == 800.0 and dev_b["round_saved_pct"] == pytest.approx(25.0)
    assert cmp["time"]["round_energy_j"] == 8200.0 and cmp["deadline"]["round_energy_j"] == 7400.0
    assert cmp["round_energy_saved_pct"] == pytest.approx(100 * 800 / 8200)
    assert cmp["energy_saved_pct"] == pytest.approx(-100 * 400 / 7000)


def test_profile_reads_idle_power_and_writes_it_back(tmp_path):
    from fleet.core.profile import save_profile

    prof = load_profile(profile(tmp_path, "p", "1.25"))
    assert prof.idle_power_w == 1.25
    assert load_profile(profile(tmp_path, "q")).idle_power_w is None
    save_profile(prof, tmp_path / "copy.csv")
    assert load_profile(tmp_path / "copy.csv").idle_power_w == 1.25
    modeled = load_profile(ROOT / "simulations/profiles/tx2nx_resnet18.csv")
    assert modeled.idle_power_w == 1.45  # the device model's idle_w for the TX2 NX


@pytest.mark.parametrize("bad", ["-1", "abc", "0", "inf"])
def test_bad_idle_power_is_one_line_exit_2_from_select(tmp_path, bad):
    prof = profile(tmp_path, "bad", bad)
    eff = tmp_path / "e.csv"
    eff.write_text("batch_size,samples_to_accuracy\n8,10000\n32,15000\n")
    r = run_cli("select", "--profile", prof, "--efficiency", str(eff), "--budget-w", "5")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert prof in r.stderr and "idle_power_w=" in r.stderr and bad in r.stderr
    assert ("must be > 0" in r.stderr) == (bad in ("-1", "0"))


def test_idle_power_that_differs_between_rows_is_refused(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text(
        HEADER + ",idle_power_w\n" + POINTS[0] + ",1.2\n" + POINTS[1] + ",1.3\n" + POINTS[2] + ",\n"
    )
    r = run_cli("select", "--profile", str(path), "--efficiency", str(path), "--budget-w", "5")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "line 3: idle_power_w=1.3 differs from 1.2" in r.stderr


def test_bad_idle_power_in_a_fleet_is_refused_before_the_round(tmp_path):
    """A bad device file is a mistake in the fleet, known before any work: ``simulate`` says it
    in one line (device, file, line, field) and exits 2, writing no run (it used to run the
    round around it, the device an ``error`` row, and exit 0). A row that does end ``error``
    (a board failing mid-round) has its idle power unknown: see the totals test above."""
    prof = profile(tmp_path, "bad", "abc")
    fleet = DEFAULT.read_text().replace("../profiles/nano_resnet18.csv", prof)
    fleet = fleet.replace('"../', f'"{ROOT}/simulations/')
    path = tmp_path / "fleet.toml"
    path.write_text(fleet)
    r = run_cli("simulate", "--fleet", str(path), "--engine", "direct", "--run-dir",
                str(tmp_path / "run"), "--json")  # fmt: skip
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip().splitlines() == [
        f"powerfleet simulate: error: device nano-4w5: {prof}: line 2: idle_power_w='abc' is "
        "not a number"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_whatif_json_round_energy_equals_the_round_report(tmp_path):
    """Scale 1 keeps every device's own budget and schedule: the same round as `simulate`."""
    w = run_cli("whatif", "--fleet", str(DEFAULT), "--budgets", "1", "--scale", "--json")
    assert w.returncode == 0, w.stderr
    step = json.loads(w.stdout)["steps"][0]
    s = run_cli("simulate", "--fleet", str(DEFAULT), "--engine", "direct", "--run-dir",
                str(tmp_path / "run"), "--json")  # fmt: skip
    assert s.returncode == 0, s.stderr
    f = json.loads(s.stdout)["fleet"]
    assert step["energy_j"] == pytest.approx(f["energy_j"])
    assert step["round_energy_j"] == pytest.approx(f["round_energy_j"])
    assert step["idle_unknown"] == f["idle_unknown"] == 0  # every modeled profile has idle power
    devices = json.loads(s.stdout)["devices"]
    waits = sum(d["idle_wait_j"] for d in devices)
    assert f["round_energy_j"] == pytest.approx(f["energy_j"] + waits)
    assert f["round_energy_j"] > f["energy_j"]  # the infeasible device idles the whole round
