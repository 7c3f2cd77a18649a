"""Write a profile CSV with the lines that say how it was measured.

:func:`write_profile` puts the device/model/input_shape (and idle power) columns on every row
and records, as ``#`` comment lines, the backend, UTC date, torch, Python, host, steps, warmup,
sampler rate, source and whatever else the sweep's metadata holds, so a LUT can be judged years
later without its author. The row format itself is ``profile_io.py``'s.

Separate from ``profiler.py`` because writing is the caller's step after a sweep (the agent's
``profile`` command, ``powerfleet profile``/``train``) and needs none of the sweep's machinery.
Python 3.6 compatible; torch is only asked for its version, when it can be imported.
"""

import datetime
import platform
import socket
import sys
from typing import Any, Dict, Optional, Sequence

from fleet.method.profile_io import write_rows

Row = Dict[str, Any]
COLUMN_METADATA = ("device", "model", "input_shape", "idle_power_w")  # on every row of the CSV


def write_profile(
    path: str, rows: Sequence[Row], metadata: Optional[Dict[str, Any]] = None
) -> None:
    """Write the profile CSV atomically: rows plus device/model/input_shape columns, and comment
    lines recording how it was measured (backend, UTC date, torch, host, steps, warmup, sampler
    rate, source) so a LUT can be judged years later without its author.
    """
    meta = dict(metadata or {})
    columns = {}
    for key in COLUMN_METADATA:
        value = meta.pop(key, None)
        if value not in (None, ""):
            columns[key] = value
    out_rows = []
    for row in rows:
        new = dict(row)
        for key, value in columns.items():
            if new.get(key) in (None, ""):
                new[key] = value
        out_rows.append(new)
    meta.setdefault("source", "measured")
    meta.setdefault("date", _utc_now())
    meta.setdefault("torch", _torch_version())
    meta.setdefault("python", platform.python_version())
    meta.setdefault("host", socket.gethostname())
    first = (
        "backend", "date", "torch", "python", "host", "steps", "warmup", "sampler_hz", "source",
    )  # fmt: skip
    keys = [k for k in first if k in meta] + sorted(k for k in meta if k not in first)
    comments = ["powerfleet profile"] + [
        "{}={}".format(k, _one_line(meta[k])) for k in keys if meta[k] is not None
    ]
    write_rows(path, out_rows, comments)


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def _utc_now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


def _torch_version() -> Optional[str]:
    """The torch that measured (or would measure) the profile. Read from the installed
    package's metadata where torch is not imported yet: a replayed profile never imports it,
    and importing it only to name it cost a second of CPU per profile (Python 3.6, as on a
    JetPack 4 board, has no ``importlib.metadata``: there it is imported)."""
    mod = sys.modules.get("torch")
    if mod is not None:
        return str(getattr(mod, "__version__", None))
    try:
        from importlib import metadata  # novm - guarded: 3.8+, the fallback below for 3.6
    except ImportError:
        metadata = None  # type: ignore[assignment]
    if metadata is not None:
        try:
            return str(metadata.version("torch"))
        except Exception:  # noqa: BLE001 - not installed: a replay-only host
            return None
    try:
        import torch as mod  # noqa: F811
    except Exception:  # noqa: BLE001 - torch is optional for replayed profiles
        return None
    return str(getattr(mod, "__version__", None))
