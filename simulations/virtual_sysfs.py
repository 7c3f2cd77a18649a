"""The virtual Jetsons' files: devfreq nodes, power monitors and device-tree identity on disk.

Why a module of its own: where each driver puts its files, what they are called and in which
unit they speak is the part of a board that a reader (the Jetson backend, ``powerfleet
doctor``) meets first, and it is the same whichever board is being built. These writers know
the drivers, not the boards: ``virtual_boards.py`` says which board has which node, sensor and
label, and calls them.

Drivers, as their sources describe them (``/work/notes/boards-facts.md`` section 2):

* devfreq (``sys/class/devfreq/<node>``): ``available_frequencies`` (Hz), ``min_freq``,
  ``max_freq``, ``cur_freq``, ``governor``, and ``device/of_node/name`` where the device tree
  has a node name (``gpu``, ``gp10b``, ``gv11b``, ``ga10b``; Thor's nodes have none).
* INA3221 on JetPack 4, L4T's iio driver ``ina3221x``:
  ``sys/bus/i2c/drivers/ina3221x/<bus-addr>/iio:deviceN/`` with ``rail_name_K``,
  ``in_powerK_input`` (mW), ``in_voltageK_input`` (mV), ``in_currentK_input`` (mA), and limits
  that print with their unit (``crit_current_limit_K`` = "8000 ma"); channels from 0.
* INA3221 on JetPack 5+, mainline hwmon ``ina3221``:
  ``sys/bus/i2c/drivers/ina3221/<bus-addr>/hwmon/hwmonN/`` with ``name``, ``inK_label``,
  ``inK_enable``, ``inK_input`` (mV), ``currK_input`` (mA), ``currK_crit``/``currK_max`` (mA),
  the shunt channels ``in4..6_input`` (uV), ``in7_input`` + ``in7_label`` = "sum of shunt
  voltages", ``samples`` and ``update_interval`` (ms); channels from 1. NVIDIA labels an unused
  channel "NC"; reading its inputs fails on a real board, so here they are directories
  (``open`` raises, as the kernel's ENODATA would).
* INA238, mainline hwmon ``ina238``: ``name``, ``in0_input`` (shunt mV), ``in1_input`` (bus
  mV), ``curr1_input`` (mA), ``power1_input`` (**uW**), ``power1_max``, ``temp1_input``; no
  label file (whether Thor has one is unverified).

Every hwmon directory is also linked from ``sys/class/hwmon/hwmonN`` and every i2c client from
``sys/bus/i2c/devices/<bus-addr>``, as on a real board (one device reachable by two paths).
Limits and shunt values are VIRTUAL: plausible numbers, not any board's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

RAIL_MV = 5000  # bus voltage of every INA3221 rail emulated here (the module input is 5 V)
INA238_MV = 20000  # VIRTUAL: the Thor carrier's input voltage is not public
CRIT_MA = 8000  # VIRTUAL current limits
WARN_MA = 6000
SHUNT_MOHM = 5  # VIRTUAL shunt for the shunt-voltage channels (uV = mA x mOhm)
NC = "NC"


def put(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _link(link: Path, target: Path) -> None:
    """A relative symlink ``link`` -> ``target`` (kept valid when the tree is copied)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink() and not link.exists():
        os.symlink(os.path.relpath(str(target), str(link.parent)), str(link))


def write_devfreq(
    root: Path,
    entry: str,
    hz: Sequence[int],
    of_name: str | None = None,
    governor: str = "nvhost_podgov",
    base: Path | None = None,
) -> Path:
    """One devfreq node at min..max = full table, running at the top (order in file shuffled).

    ``base`` puts the node somewhere other than ``sys/class/devfreq`` (a late node waits in a
    staging folder until the kernel stand-in moves it into place)."""
    d = (Path(base) if base is not None else Path(root) / "sys/class/devfreq") / entry
    shuffled = list(hz)[1:] + list(hz)[:1]  # the order in the file must not matter to readers
    put(d / "available_frequencies", " ".join(str(h) for h in shuffled) + "\n")
    put(d / "min_freq", f"{hz[0]}\n")
    put(d / "max_freq", f"{hz[-1]}\n")
    put(d / "cur_freq", f"{hz[-1]}\n")
    put(d / "governor", governor + "\n")
    if of_name is not None:
        put(d / "device/of_node/name", of_name + "\x00")
    return d


# --------------------------------------------------------------------------------------------
# INA3221, JetPack 4: L4T's iio driver


def iio_dir(root: Path, address: str, index: int = 0) -> Path:
    return Path(root) / "sys/bus/i2c/drivers/ina3221x" / address / f"iio:device{index}"


def write_iio_rails(
    root: Path,
    bus: str,
    rails: Sequence[tuple[str, int, int, int]],
    power: bool = True,
    index: int = 0,
) -> Path:
    """Old-style ina3221x iio device; rails: [(name, mW, mV, mA)] on channels 0, 1, 2."""
    d = iio_dir(root, bus, index)
    put(d.parent / "name", "ina3221x\n")
    for n, (name, mw, mv, ma) in enumerate(rails):
        put(d / f"rail_name_{n}", name + "\n")
        if power:
            put(d / f"in_power{n}_input", f"{mw}\n")
        put(d / f"in_voltage{n}_input", f"{mv}\n")
        put(d / f"in_current{n}_input", f"{ma}\n")
        put(d / f"crit_current_limit_{n}", f"{CRIT_MA} ma\n")
        put(d / f"warn_current_limit_{n}", f"{WARN_MA} ma\n")
    put(d / "running_mode", "0\n")
    _link(Path(root) / "sys/bus/i2c/devices" / bus, d.parent)
    return d


