"""What every generated file shares: the model-version stamp, the commands written into headers,
the number format, the ``#`` header + CSV text and the atomic write.

Separate from the profile and efficiency writers because both use it (and the calibration writes
its JSON through :func:`atomic_write`), so the two file kinds stay byte-stable in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from fleet.method.profile_io import atomic_write_text

#: Bumped whenever a constant or formula changes; written into every generated file so a profile
#: can always be traced back to the model that produced it.
MODEL_VERSION = "devicemodel-2.0"


#: The command written into file headers (kept fixed so files regenerated elsewhere are identical).
REGENERATE_COMMAND = "python -m simulations.devicemodel --out simulations/profiles"
CALIBRATE_COMMAND = "python -m simulations.calibrate --loo"


def format_number(x: float) -> str:
    """A number as the generated files write it (six significant digits)."""
    return f"{x:.6g}"


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``fleet.method.profile_io.atomic_write_text``):
    readers (a running simulation, another engineer's test) never see a half-written CSV."""
    atomic_write_text(str(path), text)


def csv_text(comments: Iterable[str], header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    # Values never contain commas or quotes, so plain joining is exact and byte-stable.
    lines = [f"# {c}" if c else "#" for c in comments]
    lines.append(",".join(header))
    lines.extend(",".join(r) for r in rows)
    return "\n".join(lines) + "\n"
