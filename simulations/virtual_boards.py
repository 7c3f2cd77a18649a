"""The virtual Jetson boards: every row of the board table as a layout, and its sysfs tree.

Why a module of its own: a board's layout (its GPU devfreq node(s) and clock table, its power
monitors' drivers, i2c addresses and labels, its device-tree identity and L4T release) is data
about real hardware, apart from the kernel stand-in that brings a tree to life
(``virtual_kernel.py``), the drivers' file formats (``virtual_sysfs.py``), the power curves
(``virtual_devices.py``) and the handle tests hold (``virtual_jetson.py``).

Every layout is *generated* from ``fleet.agent.devices.boards`` (the one place for board facts):
:func:`board_spec` takes a row key and a JetPack major and reads the row's GPU nodes for that
JetPack, its clock table, its sensors (iio ``ina3221x`` on JetPack 4, hwmon ``ina3221`` on 5+,
hwmon ``ina238``) and the rails that make its total. What the table does not carry and a tree
needs is kept here, marked: the full device-tree ``compatible`` entries and ``model`` strings
(the table keeps only the tokens it matches on; a test checks ``identify`` finds each row from
them), one representative L4T release per JetPack, and the three short keys of the earlier
tests (``ALIASES``: ``nano``, ``tx2nx``, ``orin``), which keep those tests' first readings
and their bare identity (model only, no release file).

Power on the rails (:func:`reading_files`): the board's modeled watts are split over the row's
``total`` rails in fixed shares (integer units, largest remainder, so that the rails' sum is the
modeled power to the sensor's resolution); every other connected rail reads a fixed fraction of
the total (a sub-rail: adding it would count it twice); "NC" channels read nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleet.agent.devices.board_identity import VIRTUAL_MARKER
from fleet.agent.devices.boards import BOARDS as ROWS_BY_KEY
from fleet.agent.devices.boards import L4T_TO_JETPACK, ROWS, Board, kernel_rules
from simulations.devicemodel.boards import Device
from simulations.virtual_devices import JETSON_ORIN, POWER_MODELS, clock_table
from simulations.virtual_sysfs import (
    INA238_MV,
    NC,
    RAIL_MV,
    hwmon_dir,
    iio_dir,
    iio_values,
    ina238_values,
    ina3221_values,
    put,
    write_devfreq,
    write_hwmon_rails,
    write_identity,
    write_iio_rails,
    write_ina238_hwmon,
    write_ina3221_hwmon,
)

CONTROL_DIR = ".virtual_jetson"  # the kernel stand-in's control/status files (not sysfs)
LATE_DIR = "late"  # under CONTROL_DIR: GPU nodes the kernel creates later (JetPack 7 boot)

#: Device-tree identity per row, as real boards report it (sources: docs/boards.md and
#: /work/notes/boards-facts.md section 1): ``compatible`` entries, and ``model`` by JetPack
#: (key 0: any). Not in the board table, which keeps only the tokens it matches on.
DT_IDENTITY: dict[str, tuple[tuple[str, ...], dict[int, str]]] = {
    "jetson-nano-2gb": (
        ("nvidia,p3542-0000+p3448-0003", "nvidia,jetson-nano-2gb", "nvidia,jetson-nano",
         "nvidia,tegra210"),
        {0: "NVIDIA Jetson Nano 2GB Developer Kit"},
    ),
    "jetson-nano": (
        ("nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210"),
        {0: "NVIDIA Jetson Nano Developer Kit"},
    ),
    "jetson-tx2nx": (("nvidia,p3509-0000+p3636-0001", "nvidia,tegra186"), {0: "lanai-3636"}),
    "jetson-tx2": (("nvidia,p2771-0000", "nvidia,tegra186"), {0: "quill"}),
    "jetson-xavier-nx": (
        ("nvidia,p3509-0000+p3668-0001", "nvidia,tegra194"),
        {0: "NVIDIA Jetson Xavier NX Developer Kit"},
    ),
    "jetson-agx-xavier": (("nvidia,jetson-xavier", "nvidia,tegra194"), {0: "Jetson-AGX"}),
    "jetson-orin-nano-super": (
        ("nvidia,p3768-0000+p3767-0005-super", "nvidia,tegra234"),
        {0: "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super"},
    ),
    "jetson-orin-nano": (
        ("nvidia,p3768-0000+p3767-0005", "nvidia,tegra234"),
        {0: "NVIDIA Orin Nano Developer Kit"},
    ),
    "jetson-orin-nx-super": (  # model by analogy with the Orin Nano Super (UNVERIFIED)
        ("nvidia,p3768-0000+p3767-0000-super", "nvidia,tegra234"),
        {0: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit Super"},
    ),
    "jetson-orin-nx": (  # model by analogy (UNVERIFIED)
        ("nvidia,p3768-0000+p3767-0000", "nvidia,tegra234"),
        {0: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit"},
    ),
    "jetson-agx-orin": (
        ("nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234",
         "nvidia,tegra23x"),
        {5: "Jetson AGX Orin", 0: "NVIDIA Jetson AGX Orin Developer Kit"},
    ),
    "jetson-thor": (
        ("nvidia,p4071-0000+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"),
        {0: "NVIDIA Jetson AGX Thor Developer Kit"},
    ),
}  # fmt: skip

#: One representative release per L4T major (``/etc/nv_tegra_release``); JetPack 7 is written as
#: L4T 39 (JetPack 7.2), the release both Orin and Thor run.
L4T_REVISION = {32: "7.1", 35: "4.1", 36: "4.3", 39: "2.0"}


@dataclass(frozen=True)
class SensorSpec:
    """One power monitor as the tree shows it: chip, i2c address, labels, driver, index."""

    chip: str  # "ina3221" or "ina238" (the table's)
    address: str  # i2c bus-address, e.g. "1-0040"
    labels: tuple[str, ...]
    driver: str  # "ina3221x" (iio, JetPack 4), "ina3221" or "ina238" (hwmon)
    index: int  # N of iio:deviceN or hwmonN

    def directory(self, root: Path) -> Path:
        if self.driver == "ina3221x":
            return iio_dir(root, self.address, self.index)
        return hwmon_dir(root, self.driver, self.address, self.index)


@dataclass(frozen=True)
class Alias:
    """A short key of the earlier tests: a row on one JetPack, with that test's first readings
    and bare identity (only ``model``, no compatible, no release file)."""

    row: str
    jetpack: int
    model: str | None
    of_node: bool  # whether the GPU node has device/of_node/name
    initial: tuple[tuple[str, int, int, int], ...]  # (label, mW, mV, mA) before a kernel runs
    other_devfreq: tuple[tuple[str, tuple[int, ...]], ...] = ()


ALIASES: dict[str, Alias] = {
    "nano": Alias(
        "jetson-nano", 4, "NVIDIA Jetson Nano Developer Kit", True,
        (("POM_5V_IN", 4321, 5000, 864), ("POM_5V_GPU", 1000, 5000, 200),
         ("POM_5V_CPU", 750, 5000, 150)),
    ),
    "tx2nx": Alias(
        "jetson-tx2nx", 4, None, True,
        (("VDD_IN", 6123, 5000, 1224), ("VDD_CPU_GPU", 2100, 5000, 420),
         ("VDD_SOC", 900, 5000, 180)),
    ),
    # "an Orin of today's layout": JetPack 5 (17000000.ga10b, no of_node), hwmon VDD_IN, a vic
    "orin": Alias(
        "jetson-orin-nx", 5, None, False,
        (("VDD_IN", 0, 5072, 1471), ("VDD_CPU_GPU_CV", 0, 5064, 392), ("VDD_SOC", 0, 5070, 300)),
        (("15340000.vic", (115200000, 729600000)),),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class BoardSpec:
    """One board on one JetPack, generated from its table row: what its tree holds."""

    key: str  # what build_board was given (a row key or an alias)
    row: Board
    jetpack: int
    device: Device  # power model
    nodes: tuple[str, ...]  # GPU devfreq node(s), primary first
    clock_hz: tuple[int, ...]  # ascending
    clock_virtual: bool  # True: not the row's table (the row has none): VIRTUAL ONLY
    of_node: str | None  # device/of_node/name of the GPU node(s)
    sensors: tuple[SensorSpec, ...]
    compatible: tuple[str, ...]
    model_string: str | None
    release_line: str | None  # first line of etc/nv_tegra_release
    initial: tuple[tuple[str, int, int, int], ...] = ()
    other_devfreq: tuple[tuple[str, tuple[int, ...]], ...] = ()
    governor: str = "nvhost_podgov"

    @property
    def devfreq_node(self) -> str:
        return self.nodes[0]

    @property
    def freqs_hz(self) -> tuple[int, ...]:
        return self.clock_hz

    @property
    def rules(self) -> str:
        """devfreq's write rules: "einval" (JetPack 4) or "pmqos" (5+)."""
        return kernel_rules(self.jetpack)

    @property
    def layout(self) -> str:
        """The first sensor's layout: "iio", "hwmon", or "none" (no sensor)."""
        if not self.sensors:
            return "none"
        return "iio" if self.sensors[0].driver == "ina3221x" else "hwmon"

    @property
    def bus(self) -> str:
        return self.sensors[0].address if self.sensors else ""

    @property
    def total(self) -> tuple[str, ...]:
        return self.row.total

    def connected(self) -> list[tuple[SensorSpec, int, str]]:
        """(sensor, channel position from 0, label) of every connected rail, sensor by sensor."""
        return [(s, i, lab) for s in self.sensors for i, lab in enumerate(s.labels) if lab != NC]


