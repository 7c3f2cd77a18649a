"""First contact through the fleet: a board with no profile, two rounds on a loopback deployment.

A real SuperLink and one hardware SuperNode on 127.0.0.1 (``insecure=True``); the node's agent
replays the reference Nano grid. Its fleet entry (``client = "hardware"``) names no profile, so
the loader must not stop; in round 1 the board profiles in predict mode and returns the CSV,
the coordinator stores it (``[run] profile_store``) with provenance; in round 2 the store ships
it back and the board does not profile again. ``powerfleet profiles STORE`` lists it. Plus the
pieces on their own: the loader rule, the instruction's ``profiles`` round trip, and the
provenance the Jetson backend reads from the board tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients import records
from deployment import daemons
from fleet.agent.devices.jetson import JetsonBackend
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.core.efficiency import Efficiency
from fleet.trust.store import get, list_store
from simulations.virtual_jetson import build_board
from strategies.profiles import workload_of
from tests.conftest import run_cli
from tests.deploy_helpers import run_loopback_round, stopped_at_exit

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "simulations"
NANO = SIM / "profiles" / "nano_resnet18.csv"


def fleet_text(store: Path, profile_line: str = "") -> str:
    return f"""
[run]
name = "first-contact"
model = "resnet18"
efficiency = "{SIM}/efficiency/resnet18_cifar10-proxy.csv"
target_accuracy = 0.87
rounds = 2
ship_weights = false
profile_store = "{store}"

