"""A Jetson's power rails: every channel of its power monitors found in sysfs, and its watts.

Why a module of its own: the monitors differ by board and by JetPack, and each one has its own
files and units. JetPack 4 drives the INA3221 with NVIDIA's iio driver (``ina3221x``:
``rail_name_N`` + ``in_powerN_input`` in mW, or ``in_voltageN_input`` mV x
``in_currentN_input`` mA, channels from 0); JetPack 5+ with the mainline hwmon one (``ina3221``:
``inN_label`` + ``inN_input`` mV x ``currN_input`` mA, channels 1..3; channel 7 is the "sum of
shunt voltages", not a rail); Thor adds an INA238 (hwmon ``ina238``: ``power1_input`` in
MICROWATTS). Unused channels are labelled ``NC`` on NVIDIA's device trees and have no label file
at all where the tree disables them (their inputs then fail with ENODATA): neither is a rail.
Finding every rail and reading one in watts is this module's job; which rails make the board's
input power is ``board_power.py``'s.

Each rail also carries what its sensor says about itself: how often it converts (hwmon
``update_interval`` in ms, iio ``polling_delay_N``, whose value may end in "ms"), so nothing
samples it faster than it refreshes, and the board's current limit on it (hwmon ``currN_crit``
in mA, iio ``crit_current_limit_N``, which prints e.g. "7000 ma"), which ``doctor`` reports.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

import errno
import glob
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from fleet.agent.devices.sysfs import read_number, read_text, under

Rail = NamedTuple(
    "Rail",
    [
        ("name", str),
        ("layout", str),  # "iio-ina3221x", "hwmon-ina3221" or "hwmon-ina238"
        ("power_path", Optional[str]),  # a power file, in units of ``power_scale`` watts
        ("voltage_path", Optional[str]),  # mV
        ("current_path", Optional[str]),  # mA
        ("power_scale", float),  # watts per unit of ``power_path`` (mW: 1e-3, uW: 1e-6)
        ("address", str),  # i2c "bus-address" of the sensor ("1-0040"), "" when unknown
        ("channel", int),
        ("period_s", Optional[float]),  # the sensor's refresh period; None: it does not say
        ("crit_ma", Optional[float]),  # the current limit the board set on this channel
    ],
)

Scan = NamedTuple(
    "Scan",
    [
        ("rails", List[Rail]),  # every rail found, the first of each name
        ("unreadable", List[str]),  # "path: why" for label files that could not be read
        ("searched", List[str]),  # the directories looked in (for messages)
    ],
)

_ADDRESS = re.compile(r"^\d+-[0-9a-fA-F]{4}$")
_IIO = "sys/bus/i2c/drivers/ina3221x"
_HWMON_CHIPS = ("ina3221", "ina238")


def _read_label(path: str, unreadable: List[str]) -> Optional[str]:
    """A channel label, or None (unreadable ones are noted: a permission problem is a reason)."""
    try:
        return read_text(path)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            unreadable.append("{}: {}".format(path, exc.strerror or exc))
        return None


def _is_rail_label(label: Optional[str]) -> bool:
    """A connected rail's label: not empty, not "NC", not the shunt-voltage sum channel."""
    if not label:
        return False
    low = label.strip().lower()
    return low != "nc" and not low.startswith("nc ") and "sum of shunt" not in low


def _number_in(text: str) -> Optional[float]:
    """The number at the start of ``text`` ("7000 ma" -> 7000.0, "422ms" -> 422.0), or None."""
    found = re.match(r"\s*([-+]?\d+(?:\.\d*)?)", text)
    return float(found.group(1)) if found else None


def _optional_number(path: str) -> Optional[float]:
    """A numeric attribute that may be absent or unreadable (then None), units ignored."""
    try:
        return _number_in(read_text(path))
    except (OSError, UnicodeDecodeError):
        return None


def _period_s(ms: Optional[float]) -> Optional[float]:
    return ms / 1000.0 if ms is not None and ms > 0 else None


def _address_of(directory: str) -> str:
    """The i2c ``bus-address`` a sensor directory belongs to, or '' where it does not show.

    ``.../1-0040/hwmon/hwmon3`` and ``.../6-0040/iio:device0`` carry it in their path (after
    resolving ``/sys/class/hwmon`` links); an hwmon directory also has a ``device`` link to it.
    """
    real = os.path.realpath(directory)
    for cand in (os.path.dirname(real), os.path.dirname(os.path.dirname(real))):
        if _ADDRESS.match(os.path.basename(cand)):
            return os.path.basename(cand)
    device = os.path.join(directory, "device")
    if os.path.exists(device):
        name = os.path.basename(os.path.realpath(device))
        if _ADDRESS.match(name):
            return name
    return ""


# -- JetPack 4: the iio ina3221x driver --------------------------------------------------------
def _iio_rails(sysfs_root: str, unreadable: List[str]) -> List[Rail]:
    rails = []  # type: List[Rail]
    for directory in sorted(glob.glob(under(sysfs_root, _IIO + "/*/iio:device*"))):
        address = _address_of(directory)
        for label_path in sorted(glob.glob(os.path.join(directory, "rail_name_*"))):
            chan = os.path.basename(label_path)[len("rail_name_") :]
            if not chan.isdigit():
                continue
            name = _read_label(label_path, unreadable)
            if not _is_rail_label(name):
                continue
            assert name is not None

            def file(stem: str, chan: str = chan, directory: str = directory) -> str:
                return os.path.join(directory, stem.format(chan))

            power, volt, curr = (file("in_power{}_input"), file("in_voltage{}_input"),
                                 file("in_current{}_input"))  # fmt: skip
            has_power = os.path.isfile(power)
            has_vi = os.path.isfile(volt) and os.path.isfile(curr)
            if not (has_power or has_vi):
                continue
            rails.append(
                Rail(
                    name, "iio-ina3221x",
                    power if has_power else None,
                    volt if has_vi else None,
                    curr if has_vi else None,
                    1e-3, address, int(chan),
                    _period_s(_optional_number(file("polling_delay_{}"))),
                    _optional_number(file("crit_current_limit_{}")),
                )
            )  # fmt: skip
    return rails