def _sensors(row: Board, jetpack: int) -> tuple[SensorSpec, ...]:
    out, iio, hwmon = [], 0, 1  # hwmon0 is taken by a thermal sensor on real boards
    for s in row.sensors:
        if s.chip == "ina3221" and jetpack == 4:
            out.append(SensorSpec(s.chip, s.address, s.labels, "ina3221x", iio))
            iio += 1
        else:
            out.append(SensorSpec(s.chip, s.address, s.labels, s.chip, hwmon))
            hwmon += 1
    return tuple(out)


def release_line(jetpack: int, codename: str = "") -> str:
    """A plausible ``/etc/nv_tegra_release`` first line for ``jetpack``."""
    major = max(m for m, jp in L4T_TO_JETPACK.items() if jp == jetpack)
    ref = "generic" if jetpack >= 6 else ("t210ref" if codename in ("porg", "batuu") else "t186ref")
    return (
        f"# R{major} (release), REVISION: {L4T_REVISION[major]}, GCID: 00000000, BOARD: {ref}, "
        "EABI: aarch64, DATE: Thu Jan  1 00:00:00 UTC 2025"
    )


def jetpacks(key: str) -> tuple[int, ...]:
    """The JetPack majors a row (or alias) can be built for, oldest first."""
    if key in ALIASES:
        return (ALIASES[key].jetpack,)
    return tuple(sorted(_row(key).gpu_nodes))


