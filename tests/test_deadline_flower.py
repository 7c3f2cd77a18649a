"""The deadline objective's planning exchange through Flower: simulation and a real deployment.

Without ``[run] deadline_s`` the coordinator first sends every device a planning query; each
replies its fastest predicted finish without training, the coordinator sets the deadline
(the slowest of them) and sends it with the train message. The rows must be the direct
engine's, which plans the same deadline in-process (``fleet.planning.whatif.simulate_fleet``).
Every process the deployment test starts is stopped by `tests/deploy_helpers.stopped_at_exit`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployment import deploy
from fleet.config.fleetfile import load_fleet
from fleet.core.efficiency import load_efficiency
from fleet.planning.whatif import simulate_fleet
from fleet.reports.report import json_safe, read_report, runner_row
from fleet.reports.roundstate import read_state
from simulations.runner import DEFAULT_FLEET, simulate
from tests.deploy_helpers import run_loopback_round, stopped_at_exit
from tests.row_compare import diff
from tests.test_flower_deploy import FLEET as DEPLOY_FLEET
from tests.test_flower_deploy import node_configs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = Path(__file__).resolve().parents[1] / "simulations"


def deadline_fleet(tmp_path: Path, text: str, learn: str = "none") -> Path:
    """A copy of a fleet file with ``objective = "deadline"`` and absolute paths. Its devices
    do not learn their efficiency by default (``learn_efficiency = "none"``: Algorithm 1 as
    shipped), so the coordinator's plan and re-plan from their progress are tested alone;
    devices that learn are tested in tests/test_efficiency_learning.py and below."""
    assert 'objective = "time"' in text
    text = text.replace(
        'objective = "time"', f'objective = "deadline"\nlearn_efficiency = "{learn}"'
    )
    text = text.replace('"../', f'"{SIM}/')
    path = tmp_path / "deadline.toml"
    path.write_text(text)
    return path


@pytest.mark.timeout(420)
def test_flower_simulation_plans_the_deadline_like_the_direct_engine(tmp_path: Path) -> None:
    # one request per device (segment-s = 0) in both engines: the plan is never revised
    fleet_file = deadline_fleet(tmp_path, DEFAULT_FLEET.read_text())
    direct = simulate(fleet_file, "direct", tmp_path / "direct", segment_s=0)
    flower = simulate(fleet_file, "flower", tmp_path / "flower", segment_s=0)
    assert flower["deadline_s"] == pytest.approx(direct["deadline_s"])
    assert [r["device"] for r in flower["devices"]] == [r["device"] for r in direct["devices"]]
    for got, want in zip(flower["devices"], direct["devices"], strict=True):
        assert got == want, got["device"]
    assert flower["deadline_vs_time"] == direct["deadline_vs_time"]  # the report's section
    assert read_report(tmp_path / "flower")["deadline_vs_time"] == direct["deadline_vs_time"]
    # the deadline changed somebody's choice (else this test would not tell the two apart)
    time_rows = simulate_fleet(load_fleet(fleet_file), "time", segment_s=0).rows
    assert any(
        (d["batch_size"], d["freq_mhz"]) != (t["batch_size"], t["freq_mhz"])
        for d, t in zip(direct["devices"], time_rows, strict=True)
    )


@pytest.mark.timeout(420)
def test_segmented_round_replans_the_deadline_from_progress(tmp_path: Path) -> None:
    """Segments report progress; the default fleet's nanos need far more samples than the
    proxy promised, so the planned deadline (the slowest fastest finish, priced with the proxy)
    cannot hold. The coordinator learns it from the first segments, moves the deadline to the
    slowest device's real fastest finish and says why; every device then finishes within it,
    spending no more energy than under the broken plan. The segmented deadline round of Flower's
    simulation engine (Ray) against the direct engine's is this test's (rows, totals,
    revisions, the comparison with the time objective); tests/test_one_round.py runs the
    other objectives."""
    fleet_file = deadline_fleet(tmp_path, DEFAULT_FLEET.read_text())
    fleet = load_fleet(fleet_file)
    direct = simulate(fleet_file, "direct", tmp_path / "direct", segment_s=0)  # never re-planned
    seg = simulate(fleet_file, "flower", tmp_path / "seg", segment_s=600.0)
    # the direct engine runs the same segments through the same round logic: the same round
    same = simulate(fleet_file, "direct", tmp_path / "direct-seg", segment_s=600.0)
    for got, want in zip(seg["devices"], same["devices"], strict=True):
        assert diff(got, want, got["device"]) == []
    assert diff(seg["fleet"], same["fleet"], "fleet") == []
    assert diff(seg["deadline_vs_time"], same["deadline_vs_time"], "vs time") == []
    assert same["plan"]["revisions"] == [
        {k: v for k, v in r.items() if k != "at_utc"} for r in seg["plan"]["revisions"]
    ]
    revisions = seg["plan"]["revisions"]
    assert revisions[0]["deadline_s"] == pytest.approx(direct["deadline_s"])  # planned as before
    names = {d.name for d in fleet.devices}
    for before, rev in zip(revisions, revisions[1:], strict=False):
        assert rev["previous_s"] == pytest.approx(before["deadline_s"])
        assert rev["deadline_s"] > before["deadline_s"]  # never earlier
        assert rev["reason"].split(" fell behind")[0] in names, rev["reason"]
        assert rev["round_time_s"] > 0
    assert len(revisions) >= 2
    # brute force: the slowest device's real fastest finish is its time under the time objective
    fastest = {r["device"]: r for r in simulate_fleet(fleet, "time").rows}
    slowest = max(r["time_s"] for r in fastest.values() if r["status"] == "ok")
    assert seg["deadline_s"] == pytest.approx(slowest, rel=1e-9)
    d_rows = {r["device"]: r for r in direct["devices"]}
    s_rows = {r["device"]: r for r in seg["devices"]}
    # the plan without revision was broken: the last device was priced to finish at the deadline
    # with the proxy's samples and needs its data's; by hand from the efficiency files, it ends
    # at the deadline times N_data(b) / N_proxy(b) (1.46 with the committed reference)
    last = max((r for r in d_rows.values() if r["time_s"]), key=lambda r: r["time_s"])
    spec = next(d for d in fleet.devices if d.name == last["device"])
    b = last["batch_size"]
    stretch = (
        load_efficiency(spec.data).samples[b] / load_efficiency(fleet.run.efficiency).samples[b]
    )
    assert stretch > 1.2  # "far more samples than the proxy promised"
    assert last["time_s"] == pytest.approx(direct["deadline_s"] * stretch, rel=1e-9)
    for n, r in s_rows.items():
        # the broken plan left the devices that finished after its deadline late; re-planned,
        # every device that trained is on time
        d = d_rows[n]
        late = d["status"] in ("ok", "late") and d["time_s"] > direct["deadline_s"] * (1 + 1e-9)
        assert d["status"] == ("late" if late else r["status"]), n
        if r["status"] == "ok":  # within the re-planned deadline, the same work, no more energy
            assert r["time_s"] <= seg["deadline_s"] * (1 + 1e-9), n
            assert r["samples"] == pytest.approx(d_rows[n]["samples"], rel=1e-6)
            assert r["energy_j"] <= d_rows[n]["energy_j"] * (1 + 1e-9), n
    state = read_state(tmp_path / "seg")
    assert state["plan"]["revisions"] == revisions and state["finished"] is True


@pytest.mark.timeout(420)
def test_deployment_planning_exchange_matches_the_direct_engine(tmp_path: Path) -> None:
    # no weights travel: the planning exchange and the choices need none (trace + select only)
    text = DEPLOY_FLEET.replace('mode = "local"', 'mode = "local"\nship_weights = false')
    fleet_file = deadline_fleet(tmp_path, text)
    fleet = load_fleet(fleet_file)
    run_dir = tmp_path / "run"
    configs = node_configs(fleet)  # nano-a: a board behind the agent, plans from its profile
    # one request per device (segment-s 0): the plan as planned, as the direct engine has it
    run_config = {
        "fleet-path": str(fleet_file),
        "run-dir": str(run_dir),
        "run-token": "d-1",
        "segment-s": 0.0,
    }
    with stopped_at_exit() as procs:
        status, details = run_loopback_round(procs, tmp_path, configs, run_config, timeout_s=90)

    assert status == "finished:completed", details
    report = deploy.read_report(run_dir, "d-1")
    assert report is not None
    want = simulate_fleet(fleet, "deadline", segment_s=0)
    assert report["deadline_s"] == pytest.approx(want.deadline_s)
    rows = {r["device"]: r for r in report["devices"]}
    expect = {r["device"]: r for r in want.rows}
    assert list(rows) == ["nano-a", "tx2-b"]
    for name, row in rows.items():
        assert (row["batch_size"], row["freq_mhz"]) == (
            expect[name]["batch_size"],
            expect[name]["freq_mhz"],
        ), name
    assert rows["nano-a"]["status"] == "selected", rows["nano-a"]["message"]
    # the simulated node: the very same row (plus the report's idle columns)
    assert runner_row(rows["tx2-b"]) == json_safe(expect["tx2-b"])
    # the planned deadline slowed the faster device down: its choice is not the time objective's
    fast = {r["device"]: r for r in simulate_fleet(fleet, "time").rows}["tx2-b"]
    assert (rows["tx2-b"]["batch_size"], rows["tx2-b"]["freq_mhz"]) != (
        fast["batch_size"],
        fast["freq_mhz"],
    )
    assert rows["tx2-b"]["predicted_time_s"] > fast["predicted_time_s"]  # slower, on purpose


@pytest.mark.timeout(420)
def test_federated_rounds_each_plan_their_deadline(tmp_path: Path) -> None:
    """Federated, two rounds: every round runs the planning exchange on its own work and ships
    weights back from devices that trained (``ok`` or ``late``)."""
    from tests.test_flower_sim import FLEET as SIM_FLEET

    fleet_file = deadline_fleet(tmp_path, SIM_FLEET)
    report = simulate(fleet_file, "flower", tmp_path / "run", segment_s=0)  # never re-planned
    want = simulate_fleet(load_fleet(fleet_file), "deadline", segment_s=0)
    for k in (1, 2):
        rnd = read_report(tmp_path / "run" / "rounds" / f"round-{k:03d}")
        assert rnd["deadline_s"] == pytest.approx(want.deadline_s)
        assert [runner_row(r) for r in rnd["devices"]] == [json_safe(r) for r in want.rows]
    assert report["mode"] == "federated" and report["global_model"]
