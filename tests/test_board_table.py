"""The board table (issue 19): identity from the device tree's real strings, JetPack from the L4T
release, rails that make each board's total, device types generated for every row, and a
profile store that never hands a profile to a board whose clocks it does not name."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients import records
from fleet.agent import devices
from fleet.agent.devices import board_identity
from fleet.agent.devices.boards import BOARDS, ROWS, identify, jetpack_of
from fleet.common.errors import InputError
from fleet.config.device_types import DEVICE_TYPES, clocks_outside, sibling_fits
from fleet.config.fleetfile import DeviceSpec, load_fleet
from fleet.core.profile import load_profile
from fleet.rounds.device_round import check_device_type
from fleet.trust.store import Provenance, Workload, adopt_sibling, put, sibling

# (compatible entries as the device tree lists them, model, GPU devfreq node) -> row key.
# The strings are the ones public sources report from real boards (docs/boards.md).
REAL = [
    (("nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210"),
     "NVIDIA Jetson Nano Developer Kit", "57000000.gpu", "jetson-nano"),
    (("nvidia,p3542-0000+p3448-0003", "nvidia,jetson-nano-2gb", "nvidia,jetson-nano",
      "nvidia,tegra210"), "NVIDIA Jetson Nano 2GB Developer Kit", "57000000.gpu",
     "jetson-nano-2gb"),
    ((), "NVIDIA Jetson Nano 2GB Developer Kit", "57000000.gpu", "jetson-nano-2gb"),
    (("nvidia,p2771-0000", "nvidia,tegra186"), "quill", "17000000.gp10b", "jetson-tx2"),
    ((), "quill", "17000000.gp10b", "jetson-tx2"),
    (("nvidia,p3509-0000+p3636-0001", "nvidia,tegra186"), "lanai-3636", "17000000.gp10b",
     "jetson-tx2nx"),
    (("nvidia,p3509-0000+p3636-0001", "nvidia,tegra186"), "", "17000000.gp10b", "jetson-tx2nx"),
    (("nvidia,p3509-0000+p3668-0001", "nvidia,tegra194"),
     "NVIDIA Jetson Xavier NX Developer Kit", "17000000.gv11b", "jetson-xavier-nx"),
    # a Xavier NX on the Nano's carrier (p3449): the carrier must not make it a Nano
    (("nvidia,p3449-0000+p3668-0001", "nvidia,tegra194"), "", "17000000.gv11b",
     "jetson-xavier-nx"),
    (("nvidia,p2972-0000", "nvidia,jetson-xavier", "nvidia,tegra194"), "jetson-xavier",
     "17000000.gv11b", "jetson-agx-xavier"),
    ((), "jetson-xavier", "17000000.gv11b", "jetson-agx-xavier"),  # model on L4T 32.1
    ((), "Jetson-AGX", "17000000.gv11b", "jetson-agx-xavier"),  # model from L4T 32.2
    (("nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", "nvidia,tegra234"), "",
     "17000000.ga10b", "jetson-orin-nx"),
    (("nvidia,p3768-0000+p3767-0001-super", "nvidia,p3767-0001", "nvidia,tegra234"), "",
     "17000000.gpu", "jetson-orin-nx-super"),
    (("nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"),
     "NVIDIA Orin Nano Developer Kit", "17000000.ga10b", "jetson-orin-nano"),
    ((), "NVIDIA Orin Nano Developer Kit", "17000000.ga10b", "jetson-orin-nano"),  # not a Nano
    (("nvidia,p3768-0000+p3767-0005-super", "nvidia,p3767-0005", "nvidia,tegra234"),
     "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "17000000.gpu",
     "jetson-orin-nano-super"),
    ((), "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "17000000.gpu",
     "jetson-orin-nano-super"),
    (("nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234",
      "nvidia,tegra23x"), "Jetson AGX Orin", "17000000.ga10b", "jetson-agx-orin"),
    ((), "NVIDIA Jetson AGX Orin Developer Kit", "17000000.gpu", "jetson-agx-orin"),
    (("nvidia,p4071-0000+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"),
     "NVIDIA Jetson AGX Thor Developer Kit", "gpu-gpc-0", "jetson-thor"),
    ((), "", "gpu-gpc-0", "jetson-thor"),
]  # fmt: skip


@pytest.mark.parametrize("compatible,model,node,key", REAL)
def test_identify_on_real_device_tree_strings(compatible, model, node, key):
    board = identify(compatible, model, node)
    assert board is not None and board.key == key


def test_every_row_is_identified_by_its_real_strings():
    assert {case[-1] for case in REAL} == set(BOARDS)
    assert identify((), "", "15340000.vic") is None
    assert identify((), "", "17000000.gp10b") is None  # TX2 or TX2 NX: the GPU cannot tell


def _tree(root: Path, compatible=(), model=None, release=None) -> Path:
    dt = root / "proc" / "device-tree"
    dt.mkdir(parents=True, exist_ok=True)
    if compatible:
        (dt / "compatible").write_bytes(b"".join(c.encode() + b"\x00" for c in compatible))
    if model is not None:
        (dt / "model").write_bytes(model.encode() + b"\x00")
    if release is not None:
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc" / "nv_tegra_release").write_text(release)
    return root


def test_board_identity_reads_compatible_model_and_release(tmp_path):
    root = _tree(
        tmp_path,
        ("nvidia,p3509-0000+p3636-0001", "nvidia,tegra186"),
        "lanai-3636",
        "# R32 (release), REVISION: 7.1, GCID: 29689809, BOARD: t186ref, EABI: aarch64\n",
    )
    assert board_identity.board_compatible(str(root)) == (
        "nvidia,p3509-0000+p3636-0001",
        "nvidia,tegra186",
    )
    assert board_identity.board_row(str(root), "17000000.gp10b").key == "jetson-tx2nx"
    assert board_identity.jetpack(str(root)) == 4
    # the node and of_node alone cannot tell TX2 from TX2 NX; the device tree under root does
    assert board_identity.device_type("17000000.gp10b", "gp10b") == ""
    assert board_identity.device_type("17000000.gp10b", "gp10b", root=str(root)) == "jetson-tx2nx"


def test_compatible_decides_where_the_model_is_silent(tmp_path):
    """An AGX Orin whose model string names no module: the compatible places it, not the
    legacy family; without a device tree the GPU node gives the family type."""
    root = _tree(
        tmp_path,
        ("nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234"),
        "NVIDIA Jetson",
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64\n",
    )
    assert board_identity.device_type("17000000.gpu", "gpu", root=str(root)) == "jetson-agx-orin"
    assert board_identity.jetpack(str(root)) == 6
    bare = str(tmp_path / "none")
    assert board_identity.board_compatible(bare) == () and board_identity.jetpack(bare) is None
    assert board_identity.board_row(bare, "17000000.gpu") is None
    assert board_identity.device_type("17000000.gpu", "gpu", root=bare) == "jetson-orin"


@pytest.mark.parametrize(
    "l4t,jetpack",
    [("32.7.1", 4), ("R32", 4), ("34.1.1", 5), ("35.4.1", 5), ("36.4.3", 6), ("38.2.0", 7),
     ("39.2.0", 7), ("33.1", None), ("", None), ("R", None), ("abc", None)],
)  # fmt: skip
def test_jetpack_of_l4t_release(l4t, jetpack):
    assert jetpack_of(l4t) == jetpack


@pytest.mark.parametrize("board", ROWS, ids=[b.key for b in ROWS])
def test_every_total_rail_is_a_sensor_label(board):
    labels = [label for s in board.sensors for label in s.labels]
    assert set(board.total) <= set(labels) - {"NC"}
    assert set(board.total_optional) <= set(board.total)
    assert (not board.sensors) == (not board.total)  # a sensor means a total, and back
    assert board.gpu_nodes and all(board.gpu_nodes.values())
    assert list(board.clock_hz) == sorted(set(board.clock_hz))


def test_device_types_come_from_the_one_table():
    keys = [b.key for b in ROWS] + ["jetson-orin", "nvml-gpu", "cpu"]
    assert list(devices.DEVICE_TYPES) == keys and list(DEVICE_TYPES) == keys
    assert {devices.backend_for_device_type(k) for k in BOARDS} == {"jetson"}
    assert "legacy" in DEVICE_TYPES["jetson-orin"]
    assert "no power sensor" in DEVICE_TYPES["jetson-nano-2gb"]
    assert "VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0" in DEVICE_TYPES["jetson-agx-orin"]


def test_every_device_type_loads_in_a_fleet_file_and_a_node_config(tmp_path):
    (tmp_path / "p.csv").write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,1,1,1\n")
    (tmp_path / "e.csv").write_text("batch_size,samples_to_accuracy\n8,100\n")
    entries = "".join(
        f'[[devices]]\nname = "d{i}"\ntype = "{t}"\nbudget_w = 5.0\n'
        'profile = "p.csv"\ndata = "e.csv"\n'
        for i, t in enumerate(DEVICE_TYPES)
    )
    (tmp_path / "f.toml").write_text(
        '[run]\nmodel = "m"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n' + entries
    )
    fleet = load_fleet(tmp_path / "f.toml")
    assert [d.device_type for d in fleet.devices] == list(DEVICE_TYPES)
    for t in DEVICE_TYPES:
        nc = {"device-name": "n", "device-type": t, "budget-w": 5.0, "profile": "/p.csv"}
        assert records.spec_from_node_config(nc).device_type == t
    (tmp_path / "g.toml").write_text(
        (tmp_path / "f.toml").read_text().replace('"jetson-thor"', '"jetson-xavier"')
    )
    with pytest.raises(InputError) as err:
        load_fleet(tmp_path / "g.toml")
    assert "unknown device type 'jetson-xavier'" in str(err.value) and "\n" not in str(err.value)


# -- profiles never cross to a board whose clocks they do not name ------------------------------
WL = Workload.of("resnet18", (3, 32, 32))
AGX_MHZ = [114.75, 624.75, 1300.5]  # AGX Orin clocks; 1300.5 is no Orin NX clock
NX_MHZ = [306.0, 612.0, 918.0]  # Orin NX clocks; none of them an AGX Orin clock


def _csv(freqs: list[float], device: str = "") -> str:
    head = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,model,input_shape"
    rows = [
        f"{b},{f:g},{0.4 / b + 100.0 / f:.5f},{3 + f / 200:.3f},{2 + f / 250:.3f},resnet18,3x32x32"
        + (f",{device}" if device else "")
        for b in (8, 32)
        for f in freqs
    ]
    return "\n".join([head + (",device" if device else "")] + rows) + "\n"


def test_clock_tables_of_two_orin_modules_differ():
    assert clocks_outside(AGX_MHZ, "jetson-agx-orin") == []
    assert clocks_outside(AGX_MHZ, "jetson-orin-nx") == [114.75, 624.75, 1300.5]
    assert clocks_outside(NX_MHZ, "jetson-orin-nx") == []
    assert clocks_outside(AGX_MHZ, "jetson-orin") == []  # no table: nothing to check


def test_store_never_hands_a_profile_to_a_board_whose_clocks_it_does_not_name(tmp_path):
    store = tmp_path / "s"
    put(store, "agx-1", WL, _csv(AGX_MHZ), Provenance("jetson-agx-orin", "measured"))
    put(store, "old-1", WL, _csv(AGX_MHZ), Provenance("jetson-orin", "measured"))
    # an AGX Orin profile (exact or legacy family) at 1300.5 MHz never reaches an Orin NX
    assert sibling(store, "jetson-orin-nx", WL) is None
    assert adopt_sibling(store, "nx-1", "jetson-orin-nx", WL) is None
    # an AGX Orin gets the measured exact-type profile; the legacy one names only its clocks too
    assert sibling(store, "jetson-agx-orin", WL, exclude="agx-1").device == "old-1"
    got = adopt_sibling(store, "agx-2", "jetson-agx-orin", WL)
    assert got is not None and got.provenance.board_type == "jetson-agx-orin"
    # a legacy receiver keeps what it had: legacy siblings only (its clocks are unknown)
    assert sibling(store, "jetson-orin", WL).device == "old-1"
    # an Orin NX profile goes to the next Orin NX, and a legacy one naming NX clocks does too
    put(store, "nx-old", WL, _csv(NX_MHZ), Provenance("jetson-orin", "measured"))
    assert sibling(store, "jetson-orin-nx", WL).device == "nx-old"
    assert sibling(store, "jetson-agx-orin", WL, exclude="agx-1").device != "nx-old"
    # a same-type profile naming a clock outside its own table is not handed on either
    put(store, "nx-odd", WL, _csv([306.0, 1020.0]), Provenance("jetson-orin-nx", "measured"))
    assert sibling(store, "jetson-orin-nx", WL).device == "nx-old"
    assert not sibling_fits("jetson-orin-nx", [306.0, 1020.0], "jetson-orin-nx")
    assert sibling_fits("jetson-orin-nx", [306.0], "jetson-orin-nx-super") is False  # exact


def test_device_round_keeps_legacy_orin_fleets_working(tmp_path):
    def spec(dtype: str) -> DeviceSpec:
        return DeviceSpec("dev", dtype, 5.0, str(tmp_path / "p.csv"), None)

    def profile(freqs, device):
        (tmp_path / "p.csv").write_text(_csv(freqs, device))
        return load_profile(tmp_path / "p.csv")

    check_device_type(spec("jetson-orin"), profile(AGX_MHZ, "jetson-agx-orin"))  # "some Orin"
    check_device_type(spec("jetson-agx-orin"), profile(AGX_MHZ, "jetson-orin"))  # clocks fit
    check_device_type(spec("jetson-orin-nx"), profile(NX_MHZ, "jetson-orin"))
    with pytest.raises(InputError, match=r"1300\.5 MHz, which the jetson-orin-nx clock table"):
        check_device_type(spec("jetson-orin-nx"), profile(AGX_MHZ, "jetson-orin"))
    with pytest.raises(InputError, match="recorded on 'jetson-agx-orin'"):
        check_device_type(spec("jetson-orin-nx"), profile(AGX_MHZ, "jetson-agx-orin"))
    with pytest.raises(InputError, match="recorded on 'jetson-tx2nx'"):
        check_device_type(spec("jetson-tx2"), profile([140.25], "jetson-tx2nx"))
