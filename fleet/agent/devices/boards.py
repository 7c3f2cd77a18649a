"""The Jetson boards users own, one row per board: identity, GPU nodes, power sensors, clocks.

Why a table: a Jetson is not one device. The GPU's devfreq node changes name between JetPack
releases (Orin: ``17000000.ga10b`` on JetPack 5, ``17000000.gpu`` on 6 and 7) and Thor has two
that move together; the power sensor is an INA3221 on the old iio driver (JetPack 4) or the
hwmon one (5+), an INA238 on Thor, or nothing at all (Nano 2GB); the board's input power is one
rail on some boards and a sum of rails on others (AGX Xavier, AGX Orin); and two boards of one
GPU (TX2 and TX2 NX share gp10b; the Orin modules share ga10b) have different rails and clock
tables. Code that guesses from one picture of a Jetson mis-measures the others, so every such
fact lives here, in data, with where it was checked (``docs/boards.md`` keeps the sources), and
the backend, the virtual boards and ``powerfleet doctor`` read it.

Identity: the device tree's ``compatible`` strings name the module and carrier part numbers
(``nvidia,p3509-0000+p3636-0001`` is a TX2 NX), which the GPU node cannot (gp10b is TX2 and
TX2 NX); ``model`` is the fallback, the GPU node the last resort. Rows are tried most specific
first (the Nano 2GB's compatible also says ``nvidia,jetson-nano``).

``clock_verified`` says whether the clock table was seen on a real board in a public source;
an unverified table is the best public statement (a product brief, a power-mode cap) and a
board's own ``available_frequencies`` always wins over it.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

# One power monitor: its chip (``ina3221``: iio ``ina3221x`` driver on JetPack 4, hwmon
# ``ina3221`` on 5+; ``ina238``: hwmon, power in microwatts), its i2c ``bus-address`` and the
# labels of its channels in order ("NC": not connected, as NVIDIA's device trees label them).
Sensor = NamedTuple("Sensor", [("chip", str), ("address", str), ("labels", Tuple[str, ...])])

Board = NamedTuple(
    "Board",
    [
        ("key", str),  # the fleet device type
        ("name", str),
        ("codename", str),
        ("compatible", Tuple[str, ...]),  # substrings of a device-tree compatible entry
        ("model_words", Tuple[str, ...]),  # lower-case substrings of the device-tree model
        (
            "gpu_nodes",
            Dict[int, Tuple[str, ...]],
        ),  # JetPack major -> devfreq node(s), primary first
        ("sensors", Tuple[Sensor, ...]),
        ("total", Tuple[str, ...]),  # rails whose sum is the board's input power; () = none
        ("total_optional", Tuple[str, ...]),  # rails of ``total`` a carrier may lack
        ("clock_hz", Tuple[int, ...]),  # the GPU's available_frequencies
        ("clock_verified", bool),
    ],
)


def _mhz(*values: float) -> Tuple[int, ...]:
    return tuple(int(round(v * 1e6)) for v in values)


def _steps(first: float, step: float, count: int) -> Tuple[int, ...]:
    return _mhz(*(first + step * k for k in range(count)))


_NANO_HZ = _steps(76.8, 76.8, 12)
# L4T major release -> the GPU's devfreq node names there
_ORIN_NODES = {
    5: ("17000000.ga10b",),
    6: ("17000000.gpu",),
    7: ("17000000.gpu",),
}  # type: Dict[int, Tuple[str, ...]]
_XAVIER_NODES = {4: ("17000000.gv11b",), 5: ("17000000.gv11b",)}  # type: Dict[int, Tuple[str, ...]]
_P3767 = (Sensor("ina3221", "1-0040", ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")),)

# Most specific first: ``identify`` returns the first row that matches. Tokens name modules, not
# carriers: the Nano's carrier p3449-0000 also carries a Xavier NX (``p3449-0000+p3668-0001``).
ROWS = (
    Board(
        "jetson-nano-2gb", "Jetson Nano 2GB", "batuu",
        ("nano-2gb", "p3448-0003", "p3542-0000", "p3541-0000"), ("nano 2gb",),
        {4: ("57000000.gpu",)}, (), (), (), _NANO_HZ, False,  # the Nano's, not seen on a 2GB
    ),
    Board(
        "jetson-nano", "Jetson Nano", "porg",
        ("p3448-0000", "p3448-0002", "p3450-0000", "p3450-0002", "jetson-nano"),
        ("nano",), {4: ("57000000.gpu",)},
        (Sensor("ina3221", "6-0040", ("POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU")),),
        ("POM_5V_IN",), (), _NANO_HZ, True,
    ),
    Board(
        "jetson-tx2nx", "Jetson TX2 NX", "lanai",
        ("p3636-0001", "lanai"), ("tx2 nx", "lanai"), {4: ("17000000.gp10b",)},
        (Sensor("ina3221", "7-0040", ("VDD_IN", "VDD_CPU_GPU", "VDD_SOC")),),
        ("VDD_IN",), (), _steps(114.75, 102.0, 12) + _mhz(1300.5), False,
    ),
    Board(
        "jetson-tx2", "Jetson TX2", "quill",
        ("p2771-0000", "p2771-0888", "p3489-0000", "p3489-0888", "p3310-1000", "nvidia,quill",
         "nvidia,lightning", "nvidia,storm"),
        ("quill", "tx2"), {4: ("17000000.gp10b",)},
        (
            Sensor("ina3221", "0-0040", ("VDD_SYS_GPU", "VDD_SYS_SOC", "VDD_4V0_WIFI")),
            Sensor("ina3221", "0-0041", ("VDD_IN", "VDD_SYS_CPU", "VDD_SYS_DDR")),
            Sensor("ina3221", "0-0042", ("VDD_MUX", "VDD_5V0_IO_SYS", "VDD_3V3_SYS")),
            Sensor("ina3221", "0-0043", ("VDD_3V3_IO_SLP", "VDD_1V8_IO", "VDD_3V3_SYS_M2")),
        ),
        ("VDD_IN", "VDD_MUX"), ("VDD_MUX",), _steps(140.25, 89.25, 14), False,
    ),
    Board(
        "jetson-xavier-nx", "Jetson Xavier NX", "jakku",
        ("p3668-0000", "p3668-0001", "p3668-0003", "jetson-xavier-nx"), ("xavier nx",),
        _XAVIER_NODES,
        (Sensor("ina3221", "7-0040", ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")),),
        ("VDD_IN",), (),
        _mhz(114.75, 204, 306, 408, 510, 599.25, 701.25, 752.25, 803.25, 854.25, 905.25, 956.25,
             1007.25, 1058.25, 1109.25),
        True,
    ),
    Board(
        "jetson-agx-xavier", "Jetson AGX Xavier", "galen",
        ("p2888-", "p2972-", "nvidia,jetson-xavier", "galen"),
        ("agx xavier", "jetson-agx", "jetson-xavier"), _XAVIER_NODES,
        (
            Sensor("ina3221", "1-0040", ("GPU", "CPU", "SOC")),
            Sensor("ina3221", "1-0041", ("CV", "VDDRQ", "SYS5V")),
        ),
        ("GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"), (),
        _mhz(114.75, 216.75, 318.75, 420.75, 522.75, 624.75, 675.75, 828.75, 905.25, 1032.75,
             1198.5, 1236.75, 1338.75, 1377),
        True,
    ),
    Board(
        "jetson-orin-nano-super", "Jetson Orin Nano (Super)", "p3767",
        ("p3767-0003-super", "p3767-0004-super", "p3767-0005-super"), ("orin nano super",),
        _ORIN_NODES, _P3767, ("VDD_IN",), (), _steps(306, 102, 8), False,
    ),
    Board(
        "jetson-orin-nano", "Jetson Orin Nano", "p3767",
        ("p3767-0003", "p3767-0004", "p3767-0005"), ("orin nano",),
        _ORIN_NODES, _P3767, ("VDD_IN",), (), _steps(306, 102, 7), False,
    ),
    Board(
        "jetson-orin-nx-super", "Jetson Orin NX (Super)", "p3767",
        ("p3767-0000-super", "p3767-0001-super"), ("orin nx super",),
        _ORIN_NODES, _P3767, ("VDD_IN",), (), _steps(306, 102, 9) + _mhz(1173), False,
    ),
    Board(
        "jetson-orin-nx", "Jetson Orin NX", "p3767",
        ("p3767-0000", "p3767-0001"), ("orin nx",),
        _ORIN_NODES, _P3767, ("VDD_IN",), (), _steps(306, 102, 7), True,
    ),
    Board(
        "jetson-agx-orin", "Jetson AGX Orin", "concord",
        ("p3701-",), ("agx orin",), _ORIN_NODES,
        (
            Sensor("ina3221", "1-0040", ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0")),
            Sensor("ina3221", "1-0041", ("NC", "VDDQ_VDD2_1V8AO", "NC")),
        ),
        # VDDQ_VDD2_1V8AO is fed from VIN_SYS_5V0: adding it would count it twice
        ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"), (),
        _mhz(114.75, 216.75, 318.75, 420.75, 522.75, 624.75, 726.75, 828.75, 930.75, 1032.75,
             1134.75, 1236.75, 1300.5),
        True,
    ),
    Board(
        "jetson-thor", "Jetson AGX Thor", "p3834",
        ("p3834-", "tegra264"), ("thor",), {7: ("gpu-gpc-0", "gpu-nvd-0")},
        (
            Sensor("ina238", "2-0044", ("VIN",)),
            Sensor("ina3221", "2-0040", ("VDD_GPU", "VDD_CPU_SOC_MSS", "VIN_SYS_5V0")),
        ),
        ("VIN",), (), (), False,
    ),
)  # fmt: skip

BOARDS = dict((b.key, b) for b in ROWS)  # type: Dict[str, Board]

# JetPack generations by L4T major release (``/etc/nv_tegra_release``).
L4T_TO_JETPACK = {32: 4, 34: 5, 35: 5, 36: 6, 38: 7, 39: 7}


def jetpack_of(l4t: str) -> Optional[int]:
    """The JetPack major of an L4T release ("35.4.1" -> 5), or None when unknown."""
    head = str(l4t).split(".", 1)[0].strip().lstrip("Rr")
    return L4T_TO_JETPACK.get(int(head)) if head.isdigit() else None


def kernel_rules(jetpack: Optional[int]) -> str:
    """How the board's devfreq treats min/max writes: ``einval`` (JetPack 4, kernel 4.9: a
    write that would leave min > max fails, reads give back what was written) or ``pmqos``
    (JetPack 5+: writes are PM-QoS requests, min > max is accepted and resolved, ``max_freq``
    reads the effective bound, thermal and power-mode limits included). Unknown: ``pmqos``,
    whose reads are the more cautious ones to trust."""
    return "einval" if jetpack == 4 else "pmqos"


def identify(compatible: Sequence[str], model: str = "", gpu_node: str = "") -> Optional[Board]:
    """The row of the board whose device tree says ``compatible`` (its NUL-separated entries)
    and ``model``; the GPU node name decides only where both are silent. None: not a board we
    know (the caller still works from what it finds, without the table's facts)."""
    entries = [c.strip().lower() for c in compatible if c.strip()]
    for board in ROWS:  # most specific first: a Super's entry also holds the plain part number
        if any(tok in entry for tok in board.compatible for entry in entries):
            return board
    low = str(model).lower()
    found = [(len(w), board) for board in ROWS for w in board.model_words if w in low]
    if found:
        board = max(found, key=lambda f: f[0])[1]  # "orin nano" before "nano"
        return BOARDS.get(board.key + "-super", board) if "super" in low else board
    node = str(gpu_node).lower()
    if node == "57000000.gpu":
        return BOARDS["jetson-nano"]
    if node.startswith("gpu-gpc"):
        return BOARDS["jetson-thor"]
    return None


def gpu_nodes(board: Board, jetpack: Optional[int]) -> Tuple[str, ...]:
    """The board's GPU devfreq node names under ``jetpack`` (primary first); every name it has
    had when the release is unknown."""
    if jetpack in board.gpu_nodes:
        return board.gpu_nodes[jetpack]
    seen = []  # type: List[str]
    for names in board.gpu_nodes.values():
        for name in names:
            if name not in seen:
                seen.append(name)
    return tuple(seen)


def rails(board: Board) -> List[str]:
    """Every connected rail label of the board, sensor by sensor."""
    return [label for s in board.sensors for label in s.labels if label != "NC"]
