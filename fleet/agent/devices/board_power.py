"""The board's power: which rails make its input power, their sum in watts, or why there is none.

Why a module of its own: "the board's power" is one rail on some Jetsons (``POM_5V_IN`` on a
Nano, ``VDD_IN`` on an Orin NX) and a sum on others (the AGX Xavier's six rails, the AGX Orin's
three, of which a fourth is fed from one of them and must not be added), and some boards have
no sensor at all (the Nano 2GB). The board table (``boards.py``) says which rails make each
board's total; this module identifies the board from its device tree, finds those rails among
the ones ``power_rails.py`` discovered, and reads their sum. A board without a sensor is not an
error here: its clocks can still be locked and restored, so the backend is built and says why
it has no power reading (``unavailable``), and whatever needs one refuses with that line.

Choice, in order: a rail the user named (``rail``: one name, or a sum ``A+B+C``); the board
table's ``total`` when the board is identified (rails of ``total_optional`` only where present,
a missing required one is an error naming it, the sensors found and the board); else the first
of ``DEFAULT_RAILS`` found; else an error listing the rails, so the user can name them.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

from typing import Dict, List, Optional, Sequence, Tuple

from fleet.agent.devices import boards
from fleet.agent.devices.base import DeviceError
from fleet.agent.devices.board_identity import board_row
from fleet.agent.devices.power_rails import Rail, Scan, read_rail_w, scan, sensor_name

# Board input rails of boards the table does not know, in order of preference.
DEFAULT_RAILS = ("POM_5V_IN", "VDD_IN")


class BoardPower(object):
    """The rails whose sum is the power a backend reports, or why it has none.

    ``rails`` (empty when ``unavailable`` says why) are read and summed by ``read_w``; ``name``
    is their names joined by "+", ``layout`` their sensors' layouts; ``period_s`` the slowest
    of their sensors' refresh periods (None where none says), ``how`` where the choice came
    from; ``found`` every rail discovered, for ``describe``.
    """

    def __init__(
        self,
        rails: Sequence[Rail],
        how: str,
        board: Optional[boards.Board] = None,
        unavailable: Optional[str] = None,
        found: Sequence[Rail] = (),
    ) -> None:
        self.rails = tuple(rails)
        self.how = how
        self.board = board
        self.unavailable = unavailable
        self.found = tuple(found)
        self.name = "+".join(r.name for r in self.rails)
        layouts = []  # type: List[str]
        for r in self.rails:
            if r.layout not in layouts:
                layouts.append(r.layout)
        self.layout = "+".join(layouts)
        periods = [r.period_s for r in self.rails if r.period_s is not None]
        self.period_s = max(periods) if periods else None  # type: Optional[float]

    def read_w(self) -> Optional[float]:
        """The rails' summed power in watts now; None when the board has no sensor."""
        if not self.rails:
            return None
        return sum(read_rail_w(r) for r in self.rails)

    def describe(self) -> Dict[str, object]:
        """What ``describe()``/``doctor`` say about power: the rails that make the total, the
        sensors (chip, driver, address), their refresh period and current limits."""
        if not self.rails:
            return {"power": "none ({})".format(self.unavailable)}
        sensors = []  # type: List[str]
        for r in self.found:
            if sensor_name(r) not in sensors:
                sensors.append(sensor_name(r))
        limits = dict((r.name, r.crit_ma) for r in self.found if r.crit_ma is not None)
        return {
            "rail": self.name,
            "sensor": self.layout,
            "power_rails": [r.name for r in self.rails],
            "power_total": self.how,
            "power_sensors": ", ".join(sensors),
            "all_rails": [r.name for r in self.found],
            "sensor_period_s": self.period_s,
            "current_limits_ma": limits,
        }


