"""One device round, three runners: same columns, same checks, registries that plug in.

The virtual clock replays a trace, host training really trains a small CNN on tiny generated
data (CPU, seconds), and the agent runner drives a real ``python -m fleet.agent --backend
replay`` subprocess; all three go through ``fleet.rounds.device_round.run_device``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clients import records
from clients.agent_link import AgentLink, AgentSettings
from clients.hardware_client import run_on_agent
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.baselines import BASELINES, Baseline, register_baseline, unregister_baseline
from fleet.core.compare import compare
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import Objective, register_objective, unregister_objective
from fleet.core.profile import load_profile
from fleet.core.selection import SelectionIndex, select
from fleet.method.selection import choose
from fleet.reports.report import fleet_totals, write_report
from fleet.rounds.device_round import row_columns, row_fields, run_device
from fleet.rounds.host_training import train_device
from fleet.rounds.virtual_clock import VirtualClock, simulate_device
from tests.conftest import AGENT_GUARD_S
from tests.test_learning import setup
from tests.test_virtual_clock import PROFILE

SHIPPED = Efficiency({8: 800.0, 32: 1600.0}, source="proxy.csv")


def files(tmp_path: Path, device_type: str = "jetson-nano"):
    """test_learning's tiny CNN data, run settings and Nano profile (b=8/32), re-typed."""
    data, prof, _, run = setup(tmp_path)
    prof.write_text(prof.read_text().replace("jetson-nano", device_type))
    trace = tmp_path / "trace.csv"
    trace.write_text("batch_size,samples_to_accuracy\n8,880\n32,2000\n")
    return prof, trace, data, run


def three_rows(tmp_path: Path, profile_type: str, spec_type: str = "jetson-nano") -> list[dict]:
    prof, trace, data, run = files(tmp_path, profile_type)
    sim = DeviceSpec("d", spec_type, 5.0, str(prof), str(trace))
    clock = simulate_device(sim, SHIPPED, run).to_dict()
    host, _ = train_device(
        DeviceSpec("d", spec_type, 5.0, str(prof), str(data), learning="train"), SHIPPED, run
    )
    settings = AgentSettings(
        backend="replay", options={"profile_csv": str(prof)}, timeout_s=AGENT_GUARD_S
    )
    with AgentLink(settings.argv(), timeout_s=AGENT_GUARD_S) as link:
        agent = run_on_agent(
            link,
            DeviceSpec("d", spec_type, 5.0, str(prof), None),
            records.TrainInstruction(SHIPPED, run),
            settings,
        )
    return [clock, host.to_dict(), agent]


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_three_runners_give_rows_with_identical_columns(tmp_path: Path) -> None:
    clock, host, agent = three_rows(tmp_path, "jetson-nano")
    assert list(clock) == list(host) == list(agent) == row_fields()
    # same device, same budget, same shipped efficiency: the same choice on every path
    # 5 W: b=8@307.2 (0.01 s/sample x 800 = 8 s) beats b=32@307.2 (0.00625 x 1600 = 10 s)
    for row in (clock, host, agent):
        assert (row["batch_size"], row["freq_mhz"], row["budget_w"]) == (8, 307.2, 5.0), row
    assert (clock["status"], host["status"], agent["status"]) == ("ok", "ok", "selected")
    assert clock["time_s"] == pytest.approx(880 * 0.08 / 8)  # the trace's truth on the clock
    assert host["time_s"] == pytest.approx(host["samples"] * 0.08 / 8)
    assert host["accuracy"] >= 0.9 and clock["accuracy"] == 0.9
    assert clock["b1_time_s"] is not None and host["b1_time_s"] is None  # only a trace knows


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_device_type_check_fires_on_every_path(tmp_path: Path) -> None:
    rows = three_rows(tmp_path, "jetson-tx2nx", spec_type="jetson-nano")
    for row in rows:
        assert row["status"] == "error", row
        assert "type 'jetson-nano'" in row["message"]
        assert "recorded on 'jetson-tx2nx'" in row["message"]
        assert row["time_s"] is None and row["batch_size"] is None


def test_virtual_clock_reports_the_accuracy_its_trace_reached(tmp_path: Path) -> None:
    prof, _, _, run = files(tmp_path)
    trace = tmp_path / "cinic.csv"
    trace.write_text("batch_size,samples_to_accuracy,target_accuracy\n8,880,0.76\n32,2000,0.76\n")
    spec = DeviceSpec("d", "jetson-nano", 5.0, str(prof), str(trace))
    row = simulate_device(spec, SHIPPED, run).to_dict()
    assert row["status"] == "ok" and row["accuracy"] == 0.76
    assert "reaches accuracy 0.76, not the fleet's target 0.9" in row["message"]
    same = tmp_path / "same.csv"
    same.write_text("batch_size,samples_to_accuracy,target_accuracy\n8,880,0.9\n32,2000,0.9\n")
    spec = DeviceSpec("d", "jetson-nano", 5.0, str(prof), str(same))
    row = simulate_device(spec, SHIPPED, run).to_dict()
    assert row["accuracy"] == 0.9 and row["message"] == ""


# ----------------------------------------------------------------------------- registries