[[devices]]
name = "nano-new"
type = "jetson-nano"
client = "hardware"
budget_w = 5.0
{profile_line}
"""


def test_loader_lets_a_hardware_device_come_without_a_profile(tmp_path: Path) -> None:
    f = tmp_path / "fleet.toml"
    f.write_text(fleet_text(tmp_path / "store"))
    assert load_fleet(f).devices[0].profile == ""
    f.write_text(fleet_text(tmp_path / "store", 'profile = "not-yet.csv"'))
    assert load_fleet(f).devices[0].profile == str(tmp_path / "not-yet.csv")
    replay = fleet_text(tmp_path / "store", 'profile = "not-yet.csv"').replace(
        'client = "hardware"', ""
    )
    f.write_text(replay + f'data = "{NANO}"\n')
    with pytest.raises(InputError, match="profile: file not found"):
        load_fleet(f)  # a replayed device still needs its profile
    f.write_text(fleet_text(tmp_path / "store").replace('"hardware"', '"board"'))
    with pytest.raises(InputError, match="'client' must be one of replay, hardware"):
        load_fleet(f)


def test_instruction_carries_the_shipped_profiles() -> None:
    from fleet.config.fleetfile import RunSettings

    shipped = {"nano-new": {"origin": "stored", "csv": "batch_size,freq_mhz\n8,76.8\n"}}
    ins = records.TrainInstruction(
        Efficiency({8: 100.0}), RunSettings("r", "resnet18", "e.csv", 0.9), profiles=shipped
    )
    back = records.decode_instruction(records.encode_instruction(ins))
    assert back.profiles == shipped
    content = records.reply_content(records.error_row("nano-new", "x"))
    records.attach_profile(content, "a,b\n", {"origin": "profiled", "probes": 18})
    assert records.reply_profile(content.config_records[records.REPORT]) == (
        "a,b\n",
        {"origin": "profiled", "probes": 18},
    )


def test_jetson_describe_reads_l4t_and_serial_under_the_root(tmp_path: Path) -> None:
    board = build_board(tmp_path / "b", "nano")
    bare = JetsonBackend(sysfs_root=str(board.root)).describe()
    assert (bare["l4t"], bare["serial"]) == ("", "")  # absent -> empty
    (board.root / "etc").mkdir(parents=True, exist_ok=True)
    (board.root / "etc" / "nv_tegra_release").write_text(
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n"
    )
    (board.root / "proc" / "device-tree").mkdir(parents=True, exist_ok=True)
    (board.root / "proc" / "device-tree" / "serial-number").write_text("1422019012345\x00")
    info = JetsonBackend(sysfs_root=str(board.root)).describe()
    assert (info["l4t"], info["serial"]) == ("32.7.1", "1422019012345")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_first_contact_profiles_once_and_round_two_reuses(tmp_path: Path) -> None:
    store = tmp_path / "store"
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(fleet_text(store))
    fleet = load_fleet(fleet_file)
    spec = fleet.devices[0]
    run_dir = tmp_path / "run"
    config = daemons.device_node_config(spec.to_node_config(), "hardware")
    config.update(backend="replay", **{"profile-csv": str(NANO)})
    config["work-dir"] = str(tmp_path / "board")
    run_config = {"fleet-path": str(fleet_file), "run-dir": str(run_dir), "run-token": "t-fc"}
    with stopped_at_exit() as procs:
        status, details = run_loopback_round(
            procs, tmp_path, {spec.name: config}, run_config, timeout_s=150
        )
    assert status == "finished:completed", details

    def row(n: int) -> dict:
        rep = json.loads((run_dir / "rounds" / f"round-{n:03d}" / "report.json").read_text())
        (r,) = rep["devices"]
        return r

    first, second = row(1), row(2)
    assert first["status"] == "selected", first["message"]
    assert first["message"].startswith("profile profiled (")  # first contact: it profiled
    probes_1 = int(first["message"].split("(")[1].split()[0])
    assert 0 < probes_1 < 72 * 0.4  # predict mode: a small design, not the 72-point grid
    assert second["status"] == "selected", second["message"]
    assert second["message"].startswith("profile stored (0 probe(s))")  # shipped back, reused
    assert (second["batch_size"], second["freq_mhz"]) == (first["batch_size"], first["freq_mhz"])
    stored = get(store, spec.name, workload_of(fleet))
    assert stored is not None
    assert stored.provenance.board_type == "jetson-nano"
    assert stored.provenance.source == "predicted" and stored.provenance.date
    assert len(stored.rows) == 72 and len(list_store(store)) == 1
    listed = run_cli("profiles", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    assert spec.name in listed.stdout and "jetson-nano" in listed.stdout


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_new_board_of_a_known_type_starts_from_a_sibling_and_verifies(tmp_path: Path) -> None:
    from flwr.app import RecordDict

    from clients.hardware_client import hardware_round
    from fleet.core.choice import align
    from fleet.core.efficiency import load_efficiency
    from fleet.core.profile import load_profile
    from fleet.core.selection import select
    from fleet.trust.store import Provenance, put
    from strategies.profiles import ProfileKeeper

    store = tmp_path / "store"
    fleet_file = tmp_path / "fleet.toml"
    text = fleet_text(store) + '\n[[devices]]\nname = "nano-b"\ntype = "jetson-nano"\n'
    fleet_file.write_text(text + 'client = "hardware"\nbudget_w = 5.0\n')
    fleet = load_fleet(fleet_file)
    put(store, "nano-new", workload_of(fleet), NANO.read_text(), Provenance("jetson-nano"))
    keeper = ProfileKeeper(fleet, store, tmp_path)
    shipped = keeper.shipment()
    assert shipped["nano-new"]["origin"] == "stored" and shipped["nano-b"]["origin"] == "sibling"
    spec = fleet.devices[1]
    config = daemons.device_node_config(spec.to_node_config(), "hardware")
    config.update(backend="replay", **{"profile-csv": str(NANO), "work-dir": str(tmp_path / "b")})
    eff = load_efficiency(fleet.run.efficiency)
    ins = records.TrainInstruction(eff, fleet.run, str(fleet_file), 1, profiles=shipped)
    reply = hardware_round(config, RecordDict({records.CONFIG: records.encode_instruction(ins)}))
    report = reply.config_records[records.REPORT]
    row = records.decode_reply(reply.metric_records[records.METRICS], report)
    assert row["status"] == "selected", row["message"]
    assert str(row["message"]).startswith("profile sibling (")
    probes = int(str(row["message"]).split("(")[1].split()[0])
    assert 1 <= probes <= 6  # a few probes verify the choice, no profiling from scratch
    want = select(*align(load_profile(NANO), eff)[:2], 5.0)
    assert (row["batch_size"], row["freq_mhz"]) == (want.batch_size, want.freq_mhz)
    # The verified copy goes back into the store under the new board's name.
    assert keeper.absorb_content(reply) == "nano-b"
    mine = get(store, "nano-b", workload_of(fleet))
    assert mine is not None and mine.provenance.board_type == "jetson-nano"
    chosen = [r for r in mine.rows if (int(r["batch_size"]), float(r["freq_mhz"]))
              == (want.batch_size, want.freq_mhz)]  # fmt: skip
    assert chosen and chosen[0]["source"] == "measured"