# -- JetPack 5+: hwmon ina3221 and ina238 --------------------------------------------------------
def _hwmon_dirs(sysfs_root: str, chip: str) -> List[str]:
    """The chip's hwmon directories, each once although sysfs shows it by two paths."""
    pattern = "sys/bus/i2c/drivers/{}/*/hwmon/hwmon*".format(chip)
    dirs = sorted(glob.glob(under(sysfs_root, pattern)))
    for cand in sorted(glob.glob(under(sysfs_root, "sys/class/hwmon/hwmon*"))):
        try:
            if read_text(os.path.join(cand, "name")) == chip:
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


def _ina3221_rails(directory: str, unreadable: List[str]) -> List[Rail]:
    rails = []  # type: List[Rail]
    address = _address_of(directory)
    period = _period_s(_optional_number(os.path.join(directory, "update_interval")))
    for chan in (1, 2, 3):  # 4..6 are shunt voltages, 7 the sum of shunt voltages
        label_path = os.path.join(directory, "in{}_label".format(chan))
        if not os.path.exists(label_path):
            continue  # disabled in the device tree: no label, inputs fail with ENODATA
        name = _read_label(label_path, unreadable)
        volt = os.path.join(directory, "in{}_input".format(chan))
        curr = os.path.join(directory, "curr{}_input".format(chan))
        if not _is_rail_label(name) or not (os.path.isfile(volt) and os.path.isfile(curr)):
            continue
        assert name is not None
        crit = _optional_number(os.path.join(directory, "curr{}_crit".format(chan)))
        rails.append(
            Rail(name, "hwmon-ina3221", None, volt, curr, 1e-3, address, chan, period, crit)
        )
    return rails


def _ina238_rails(
    directory: str, unreadable: List[str], labels: Dict[str, str], only_label: Optional[str]
) -> List[Rail]:
    """The INA238's one channel: ``power1_input`` in microwatts (else mV x mA). Its name is
    its label file where it has one, else the board table's label for its address (or the
    table's only INA238), else ``INA238@<address>``."""
    address = _address_of(directory)
    name = None  # type: Optional[str]
    for stem in ("power1_label", "in1_label", "curr1_label"):
        path = os.path.join(directory, stem)
        if os.path.exists(path):
            name = _read_label(path, unreadable)
            break
    if name is None:
        name = labels.get(address) or only_label or "INA238@{}".format(address or "?")
    if not _is_rail_label(name):
        return []
    power = os.path.join(directory, "power1_input")
    volt = os.path.join(directory, "in1_input")
    curr = os.path.join(directory, "curr1_input")
    has_power = os.path.isfile(power)
    has_vi = os.path.isfile(volt) and os.path.isfile(curr)
    if not (has_power or has_vi):
        return []
    return [
        Rail(
            name, "hwmon-ina238",
            power if has_power else None,
            volt if has_vi else None,
            curr if has_vi else None,
            1e-6, address, 1,
            _period_s(_optional_number(os.path.join(directory, "update_interval"))),
            _optional_number(os.path.join(directory, "curr1_crit")),
        )
    ]  # fmt: skip


def scan(sysfs_root: str = "/", ina238_labels: Sequence[Tuple[str, str]] = ()) -> Scan:
    """Every rail of every power monitor under ``sysfs_root``: iio first, then hwmon INA3221,
    then INA238; the first of each name wins. ``ina238_labels``: (address, label) pairs of the
    board table's INA238 sensors, naming one whose driver gives no label."""
    unreadable = []  # type: List[str]
    found = _iio_rails(sysfs_root, unreadable)
    for directory in _hwmon_dirs(sysfs_root, "ina3221"):
        found.extend(_ina3221_rails(directory, unreadable))
    labels = dict(ina238_labels)
    only = list(labels.values())[0] if len(labels) == 1 else None
    for directory in _hwmon_dirs(sysfs_root, "ina238"):
        found.extend(_ina238_rails(directory, unreadable, labels, only))
    rails = []  # type: List[Rail]
    names = set()
    for rail in found:
        if rail.name.upper() not in names:
            names.add(rail.name.upper())
            rails.append(rail)
    searched = [under(sysfs_root, _IIO)] + [
        under(sysfs_root, "sys/bus/i2c/drivers/" + chip) for chip in _HWMON_CHIPS
    ]
    return Scan(rails, unreadable, searched + [under(sysfs_root, "sys/class/hwmon")])


def find_rails(sysfs_root: str = "/") -> List[Rail]:
    """All rails on the board (see ``scan``)."""
    return scan(sysfs_root).rails


def sensor_name(rail: Rail) -> str:
    """A rail's sensor as a person reads it: driver, bus and address ("ina3221 hwmon 1-0040")."""
    bus, driver = rail.layout.split("-", 1)
    return " ".join(x for x in (driver, bus, rail.address) if x)


def read_rail_w(rail: Rail) -> float:
    """Instantaneous rail power in watts (a power file in its unit; otherwise mV x mA = uW)."""
    if rail.power_path is not None:
        return read_number(rail.power_path) * rail.power_scale
    assert rail.voltage_path is not None and rail.current_path is not None
    return read_number(rail.voltage_path) * read_number(rail.current_path) / 1e6
