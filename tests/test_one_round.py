"""One round, whatever runs it: the direct engine and the Flower coordinator give the same rows.

Every shipped fleet under every objective runs twice: through the direct engine
(``powerfleet simulate --engine direct``: ``fleet.planning.segmented_round`` in this process)
and through the Flower coordinator's own code (``strategies/server_app.run_fleet``: its
segmented message loop and book) talking to the real ClientApp over an in-process grid
(``tests/inprocess_grid.py``: Flower's transport without Ray). Both drive the one round logic
(``fleet.planning.round_logic``), so every report row (idle columns included), the fleet's
totals, the deadline and each of its revisions must agree to the last bit's rounding
(``tests/row_compare.py``). Then one real Flower simulation per objective (Ray, ``flwr``
SuperLink) on the default fleet against the direct engine, which closes the loop on the
transport (energy here; time in tests/test_flower_sim.py, deadline in
tests/test_deadline_flower.py).

``large.toml`` (1,000 devices in six kinds) is too large for the coordinator's per-device
loop in a test's budget (about 1,000 x 10 segments, 0.1 s each here): its direct run is
compared with the coordinator's run of one device per kind, which is the same round (the plan
and every re-plan take the slowest device; identical devices give identical rows).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.config.fleetfile import load_fleet
from simulations.runner import simulate
from strategies.server_app import ServerSettings, run_fleet
from tests.inprocess_grid import InProcessGrid, app_identity
from tests.row_compare import diff

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLEETS = Path(__file__).resolve().parents[1] / "simulations" / "fleets"
OBJECTIVES = ("time", "energy", "deadline")
SHIPPED = sorted(p.stem for p in FLEETS.glob("*.toml"))
SIM_SEGMENT_S = 1500.0  # the Ray simulations' segments (device seconds)


def fleet_as(tmp: Path, name: str, objective: str, one_per_kind: bool = False) -> Path:
    """A copy of a shipped fleet under ``objective``, its relative paths made absolute
    (``one_per_kind``: every ``count = N`` entry as one device)."""
    text = (FLEETS / f"{name}.toml").read_text()
    text, n = re.subn(r'(?m)^objective = "\w+"', f'objective = "{objective}"', text)
    assert n == 1, f"{name}.toml: expected one [run] objective"
    text = text.replace('"../', f'"{FLEETS.parent}/')
    if one_per_kind:
        text = re.sub(r"(?m)^count = \d+", "count = 1", text)
    path = tmp / f"{name}-{objective}{'-kinds' if one_per_kind else ''}.toml"
    path.write_text(text)
    return path


def coordinator_report(fleet_file: Path, run_dir: Path) -> dict:
    """The Flower coordinator's run (segments of the default length, lock-step as in Flower's
    simulation) over the in-process grid."""
    nodes = len(load_fleet(fleet_file).devices)
    with app_identity():
        settings = ServerSettings(str(fleet_file), str(run_dir), poll_s=0.0)  # replies are here
        return run_fleet(InProcessGrid(nodes), settings)


def revisions(report: dict) -> list[tuple]:
    """The plan's history without the wall-clock stamps (and the reasons, which name devices)."""
    plan = report.get("plan") or {"revisions": []}
    return [(r["round_time_s"], r["deadline_s"], r["previous_s"]) for r in plan["revisions"]]


def test_every_shipped_fleet_is_covered() -> None:
    assert SHIPPED == ["analogue", "default", "large", "solar"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("name", [n for n in SHIPPED if n != "large"])
def test_direct_engine_and_coordinator_give_the_same_rows(
    tmp_path: Path, name: str, objective: str
) -> None:
    fleet_file = fleet_as(tmp_path, name, objective)
    direct = simulate(fleet_file, "direct", tmp_path / "direct")
    flower = coordinator_report(fleet_file, tmp_path / "flower")
    assert [r["device"] for r in flower["devices"]] == [r["device"] for r in direct["devices"]]
    for got, want in zip(flower["devices"], direct["devices"], strict=True):
        assert diff(got, want, got["device"]) == []
    assert diff(flower["fleet"], direct["fleet"], "fleet") == []
    assert flower.get("deadline_s") == direct.get("deadline_s")
    assert flower.get("segment_s") == direct.get("segment_s") == 600.0
    assert revisions(flower) == revisions(direct)
    assert all(r["status"] != "running" for r in direct["devices"])
    if objective == "deadline":
        assert len(revisions(direct)) >= 1  # planned, and (where it fell behind) re-planned


@pytest.mark.timeout(600)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_large_fleet_direct_rows_are_the_coordinators_per_kind(
    tmp_path: Path, objective: str
) -> None:
    direct = simulate(fleet_as(tmp_path, "large", objective), "direct", tmp_path / "direct")
    kinds = coordinator_report(fleet_as(tmp_path, "large", objective, True), tmp_path / "kinds")
    assert len(direct["devices"]) == 1000
    by_kind = {r["device"]: r for r in kinds["devices"]}
    for row in direct["devices"]:
        kind = row["device"].rsplit("-", 1)[0]  # nano-4w5-0042 is one of nano-4w5's
        want = dict(by_kind[kind], device=row["device"])
        want["message"] = str(want.get("message") or "").replace(kind, row["device"])
        assert diff(row, want, row["device"]) == []
    assert kinds.get("deadline_s") == direct.get("deadline_s")
    assert revisions(kinds) == revisions(direct)


@pytest.mark.timeout(420)
def test_flower_simulation_gives_the_direct_engines_rows(tmp_path: Path) -> None:
    """The real thing (Flower's simulation engine on Ray), segmented, on the default fleet under
    the energy objective. The time objective's segmented Flower round is
    tests/test_flower_sim.py's (the same row diff), the deadline's tests/test_deadline_flower.py's
    (600 s segments, re-planned from progress); every objective on every fleet runs through the
    coordinator's own code above, without Ray.

    Segments of 1,500 s, not the default 600 s (tests/test_flower_sim.py's): each lock-step
    of the simulation costs Flower about a second here, and 5 steps carry what 13 do."""
    fleet_file = fleet_as(tmp_path, "default", "energy")
    direct = simulate(fleet_file, "direct", tmp_path / "direct", segment_s=SIM_SEGMENT_S)
    flower = simulate(fleet_file, "flower", tmp_path / "flower", segment_s=SIM_SEGMENT_S)
    for got, want in zip(flower["devices"], direct["devices"], strict=True):
        assert diff(got, want, got["device"]) == []
    assert diff(flower["fleet"], direct["fleet"], "fleet") == []
    assert revisions(flower) == revisions(direct) == []
    assert flower.get("segment_s") == direct.get("segment_s") == SIM_SEGMENT_S
