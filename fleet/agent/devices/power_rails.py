"""A Jetson's power rails: the INA3221 monitor found in sysfs, the board-input rail, its watts.

Why a module of its own: the power monitor moved from an out-of-tree iio driver (``ina3221x``,
JetPack 4: ``rail_name_N`` + ``in_powerN_input``) to the mainline hwmon one (``ina3221``,
JetPack 5+: ``inN_label`` + ``inN_input`` x ``currN_input``), and the rail that carries the
board's input has different names per module (``POM_5V_IN``, ``VDD_IN``). Discovering the
sensors, choosing the rail and converting its reading to watts is one job, apart from finding
the GPU's clocks (``devfreq.py``) and locking them (``jetson.py``).

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import glob
import os
from typing import List, NamedTuple, Optional

from .base import DeviceError
from .sysfs import read_number, read_text, under

# Board input rails, in order of preference: old iio layout (Nano, TX2 NX), then newer boards.
DEFAULT_RAILS = ("POM_5V_IN", "VDD_IN")

Rail = NamedTuple(
    "Rail",
    [
        ("name", str),
        ("layout", str),  # "iio-ina3221x" or "hwmon-ina3221"
        ("power_path", Optional[str]),  # mW (iio only)
        ("voltage_path", Optional[str]),  # mV
        ("current_path", Optional[str]),  # mA
    ],
)


def _iio_rails(sysfs_root: str) -> List[Rail]:
    rails = []  # type: List[Rail]
    pattern = under(sysfs_root, "sys/bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_*")
    for label_path in sorted(glob.glob(pattern)):
        directory, fname = os.path.split(label_path)
        chan = fname[len("rail_name_") :]
        if not chan.isdigit():
            continue
        try:
            name = read_text(label_path)
        except OSError:
            continue
        power = os.path.join(directory, "in_power{}_input".format(chan))
        volt = os.path.join(directory, "in_voltage{}_input".format(chan))
        curr = os.path.join(directory, "in_current{}_input".format(chan))
        has_power = os.path.isfile(power)
        has_vi = os.path.isfile(volt) and os.path.isfile(curr)
        if not (has_power or has_vi):
            continue
        rails.append(
            Rail(
                name,
                "iio-ina3221x",
                power if has_power else None,
                volt if has_vi else None,
                curr if has_vi else None,
            )
        )
    return rails


def _hwmon_dirs(sysfs_root: str) -> List[str]:
    dirs = sorted(glob.glob(under(sysfs_root, "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*")))
    for cand in sorted(glob.glob(under(sysfs_root, "sys/class/hwmon/hwmon*"))):
        try:
            if read_text(os.path.join(cand, "name")) == "ina3221":
                dirs.append(cand)
        except OSError:
            continue
    unique = []  # type: List[str]
    seen = set()
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            unique.append(d)
    return unique


def _hwmon_rails(sysfs_root: str) -> List[Rail]:
    rails = []  # type: List[Rail]
    for directory in _hwmon_dirs(sysfs_root):
        for label_path in sorted(glob.glob(os.path.join(directory, "in*_label"))):
            chan = os.path.basename(label_path)[2 : -len("_label")]
            if not chan.isdigit():
                continue
            volt = os.path.join(directory, "in{}_input".format(chan))
            curr = os.path.join(directory, "curr{}_input".format(chan))
            if not (os.path.isfile(volt) and os.path.isfile(curr)):
                continue
            try:
                name = read_text(label_path)
            except OSError:
                continue
            rails.append(Rail(name, "hwmon-ina3221", None, volt, curr))
    return rails


def find_rails(sysfs_root: str = "/") -> List[Rail]:
    """All INA3221 rails on the board, old iio layout first; the first of each name wins."""
    rails = []  # type: List[Rail]
    names = set()
    for rail in _iio_rails(sysfs_root) + _hwmon_rails(sysfs_root):
        if rail.name not in names:
            names.add(rail.name)
            rails.append(rail)
    return rails


def choose_rail(rails: List[Rail], wanted: Optional[str], sysfs_root: str = "/") -> Rail:
    """Pick the named rail (case-insensitive) or the board input rail by default."""
    if not rails:
        raise DeviceError(
            "no INA3221 power rail under {}: expected iio ina3221x rail_name_N + in_powerN_input "
            "or hwmon ina3221 inN_label + inN_input + currN_input".format(
                under(sysfs_root, "sys/bus/i2c/drivers")
            )
        )
    by_name = {r.name.upper(): r for r in rails}
    found = ", ".join(r.name for r in rails)
    if wanted is not None:
        rail = by_name.get(wanted.upper())
        if rail is None:
            raise DeviceError("rail {!r} not found; INA3221 rails found: {}".format(wanted, found))
        return rail
    for name in DEFAULT_RAILS:
        if name in by_name:
            return by_name[name]
    raise DeviceError(
        "no board input rail ({}) among INA3221 rails: {}; choose one by name".format(
            " or ".join(DEFAULT_RAILS), found
        )
    )


def read_rail_w(rail: Rail) -> float:
    """Instantaneous rail power in watts (iio in_power is mW; otherwise mV x mA = uW)."""
    if rail.power_path is not None:
        return read_number(rail.power_path) / 1000.0
    assert rail.voltage_path is not None and rail.current_path is not None
    return read_number(rail.voltage_path) * read_number(rail.current_path) / 1e6