def _row(key: str) -> Board:
    if key not in ROWS_BY_KEY:
        valid = ", ".join(sorted(ALIASES) + [r.key for r in ROWS])
        raise ValueError(f"unknown board {key!r}; valid: {valid}")
    return ROWS_BY_KEY[key]


def board_spec(key: str, jetpack: int | None = None) -> BoardSpec:
    """The layout of row (or alias) ``key`` on ``jetpack`` (default: the alias's, or the newest
    JetPack the row runs)."""
    alias = ALIASES.get(key)
    row = _row(alias.row if alias else key)
    supported = tuple(sorted(row.gpu_nodes))
    jp = jetpack if jetpack is not None else (alias.jetpack if alias else supported[-1])
    if jp not in supported:
        raise ValueError(f"board {key!r} does not run JetPack {jp}; it runs {supported}")
    nodes = row.gpu_nodes[jp]
    hz, virtual = clock_table(row)
    primary = nodes[0]
    of_node = primary.split(".", 1)[1] if "." in primary else None  # "17000000.gpu" -> "gpu"
    compatible, models = DT_IDENTITY[row.key]
    if alias is not None:
        compatible, model, release = (), alias.model, None
        of_node = of_node if alias.of_node else None
    else:
        model, release = models.get(jp, models[0]), release_line(jp, row.codename)
    return BoardSpec(
        key=key,
        row=row,
        jetpack=jp,
        device=POWER_MODELS[row.key],
        nodes=nodes,
        clock_hz=hz,
        clock_virtual=virtual,
        of_node=of_node,
        sensors=_sensors(row, jp),
        compatible=compatible,
        model_string=model,
        release_line=release,
        initial=alias.initial if alias else (),
        other_devfreq=alias.other_devfreq if alias else (),
    )


