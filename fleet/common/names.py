"""The one validator of names that become path parts: devices, runs, profile-store keys.

Why one alphabet everywhere: a device or run name ends up in file and directory names (run
dirs, profile-store paths, weight files beside the agent), so a ``/``, a ``..`` or a control
character in a fleet file, a node config or a CLI flag could steer a write outside its
directory. Every surface calls ``check_name`` so a name that is refused on one is refused on
all. See docs/architecture.md (input hardening).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeGuard

from fleet.common.errors import InputError

MAX_NAME = 64
SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RULE = "letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', no '..')"


def is_safe(name: object, max_len: int = MAX_NAME) -> TypeGuard[str]:
    """True when ``name`` is a string usable as one path part under the shared alphabet."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= max_len
        and SAFE.match(name) is not None
        and ".." not in name
    )


def check_name(where: str, kind: str, name: object, max_len: int = MAX_NAME) -> str:
    """``name`` if safe, else one InputError naming ``where`` (file, device...) and ``kind``."""
    if is_safe(name, max_len):
        return name
    shown = name if not isinstance(name, str) or len(name) <= 80 else name[:80] + "..."
    raise InputError(f"{where}: {kind} {shown!r} is not a safe name: use 1-{max_len} {RULE}")


def child_dir(parent: str | Path, name: str, where: str = "run") -> Path:
    """``parent/name`` for a checked ``name``, refused unless it resolves inside ``parent``.

    Why both: the alphabet already excludes ``/`` and ``..``, and the resolve check also
    covers a ``parent`` entry that is a symlink elsewhere, so a run's report cannot land
    outside the directory the user asked for (``runs/`` by default).
    """
    check_name(where, "run directory name", name, max_len=2 * MAX_NAME)
    base = Path(parent).resolve()
    path = (base / name).resolve()
    if path.parent != base:
        raise InputError(f"{where}: run directory {path} is not inside {base}")
    return path