def iio_values(mw: int, mv: int = RAIL_MV) -> dict[str, str]:
    """The reading files of one iio channel K at ``mw`` (keys with K as ``{k}``)."""
    return {
        "in_power{k}_input": str(mw),
        "in_voltage{k}_input": str(mv),
        "in_current{k}_input": str(int(round(mw * 1000.0 / mv))),
    }


# --------------------------------------------------------------------------------------------
# INA3221, JetPack 5+: mainline hwmon


def hwmon_dir(root: Path, driver: str, address: str, index: int) -> Path:
    return Path(root) / "sys/bus/i2c/drivers" / driver / address / "hwmon" / f"hwmon{index}"


def write_ina3221_hwmon(
    root: Path, address: str, index: int, channels: Sequence[tuple[str, int, int]]
) -> Path:
    """An ina3221 hwmon device; ``channels``: [(label, mV, mA)] on channels 1..3, label "NC"
    for one NVIDIA leaves unconnected (its inputs unreadable, its channel disabled)."""
    d = hwmon_dir(root, "ina3221", address, index)
    put(d / "name", "ina3221\n")
    enabled = 0
    for k, (label, mv, ma) in enumerate(channels, start=1):
        put(d / f"in{k}_label", label + "\n")
        connected = label != NC
        enabled += connected
        put(d / f"in{k}_enable", f"{int(connected)}\n")
        for attr, text in ina3221_values(k, ma, mv).items():
            if connected:
                put(d / attr, text + "\n")
            else:
                (d / attr).mkdir(parents=True, exist_ok=True)  # reading it fails, as ENODATA
        put(d / f"curr{k}_crit", f"{CRIT_MA}\n")
        put(d / f"curr{k}_max", f"{WARN_MA}\n")
        put(d / f"curr{k}_crit_alarm", "0\n")
        put(d / f"curr{k}_max_alarm", "0\n")
    put(d / "in7_label", "sum of shunt voltages\n")
    put(d / "in7_input", "0\n")
    put(d / "samples", "1\n")
    # 1.1 ms bus + 1.1 ms shunt per enabled channel, one sample (the driver's probe default)
    put(d / "update_interval", f"{int(round(enabled * 2.2))}\n")
    _class_links(root, d, address)
    return d


def ina3221_values(k: int, ma: int, mv: int = RAIL_MV) -> dict[str, str]:
    """The reading files of hwmon ina3221 channel ``k`` drawing ``ma``."""
    return {
        f"in{k}_input": str(mv),
        f"curr{k}_input": str(ma),
        f"in{k + 3}_input": str(ma * SHUNT_MOHM),
    }


def write_hwmon_rails(
    root: Path, bus: str, rails: Sequence[tuple[str, int, int]], via_class: bool = False
) -> Path:
    """Mainline ina3221 hwmon device (channels 1..3); rails: [(label, mV, mA)]. A bare one
    (no limits, unlabelled sum channel) for tests that build a tree by hand."""
    if via_class:
        d = Path(root) / "sys/class/hwmon/hwmon2"
    else:
        d = hwmon_dir(root, "ina3221", bus, 3)
    put(d / "name", "ina3221\n")
    for n, (label, mv, ma) in enumerate(rails, start=1):
        put(d / f"in{n}_label", label + "\n")
        put(d / f"in{n}_input", f"{mv}\n")
        put(d / f"curr{n}_input", f"{ma}\n")
    put(d / "in7_input", "5000\n")  # unlabelled sum channel: not a rail
    return d


# --------------------------------------------------------------------------------------------
# INA238 (Thor's carrier): hwmon, power in microwatts


def write_ina238_hwmon(root: Path, address: str, index: int, uw: int) -> Path:
    d = hwmon_dir(root, "ina238", address, index)
    put(d / "name", "ina238\n")
    for attr, text in ina238_values(uw).items():
        put(d / attr, text + "\n")
    put(d / "power1_max", f"{300 * 1000 * 1000}\n")  # VIRTUAL limit: 300 W
    put(d / "temp1_input", "45000\n")
    _class_links(root, d, address)
    return d


def ina238_values(uw: int, mv: int = INA238_MV) -> dict[str, str]:
    ma = int(round(uw / mv))
    return {
        "in0_input": f"{ma * SHUNT_MOHM / 1000.0:.3f}",  # shunt mV
        "in1_input": str(mv),
        "curr1_input": str(ma),
        "power1_input": str(uw),
    }


def _class_links(root: Path, hwmon: Path, address: str) -> None:
    _link(Path(root) / "sys/class/hwmon" / hwmon.name, hwmon)
    _link(Path(root) / "sys/bus/i2c/devices" / address, hwmon.parent.parent)
    put(hwmon.parent.parent / "name", hwmon.parent.parent.parent.name + "\n")  # i2c client name


# --------------------------------------------------------------------------------------------
# Identity: device tree and L4T release


def write_identity(
    root: Path, compatible: Sequence[str], model: str | None, release_line: str | None
) -> None:
    """``proc/device-tree/compatible`` (NUL-separated, NUL-terminated), ``model`` and
    ``etc/nv_tegra_release`` (its first line names the L4T release)."""
    if compatible:
        put(Path(root) / "proc/device-tree/compatible", "".join(c + "\x00" for c in compatible))
    if model is not None:
        put(Path(root) / "proc/device-tree/model", model + "\x00")
    if release_line is not None:
        put(Path(root) / "etc/nv_tegra_release", release_line + "\n")