#: The three layouts the earlier tests were written against (``build_board``'s short keys).
BOARDS: dict[str, BoardSpec] = {k: board_spec(k) for k in ALIASES}
ROW_KEYS: tuple[str, ...] = tuple(r.key for r in ROWS)


# --------------------------------------------------------------------------------------------
# Power on the rails


def _largest_remainder(total: int, shares: list[float]) -> list[int]:
    raw = [total * s for s in shares]
    out = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - out[i], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def rail_microwatts(spec: BoardSpec, watts: float) -> dict[str, int]:
    """Every connected rail's power in uW when the board draws ``watts``: the ``total`` rails
    share it (their sum is ``watts`` to the coarsest sensor unit among them), the others read
    fixed fractions of it (together 60 % of the smallest total rail: sub-rails, never to be
    added to the total)."""
    rails = spec.connected()
    total = [(s, lab) for s, _, lab in rails if lab in spec.total]
    unit = 1
    for s, _ in total:  # the coarsest step among the total rails: 5 mW (hwmon mA at 5 V), 1 mW
        unit = max(
            unit, RAIL_MV if s.driver == "ina3221" else 1000 if s.driver == "ina3221x" else 1
        )
    out: dict[str, int] = {}
    if total:
        n = len(total)
        weights = [float(n - i) for i in range(n)]
        units = _largest_remainder(
            int(round(watts * 1e6 / unit)), [w / sum(weights) for w in weights]
        )
        out.update({lab: u * unit for (_, lab), u in zip(total, units, strict=True)})
    # sub-rails: together 60 % of the smallest total rail, so none outdraws a rail feeding it
    base = min(out.values()) if out else watts * 1e6
    others = [lab for _, _, lab in rails if lab not in spec.total]
    m = len(others)
    for j, lab in enumerate(others):
        out[lab] = int(round(base * 0.6 * (m - j) / (m * (m + 1) / 2)))
    return out