def test_a_toy_objective_is_one_registry_entry() -> None:
    """Least peak power per sample to the target: one entry, then every surface knows it."""
    toy = Objective("coolest", lambda p: p.peak_power_w / p.batch_size, "toy: least peak/sample")
    register_objective(toy)
    try:
        eff = Efficiency({8: 1000.0, 32: 1200.0})
        got = select(PROFILE, eff, None, "coolest")
        # peak/sample x N: b=8@307.2 4.0/8*1000=500; b=32@307.2 4.4/32*1200=165 -> b=32@307.2
        assert (got.batch_size, got.freq_mhz, got.objective) == (32, 307.2, "coolest")
        want = choose(PROFILE.points, eff.reached, None, toy.cost)  # the kernel's rule
        assert (want.batch_size, want.freq_mhz) == (got.batch_size, got.freq_mhz)
        methods = {r["method"] for r in compare(PROFILE, eff, [None])}
        assert "ours-coolest" in methods
        # the train instruction carries and validates it
        run = RunSettings("t", "m", "e.csv", 0.9, objective="coolest")
        ins = records.TrainInstruction(eff, run)
        assert records.decode_instruction(records.encode_instruction(ins)).run == run
    finally:
        unregister_objective("coolest")
    with pytest.raises(InputError, match="objective must be one of time, energy"):
        select(PROFILE, Efficiency({8: 1000.0, 32: 1200.0}), None, "coolest")


def test_an_objective_with_context_picks_among_candidates() -> None:
    """The shape a deadline objective takes: least energy among points that meet deadline_s."""

    def pick(cands, context):
        ok = [c for c in cands if c.predicted_time_s <= context["deadline_s"]]
        return min(ok, key=lambda c: c.predicted_energy_j) if ok else None

    register_objective(
        Objective("by-deadline", lambda p: p.time_per_sample_s, context=("deadline_s",), pick=pick)
    )
    try:
        index = SelectionIndex(PROFILE)
        eff = Efficiency({8: 1000.0, 32: 1200.0})
        with pytest.raises(InputError, match="needs deadline_s"):
            index.select(eff, None, "by-deadline")
        # times: 8@307 12.5 s 37.5 J; 8@460 10 s 40 J; 32@307 12 s 42 J; 32@460 6 s 30 J
        assert index.select(eff, None, "by-deadline", deadline_s=7).batch_size == 32
        slow = index.select(eff, 5.0, "by-deadline", deadline_s=13)  # 32@460 does not fit 5 W
        assert (slow.batch_size, slow.freq_mhz) == (8, 307.2)
        with pytest.raises(InputError, match="no batch size"):
            index.select(eff, 5.0, "by-deadline", deadline_s=1)
        assert "ours-by-deadline" not in {r["method"] for r in compare(PROFILE, eff, [None])}
        # in a round, the context comes from the fleet's [run] table
        spec = DeviceSpec("d", "jetson-nano", None, "hand.csv", "t.csv")
        run = RunSettings("t", "m", "e.csv", 0.9, objective="by-deadline", deadline_s=7)
        row = run_device(spec, PROFILE, eff, run, VirtualClock(eff))
        assert (row.status, row.batch_size, row.freq_mhz) == ("ok", 32, 460.8)
        late = RunSettings("t", "m", "e.csv", 0.9, objective="by-deadline", deadline_s=1)
        assert run_device(spec, PROFILE, eff, late, VirtualClock(eff)).status == "infeasible"
        bare = RunSettings("t", "m", "e.csv", 0.9, objective="by-deadline")
        row = run_device(spec, PROFILE, eff, bare, VirtualClock(eff))
        assert row.status == "error" and "needs deadline_s" in row.message
    finally:
        unregister_objective("by-deadline")


def test_a_toy_baseline_is_one_registry_entry(tmp_path: Path) -> None:
    register_baseline(Baseline("b0", "Baseline 0", lambda prof, eff: min(prof.batch_sizes)))
    try:
        eff = Efficiency({8: 1000.0, 32: 1200.0})
        rows = compare(PROFILE, eff, [5.0])
        by = {r["method"]: r for r in rows}
        assert list(by)[: len(BASELINES)] == ["b1", "b2", "b0"]
        # cap at 5 W: 307.2 (32@460.8 peaks 5.6); b0 = b=8 @307.2: 0.0125 s/sample x 1000
        assert by["b0"]["predicted_time_s"] == pytest.approx(12.5)
        assert by["ours"]["speedup_vs_b0"] == pytest.approx(12.5 / by["ours"]["predicted_time_s"])
        spec = DeviceSpec("d", "jetson-nano", 5.0, "hand.csv", "t.csv")
        res = run_device(spec, PROFILE, eff, RunSettings("t", "m", "e.csv", 0.9), VirtualClock(eff))
        row = res.to_dict()
        assert row["b0_time_s"] == pytest.approx(12.5)
        assert row["speedup_vs_b0"] == pytest.approx(12.5 / row["time_s"])
        assert {"b0_time_s", "speedup_vs_b0"} <= set(row_columns())
        report = write_report(tmp_path, [row], {})
        assert report["fleet"]["median_speedup_vs_b0"] == pytest.approx(row["speedup_vs_b0"])
        assert "speedup_vs_b0" in (tmp_path / "devices.csv").read_text().splitlines()[0]
    finally:
        unregister_baseline("b0")
    assert "b0_time_s" not in row_fields() and "median_speedup_vs_b0" not in fleet_totals([])


def test_safe_cap_is_memoised_per_budget_and_equals_the_rule() -> None:
    prof = load_profile(
        Path(__file__).resolve().parents[1] / "simulations/profiles/nano_resnet18.csv"
    )
    index = SelectionIndex(prof)
    for budget in (4.5, 5.0, 7.0, None):
        cap = index.safe_cap(budget)
        limit = math.inf if budget is None else budget
        brute = max(
            f
            for f in prof.freqs_mhz
            if all(p.peak_power_w <= limit for p in prof.points if p.freq_mhz <= f)
        )
        assert cap == brute and index.safe_cap(budget) is cap
    assert set(index._caps) == {4.5, 5.0, 7.0, None}
