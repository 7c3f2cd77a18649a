"""The fleet's device types, generated from the board table, and which boards a profile may serve.

Why a module of its own: a fleet file, a node config, the device round and the profile store all
ask the same two questions: is this a device type we know, and may a profile recorded on one
type serve a board of another? Both answers come from the one board table
(``fleet/agent/devices/boards.py``): one type per real board, plus the non-Jetson devices and
the legacy family type ``jetson-orin`` that fleet files and profiles written before the table
still name. A profile is a table of (batch size, clock) points; on a board whose GPU clock table
does not name those clocks its points cannot be locked, so a profile never crosses to such a
board (issue 19: the Orin modules' tables differ: an AGX Orin profile at 1300.5 MHz means
nothing to an Orin NX).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.agent.devices.board_identity import LEGACY_ORIN
from fleet.agent.devices.boards import BOARDS, ROWS, Board

_ORIN_GPU = "17000000.ga10b"  # the node every Orin module has had (JetPack 5)


def _describe(board: Board) -> str:
    nodes = sorted({n for names in board.gpu_nodes.values() for n in names})
    if board.total:
        chips = sorted({s.chip.upper() for s in board.sensors})
        rails = [f"[{r}]" if r in board.total_optional else r for r in board.total]
        power = "+".join(rails) + f" ({', '.join(chips)})"
    else:
        power = "no power sensor"
    return f"NVIDIA {board.name} ({board.codename}; GPU {'/'.join(nodes)}; power {power})"


# Known device types and what they are; a fleet naming another type is refused, because a
# profile records the type it was measured on and the device round checks the two agree (a Nano
# must not run on a TX2 NX's profile). Which agent backend drives a type is the deployment's
# node config (``backend``), not this table.
DEVICE_TYPES: dict[str, str] = {b.key: _describe(b) for b in ROWS}
DEVICE_TYPES.update(
    {
        LEGACY_ORIN: "any Orin module (legacy; prefer the exact module type)",
        "nvml-gpu": "an NVIDIA GPU driven through NVML",
        "cpu": "a CPU-only host (no frequency control; RAPL power when readable)",
    }
)


def is_orin(device_type: str) -> bool:
    """An exact Orin module type (a row whose GPU is the ga10b), not the legacy family."""
    board = BOARDS.get(device_type)
    return board is not None and any(_ORIN_GPU in n for n in board.gpu_nodes.values())


def clock_table_khz(device_type: str) -> frozenset[int] | None:
    """The type's GPU clock table in kHz, or None where the table does not know it (non-Jetson
    types, the legacy family, a row without a table)."""
    board = BOARDS.get(device_type)
    if board is None or not board.clock_hz:
        return None
    return frozenset(int(round(hz / 1000)) for hz in board.clock_hz)


def clocks_outside(freqs_mhz: Iterable[float], device_type: str) -> list[float]:
    """The clocks (MHz) a profile names that ``device_type``'s table lacks; [] when every one
    is in it, or when the type has no known table (nothing to check against)."""
    table = clock_table_khz(device_type)
    if table is None:
        return []
    return sorted({float(f) for f in freqs_mhz if int(round(float(f) * 1000)) not in table})


def _show(freqs: list[float]) -> str:
    shown = ", ".join(f"{f:g}" for f in freqs[:4])
    return shown + (f" and {len(freqs) - 4} more" if len(freqs) > 4 else "")


def sibling_fits(sibling_type: str, freqs_mhz: Iterable[float], device_type: str) -> bool:
    """May a profile stored for another board of ``sibling_type`` start a new ``device_type``
    board (the profile store's sibling hand-off)? Only the same type, or a legacy
    ``jetson-orin`` profile for an Orin module whose known table names all its clocks; and
    never a profile naming a clock outside the receiver's known table."""
    freqs = list(freqs_mhz)
    if sibling_type == device_type:
        return not clocks_outside(freqs, device_type)
    if sibling_type == LEGACY_ORIN and is_orin(device_type):
        return clock_table_khz(device_type) is not None and not clocks_outside(freqs, device_type)
    return False


def type_mismatch(recorded: str, freqs_mhz: Iterable[float], device_type: str) -> str | None:
    """Why a profile recorded on ``recorded`` must not serve a fleet entry of ``device_type``,
    or None when it may. A profile of any Orin module serves a legacy ``jetson-orin`` entry (the
    entry says "some Orin"); a legacy ``jetson-orin`` profile serves an exact Orin type only
    when the type's table names every clock it holds. An unknown recorded type is not judged."""
    if recorded == device_type or recorded not in DEVICE_TYPES:
        return None
    if device_type == LEGACY_ORIN and is_orin(recorded):
        return None
    if recorded == LEGACY_ORIN and is_orin(device_type):
        if clock_table_khz(device_type) is None:
            return f"was recorded on {recorded!r} and {device_type!r} has no known clock table"
        missing = clocks_outside(freqs_mhz, device_type)
        if not missing:
            return None
        return (
            f"was recorded on {recorded!r} at {_show(missing)} MHz, "
            f"which the {device_type} clock table lacks"
        )
    return f"was recorded on {recorded!r}"
