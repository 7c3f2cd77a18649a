"""The virtual Jetson boards' layouts: what each module exposes in sysfs, and the tree writers.

Why a module of its own: a board's layout (its GPU devfreq node and frequency table, its power
monitor's driver, i2c address and rail names, its device-tree model) is data about real
hardware, apart from the kernel stand-in that brings a tree to life (``virtual_kernel.py``) and
the handle tests hold (``virtual_jetson.py``). Each layout is a ``BoardSpec`` in ``BOARDS``;
``write_tree`` writes one as plain files: a Nano (``57000000.gpu``, old iio ``ina3221x`` with
``rail_name_N`` + ``in_powerN_input``), a TX2 NX (``17000000.gp10b``, same iio layout) or an
Orin (``17000000.ga10b``, mainline hwmon ``ina3221`` with ``inN_label`` + ``inN_input`` x
``currN_input``, ``VDD_IN``). The single-file writers (``write_devfreq``, ``write_iio_rails``,
``write_hwmon_rails``) also serve tests that build partial or broken trees by hand.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulations.devicemodel.boards import JETSON_NANO, Device
from simulations.devicemodel.fitted import DEVICES

RAIL_MV = 5000  # the board input is a 5 V rail on every layout emulated here

#: Orin is emulated only (the device model has no calibrated Orin): a plausible power curve so
#: that power follows the clock on the hwmon layout; nothing in a profile comes from it.
JETSON_ORIN = Device(
    key="orin",
    name="jetson-orin",
    gpu="ga10b",
    devfreq_node="17000000.ga10b",
    freqs_mhz=(306.0, 408.0, 510.0, 612.0, 714.0, 816.0, 918.0, 1020.0, 1122.0, 1300.5),
    vf_knots=((306.0, 0.60), (714.0, 0.60), (1300.5, 0.80)),
    idle_w=3.5,
    host_scale=1.5,
    dyn_scale=0.45,
    compute_speed=4.0,
    memory_speed=4.0,
    fixed_scale=0.5,
    occupancy_scale=4.0,
)


def _hz(mhz: float) -> int:
    return int(round(mhz * 1e6))


@dataclass(frozen=True)
class BoardSpec:
    """What one module exposes: devfreq node, frequency table, rails and sensor layout."""

    key: str
    device: Device  # power model
    devfreq_node: str
    of_node: str | None  # device/of_node/name ("gpu" on Nano/TX2); Orin has none
    layout: str  # "iio" (JetPack 4 ina3221x) or "hwmon" (JetPack 5+ ina3221)
    bus: str  # i2c bus-address directory of the monitor
    rails: tuple[tuple[str, int, int, int], ...]  # initial (name, mW, mV, mA); first = input
    model_string: str | None  # /proc/device-tree/model
    governor: str = "nvhost_podgov"
    other_devfreq: tuple[tuple[str, tuple[int, ...]], ...] = ()  # other engines to skip

    @property
    def freqs_hz(self) -> tuple[int, ...]:
        return tuple(_hz(f) for f in self.device.freqs_mhz)


BOARDS: dict[str, BoardSpec] = {
    "nano": BoardSpec(
        key="nano",
        device=JETSON_NANO,
        devfreq_node="57000000.gpu",
        of_node="gpu",
        layout="iio",
        bus="6-0040",
        rails=(
            ("POM_5V_IN", 4321, 5000, 864),
            ("POM_5V_GPU", 1000, 5000, 200),
            ("POM_5V_CPU", 750, 5000, 150),
        ),
        model_string="NVIDIA Jetson Nano Developer Kit",
    ),
    "tx2nx": BoardSpec(
        key="tx2nx",
        device=DEVICES["tx2nx"],
        devfreq_node="17000000.gp10b",
        of_node="gp10b",
        layout="iio",
        bus="7-0040",
        rails=(
            ("POM_5V_IN", 6123, 5000, 1224),
            ("POM_5V_GPU", 2100, 5000, 420),
            ("POM_5V_CPU", 900, 5000, 180),
        ),
        model_string=None,
    ),
    "orin": BoardSpec(
        key="orin",
        device=JETSON_ORIN,
        devfreq_node="17000000.ga10b",
        of_node=None,
        layout="hwmon",
        bus="1-0040",
        rails=(
            ("VDD_IN", 0, 5072, 1471),
            ("VDD_CPU_GPU_CV", 0, 5064, 392),
            ("VDD_SOC", 0, 5070, 300),
        ),
        model_string=None,
        other_devfreq=(("15340000.vic", (115200000, 729600000)),),
    ),
}


# --------------------------------------------------------------------------------------------
# The tree (plain files)


def put(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_devfreq(
    root: Path,
    entry: str,
    hz: Sequence[int],
    of_name: str | None = None,
    governor: str = "nvhost_podgov",
) -> Path:
    """One devfreq node at min..max = full table, running at the top (order in file shuffled)."""
    d = Path(root) / "sys/class/devfreq" / entry
    shuffled = list(hz)[1:] + list(hz)[:1]  # the order in the file must not matter to readers
    put(d / "available_frequencies", " ".join(str(h) for h in shuffled) + "\n")
    put(d / "min_freq", f"{hz[0]}\n")
    put(d / "max_freq", f"{hz[-1]}\n")
    put(d / "cur_freq", f"{hz[-1]}\n")
    put(d / "governor", governor + "\n")
    if of_name is not None:
        put(d / "device/of_node/name", of_name + "\x00")
    return d


def write_iio_rails(
    root: Path, bus: str, rails: Sequence[tuple[str, int, int, int]], power: bool = True
) -> Path:
    """Old-style ina3221x iio device; rails: [(name, mW, mV, mA)]."""
    d = Path(root) / "sys/bus/i2c/drivers/ina3221x" / bus / "iio:device0"
    for n, (name, mw, mv, ma) in enumerate(rails):
        put(d / f"rail_name_{n}", name + "\n")
        if power:
            put(d / f"in_power{n}_input", f"{mw}\n")
        put(d / f"in_voltage{n}_input", f"{mv}\n")
        put(d / f"in_current{n}_input", f"{ma}\n")
    return d


def write_hwmon_rails(
    root: Path, bus: str, rails: Sequence[tuple[str, int, int]], via_class: bool = False
) -> Path:
    """Mainline ina3221 hwmon device (channels 1..3); rails: [(label, mV, mA)]."""
    if via_class:
        d = Path(root) / "sys/class/hwmon/hwmon2"
    else:
        d = Path(root) / "sys/bus/i2c/drivers/ina3221" / bus / "hwmon/hwmon3"
    put(d / "name", "ina3221\n")
    for n, (label, mv, ma) in enumerate(rails, start=1):
        put(d / f"in{n}_label", label + "\n")
        put(d / f"in{n}_input", f"{mv}\n")
        put(d / f"curr{n}_input", f"{ma}\n")
    put(d / "in7_input", "5000\n")  # unlabelled sum channel: not a rail
    return d


def write_tree(root: Path, spec: BoardSpec) -> Path:
    """Write ``spec``'s sysfs tree under ``root``; the GPU's devfreq directory."""
    for entry, hz in spec.other_devfreq:
        write_devfreq(root, entry, hz)
    node = write_devfreq(root, spec.devfreq_node, spec.freqs_hz, spec.of_node, spec.governor)
    if spec.layout == "iio":
        write_iio_rails(root, spec.bus, spec.rails)
    else:
        hw = write_hwmon_rails(root, spec.bus, [(n, mv, ma) for n, _, mv, ma in spec.rails])
        (root / "sys/class/hwmon").mkdir(parents=True, exist_ok=True)
        link = root / "sys/class/hwmon/hwmon3"
        if not link.exists():
            os.symlink(str(hw), str(link))  # the same device seen twice, as on a real board
    if spec.model_string is not None:
        put(root / "proc/device-tree/model", spec.model_string + "\x00")
    return node


def input_rail_files(root: Path, spec: BoardSpec) -> list[Path]:
    """The files that carry the board input rail in ``spec``'s layout (mW, or mV and mA)."""
    name = spec.rails[0][0]
    if spec.layout == "iio":
        d = root / "sys/bus/i2c/drivers/ina3221x" / spec.bus / "iio:device0"
        return [d / "in_power0_input", d / "in_voltage0_input", d / "in_current0_input"]
    d = root / "sys/bus/i2c/drivers/ina3221" / spec.bus / "hwmon/hwmon3"
    assert (d / "in1_label").read_text().strip() == name
    return [d / "in1_input", d / "curr1_input"]


def find_board(root: Path) -> tuple[BoardSpec, Path]:
    """The layout of a tree ``write_tree`` wrote under ``root``, and its GPU devfreq directory."""
    for spec in BOARDS.values():
        node = root / "sys/class/devfreq" / spec.devfreq_node
        if (
            node.is_dir()
            and (spec.layout == "iio") == (root / "sys/bus/i2c/drivers/ina3221x").is_dir()
        ):
            return spec, node
    raise ValueError(f"{root}: not a tree written by build_board")
