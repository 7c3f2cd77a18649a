"""Budget what-ifs against per-device direct simulation; the CLI and the deadline report."""

import json

import pytest

from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.planning.deadline_plan import plan_deadline
from fleet.planning.whatif import (
    fastest_finishes,
    pareto_front,
    parse_range,
    run_for,
    simulate_fleet,
    sweep,
    totals,
    with_budget,
)
from fleet.reports.markdown import run_markdown
from fleet.rounds.virtual_clock import cached_efficiency, simulate_device
from simulations.runner import run_direct
from tests.conftest import ROOT, run_cli
from tests.row_compare import diff

DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"


def per_device(fleet, objective):
    """The reference: every device simulated on its own, no sharing between devices."""
    shipped = cached_efficiency(fleet.run.efficiency)
    deadline = None
    if objective == "deadline":
        deadline = plan_deadline(fastest_finishes(fleet.devices, shipped))
    run = run_for(fleet.run, objective, deadline)
    return [simulate_device(d, shipped, run).to_dict() for d in fleet.devices]


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["time", "energy", "deadline"])
@pytest.mark.parametrize("scale", [False, True])
def test_sweep_equals_per_budget_direct_simulation(objective, scale):
    fleet = load_fleet(DEFAULT)
    values = [0.75, 1.0, 1.5] if scale else [2.0, 4.5, 7.0, 12.0]
    # the brute force runs each device in one piece: under the deadline objective the round
    # must too (segments re-plan); under the others, segments chain to the one-piece row
    seg = 0 if objective == "deadline" else None
    steps = sweep(fleet, values, scale, objective, segment_s=seg)
    for v, step in zip(values, steps, strict=True):
        rows = per_device(with_budget(fleet, v, scale), objective)
        want = totals(rows)
        assert step.round_time_s == pytest.approx(want["round_time_s"])
        assert step.energy_j == pytest.approx(want["energy_j"])
        assert step.infeasible == want["infeasible"]
        assert step.late == want["late"]
        assert step.trained == want["trained"]
        # and the rows themselves, device by device
        got = simulate_fleet(with_budget(fleet, v, scale), objective, segment_s=seg).rows
        for g, w in zip(got, rows, strict=True):
            assert diff(g, w, str(g["device"])) == []


def test_with_budget_uniform_and_scaled():
    fleet = load_fleet(DEFAULT)
    uni = with_budget(fleet, 5.0)
    assert all(d.budget_w == 5.0 and d.schedule == () for d in uni.devices)
    sc = with_budget(fleet, 0.5, scale=True)
    for a, b in zip(fleet.devices, sc.devices, strict=True):
        assert b.budget_w == (None if a.budget_w is None else a.budget_w * 0.5)
        assert [s.budget_w for s in b.schedule] == [s.budget_w * 0.5 for s in a.schedule]


def test_budget_two_watts_is_infeasible_for_every_device():
    # the lowest peak in either reference profile is above 2 W: nobody trains
    fleet = load_fleet(DEFAULT)
    (step,) = sweep(fleet, [1.0], False, "time")
    assert step.infeasible == len(fleet.devices) and step.round_time_s is None


def test_parse_range():
    assert parse_range("3:4:0.5") == [3.0, 3.5, 4.0]
    assert parse_range("3:10:0.5")[-1] == 10.0 and len(parse_range("3:10:0.5")) == 15
    assert parse_range("4.5,7") == [4.5, 7.0]
    # watts in the one budget grammar, as every other command reads them; factors plain
    assert parse_range("4.5W, 7 W") == [4.5, 7.0] == parse_range("4.5w:7W:2.5")
    assert parse_range("0.5,1.5", scale=True) == [0.5, 1.5]
    for bad in ("3:1:0.5", "3:4:0", "a:b:c", "3:4", "-1,2", "", "4.5W,nan"):
        with pytest.raises(InputError, match="--budgets"):
            parse_range(bad)
    with pytest.raises(InputError, match="'none' is no step of a sweep; expected watts"):
        parse_range("4.5,none")
    with pytest.raises(InputError, match="--budgets"):
        parse_range("1.5W", scale=True)  # a factor has no unit


@pytest.mark.slow
def test_pareto_front_keeps_only_non_dominated():
    fleet = load_fleet(DEFAULT)
    steps = sweep(fleet, [3.0, 4.5, 6.0, 7.0, 10.0], False, "time")
    front = pareto_front(steps)
    for s in steps:
        if s.round_time_s is None:
            continue
        dominated = any(
            o.round_time_s <= s.round_time_s and o.energy_j < s.energy_j
            for o in steps
            if o.round_time_s is not None
        )
        assert (s in front) != dominated or any(
            f.round_time_s == s.round_time_s and f.energy_j == s.energy_j for f in front
        )


def test_cli_whatif_json_and_plot(tmp_path):
    png = tmp_path / "front.png"
    r = run_cli(
        "whatif",
        "--fleet",
        str(DEFAULT),
        "--budgets",
        "3:8:1",
        "--objective",
        "deadline",
        "--json",
        "--plot",
        str(png),
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [s["value"] for s in out["steps"]] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert all(s["objective"] == "deadline" for s in out["steps"])
    want = sweep(load_fleet(DEFAULT), [5.0], False, "deadline")[0]
    assert out["steps"][2]["energy_j"] == pytest.approx(want.energy_j)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_whatif_bad_budgets_is_one_line_exit_2():
    r = run_cli("whatif", "--fleet", str(DEFAULT), "--budgets", "10:3:1")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--budgets" in r.stderr


@pytest.mark.slow
def test_direct_engine_deadline_report_compares_with_time(tmp_path):
    src = DEFAULT.read_text().replace('objective = "time"', 'objective = "deadline"')
    src = src.replace('"../', f'"{ROOT}/simulations/')
    f = tmp_path / "deadline.toml"
    f.write_text(src)
    fleet = load_fleet(f)
    rep = run_direct(fleet, tmp_path / "run")
    cmp = rep["deadline_vs_time"]
    t, d = simulate_fleet(fleet, "time"), simulate_fleet(fleet, "deadline")
    assert rep["deadline_s"] == pytest.approx(d.deadline_s)
    assert cmp["time"]["energy_j"] == pytest.approx(t.totals["energy_j"])
    assert cmp["deadline"]["energy_j"] == pytest.approx(d.totals["energy_j"])
    assert rep["fleet"]["energy_j"] == pytest.approx(d.totals["energy_j"])
    for row in cmp["devices"]:
        assert row["slowdown"] == pytest.approx(
            row["deadline_objective_s"] / row["time_objective_s"]
        )
        assert row["saved_j"] == pytest.approx(
            row["time_objective_j"] - row["deadline_objective_j"]
        )
    md = run_markdown(json.loads((tmp_path / "run" / "report.json").read_text()), tmp_path / "run")
    assert "## Deadline objective against the time objective" in md
    assert f"{cmp['deadline']['energy_j'] / 1000:,.1f}" in md