def reading_files(root: Path, spec: BoardSpec, watts: float) -> list[tuple[Path, str]]:
    """The sensor files and their text when the board draws ``watts`` (total rails first)."""
    uw = rail_microwatts(spec, watts)
    out: list[tuple[Path, str]] = []
    for s, i, lab in sorted(spec.connected(), key=lambda c: c[2] not in spec.total):
        d = s.directory(root)
        if s.driver == "ina3221x":
            values = {k.format(k=i): v for k, v in iio_values(uw[lab] // 1000).items()}
        elif s.driver == "ina3221":
            values = ina3221_values(i + 1, int(round(uw[lab] / RAIL_MV)))
        else:
            values = ina238_values(uw[lab])
        out.extend((d / name, text) for name, text in values.items())
    return out


def read_rail_w(root: Path, spec: BoardSpec, label: str) -> float:
    """One rail's watts as its driver's files say (iio mW; ina3221 mV x mA; ina238 uW)."""
    for s, i, lab in spec.connected():
        if lab != label:
            continue
        d = s.directory(root)
        if s.driver == "ina3221x":
            return float((d / f"in_power{i}_input").read_text()) / 1e3
        if s.driver == "ina3221":
            k = i + 1
            return (
                float((d / f"in{k}_input").read_text())
                * float((d / f"curr{k}_input").read_text())
                / 1e6
            )
        return float((d / "power1_input").read_text()) / 1e6
    raise KeyError(f"{spec.key}: no connected rail {label!r}")


def input_rail_files(root: Path, spec: BoardSpec) -> list[Path]:
    """The files of the board's first total rail (mW, mV and mA; or mV and mA; or uW)."""
    for s, i, lab in spec.connected():
        if lab == spec.total[0]:
            d = s.directory(root)
            if s.driver == "ina3221x":
                return [d / f"in_{q}{i}_input" for q in ("power", "voltage", "current")]
            if s.driver == "ina3221":
                return [d / f"in{i + 1}_input", d / f"curr{i + 1}_input"]
            return [d / "power1_input"]
    return []


# --------------------------------------------------------------------------------------------
# The tree


def _at_rail_mv(uw: int) -> tuple[int, int, int]:
    return uw // 1000, RAIL_MV, int(round(uw / RAIL_MV))


def write_tree(root: Path, spec: BoardSpec, watts: float | None = None, late: bool = False) -> Path:
    """Write ``spec``'s tree under ``root``: GPU node(s) (into the staging folder when ``late``:
    the kernel stand-in creates them later), other engines, sensors reading ``watts`` (default:
    the board's idle power; an alias keeps its test's first readings), identity. Returns the
    primary GPU node's devfreq directory (where it is or will be)."""
    root = Path(root)
    for entry, hz in spec.other_devfreq:
        write_devfreq(root, entry, hz)
    base = root / CONTROL_DIR / LATE_DIR if late else None
    for name in spec.nodes:
        write_devfreq(root, name, spec.clock_hz, spec.of_node, spec.governor, base=base)
    uw = rail_microwatts(spec, spec.device.idle_w if watts is None else watts)
    first = {lab: (mw, mv, ma) for lab, mw, mv, ma in spec.initial}
    for s in spec.sensors:
        # (mW, mV, mA) per channel: the alias's first readings, else the share of ``watts``
        chans = [first.get(lab) or _at_rail_mv(uw.get(lab, 0)) for lab in s.labels]
        if s.driver == "ina3221x":
            rails = [(lab, *c) for lab, c in zip(s.labels, chans, strict=True)]
            write_iio_rails(root, s.address, rails, index=s.index)
        elif s.driver == "ina3221":
            hwmon = [(lab, mv, ma) for lab, (_, mv, ma) in zip(s.labels, chans, strict=True)]
            write_ina3221_hwmon(root, s.address, s.index, hwmon)
        else:
            write_ina238_hwmon(root, s.address, s.index, uw[s.labels[0]])
    write_identity(root, spec.compatible, spec.model_string, spec.release_line)
    write_marker(root, spec)
    return root / "sys/class/devfreq" / spec.nodes[0]


def write_marker(root: Path, spec: BoardSpec) -> Path:
    """Say at the tree's root that this board is virtual (``board_identity.VIRTUAL_MARKER``): the
    agent reads it and labels every profile and run ``source=virtual`` with the host, since its
    times are the host's, not the board's. A real board never has this file."""
    text = json.dumps(
        {"board": spec.key, "jetpack": spec.jetpack, "built_by": "simulations.virtual_jetson"}
    )
    return put(root / VIRTUAL_MARKER, text + "\n")


def find_board(root: Path) -> tuple[BoardSpec, Path]:
    """The layout of a tree ``write_tree`` wrote under ``root`` (by its nodes and sensors; the
    kernel stand-in asks when the control file does not name it), and its GPU node."""
    root = Path(root)
    candidates = [BOARDS[k] for k in ALIASES] + [
        board_spec(k, jp) for k in ROW_KEYS for jp in jetpacks(k)
    ]
    for spec in candidates:
        nodes_there = all(
            (root / "sys/class/devfreq" / n).is_dir()
            or (root / CONTROL_DIR / LATE_DIR / n).is_dir()
            for n in spec.nodes
        )
        sensors_there = all(s.directory(root).is_dir() for s in spec.sensors)
        drivers = root / "sys/bus/i2c/drivers"
        extra = drivers.is_dir() and not spec.sensors
        if nodes_there and sensors_there and not extra:
            return spec, root / "sys/class/devfreq" / spec.nodes[0]
    raise ValueError(f"{root}: not a tree written by build_board")


__all__ = [
    "ALIASES", "BOARDS", "CONTROL_DIR", "DT_IDENTITY", "INA238_MV", "JETSON_ORIN", "LATE_DIR",
    "RAIL_MV", "ROW_KEYS", "BoardSpec", "SensorSpec", "board_spec", "find_board",
    "input_rail_files", "jetpacks", "put", "rail_microwatts", "read_rail_w", "reading_files",
    "release_line", "write_devfreq", "write_hwmon_rails", "write_iio_rails", "write_marker",
    "write_tree",
]  # fmt: skip