def open_power(
    sysfs_root: str = "/", wanted: Optional[str] = None, gpu_node: str = ""
) -> BoardPower:
    """Discover the rails and choose those whose sum is the board's power (module docstring).

    Raises DeviceError (one line) for a rail the user named that is not there, for an
    identified board missing a rail of its total, and for an unknown board without a default
    rail. Finding no sensor at all is not an error: the result is ``unavailable``.
    """
    board = board_row(sysfs_root, gpu_node)
    ina238 = [(s.address, s.labels[0]) for s in (board.sensors if board else ())
              if s.chip == "ina238" and s.labels]  # fmt: skip
    found = scan(sysfs_root, ina238)
    if wanted is not None:
        return BoardPower(_named(found, wanted), "named with --rail", board, None, found.rails)
    if not found.rails:
        return BoardPower((), "", board, _why_none(found, board))
    by_name = dict((r.name.upper(), r) for r in found.rails)
    if board is not None and board.total:
        missing = [n for n in board.total
                   if n.upper() not in by_name and n not in board.total_optional]  # fmt: skip
        if missing:
            raise DeviceError(
                "{}: rail(s) {} of its power total {} not found; rails found: {}; name the "
                "rails to read with --rail NAME or a sum A+B".format(
                    board.name, ", ".join(missing), "+".join(board.total), _sensors(found.rails)
                )
            )
        rails = [by_name[n.upper()] for n in board.total if n.upper() in by_name]
        how = "board total of {}".format(board.name)
        if len(rails) > 1:
            how = "sum of {} ({})".format(", ".join(r.name for r in rails), how)
        return BoardPower(rails, how, board, None, found.rails)
    for name in DEFAULT_RAILS:
        if name in by_name:
            return BoardPower([by_name[name]], "board input rail", board, None, found.rails)
    raise DeviceError(
        "no board input rail ({}) among power rails: {}; name one with --rail NAME (or a sum "
        "A+B)".format(" or ".join(DEFAULT_RAILS), ", ".join(r.name for r in found.rails))
    )


def _named(found: Scan, wanted: str) -> List[Rail]:
    """The rails of ``wanted`` ("VDD_IN", or a sum "GPU+CPU+SOC"), case-insensitive."""
    names = [n.strip() for n in str(wanted).split("+")]
    if not names or any(not n for n in names):
        raise DeviceError("rail: expected a rail name or a sum A+B+C, got {!r}".format(wanted))
    by_name = dict((r.name.upper(), r) for r in found.rails)
    rails = []  # type: List[Rail]
    for name in names:
        rail = by_name.get(name.upper())
        if rail is None:
            where = (
                "rails found: {}".format(_sensors(found.rails))
                if found.rails
                else "no power sensor found under {}".format(", ".join(found.searched))
            )
            raise DeviceError("rail {!r} not found; {}".format(name, where))
        if rail in rails:
            raise DeviceError("rail {!r} is named twice in {!r}".format(rail.name, wanted))
        rails.append(rail)
    return rails


def _sensors(rails: Sequence[Rail]) -> str:
    """Rails by sensor: "A, B, C (ina3221x iio 6-0040); D (ina238 hwmon 2-0044)"."""
    groups: List[Tuple[str, List[str]]] = []
    for r in rails:
        key = sensor_name(r)
        for k, names in groups:
            if k == key:
                names.append(r.name)
                break
        else:
            groups.append((key, [r.name]))
    return "; ".join("{} ({})".format(", ".join(names), k) for k, names in groups)


def _why_none(found: Scan, board: Optional[boards.Board]) -> str:
    """Why there is no power reading: the board has no sensor, or none could be read."""
    if board is not None and not board.sensors:
        return "{} has no power sensor".format(board.name)
    if found.unreadable:
        more = len(found.unreadable) - 1
        return "cannot read the power sensor: {}{}".format(
            found.unreadable[0], " (and {} more)".format(more) if more else ""
        )
    text = "no power sensor found (no INA3221 or INA238 under {})".format(", ".join(found.searched))
    if board is not None:
        text += "; a {} has {}".format(
            board.name, ", ".join("{} at {}".format(s.chip, s.address) for s in board.sensors)
        )
    return text
