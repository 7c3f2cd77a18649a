"""Row-level reading and writing of the profile CSV (the device LUT).

This lives in the agent because the agent writes profiles on the board itself, under Python 3.6
with only the standard library guaranteed; ``fleet.profile`` builds the validated numpy view on
top of these rows. Keeping one reader/writer means the format cannot drift between the two sides.

Format (docs/architecture.md, "Profile CSV"): one row per measured operating point, ``#``
comment lines allowed, extra columns allowed. Required: ``batch_size``, ``freq_mhz``,
``time_per_batch_s``, ``peak_power_w``.
Optional: ``mean_power_w``, ``device``, ``model``, ``input_shape``, ``samples``, and ``status``
(``ok`` by default; anything else, e.g. ``oom``, marks a point that could not run, whose
time/power cells may be empty).
"""

import csv
import io
import os
import tempfile
from typing import IO, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

REQUIRED_COLUMNS = ("batch_size", "freq_mhz", "time_per_batch_s", "peak_power_w")
OPTIONAL_COLUMNS = ("mean_power_w", "device", "model", "input_shape", "samples", "status")
CANONICAL_ORDER = REQUIRED_COLUMNS + OPTIONAL_COLUMNS


class ProfileFormatError(ValueError):
    """A profile file does not follow the contract; the message names file, row and field."""


def read_rows(path: str) -> Tuple[List[str], List[Tuple[int, Dict[str, str]]], List[str]]:
    """Read a profile CSV into (header, [(line_number, row)], comment_lines).

    Line numbers are the 1-based lines of the file so error messages point where a person looks.
    """
    try:
        with open(path, "r", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ProfileFormatError("{}: file not found".format(path)) from None
    except IsADirectoryError:
        msg = "{}: is a directory, expected a profile CSV file".format(path)
        raise ProfileFormatError(msg) from None
    except UnicodeDecodeError:
        msg = "{}: not a text file (expected a profile CSV)".format(path)
        raise ProfileFormatError(msg) from None
    comments = []  # type: List[str]
    data_lines = []  # type: List[Tuple[int, str]]
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            comments.append(stripped[1:].strip())
            continue
        data_lines.append((lineno, line))
    if not data_lines:
        raise ProfileFormatError(
            "{}: no header row (expected columns {})".format(path, ", ".join(REQUIRED_COLUMNS))
        )
    reader = csv.reader(io.StringIO("\n".join(line for _, line in data_lines)))
    parsed = list(reader)
    header = [h.strip() for h in parsed[0]]
    rows = []  # type: List[Tuple[int, Dict[str, str]]]
    for (lineno, _), cells in zip(data_lines[1:], parsed[1:]):
        if len(cells) != len(header):
            msg = "{}: line {}: expected {} cells as in the header, got {}".format(
                path, lineno, len(header), len(cells)
            )
            raise ProfileFormatError(msg)
        rows.append((lineno, {h: c.strip() for h, c in zip(header, cells)}))
    return header, rows, comments


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:  # NaN: an empty cell is the contract's "no value"
            return ""
        return "{:.6g}".format(value)
    return str(value)


def write_rows(
    path: str,
    rows: Iterable[Dict[str, object]],
    comments: Sequence[str] = (),
    columns: Optional[Sequence[str]] = None,
) -> None:
    """Write profile rows atomically: a reader never sees half a file, a crash leaves the old one.

    Columns default to the canonical ones present in any row, then extra columns in first-seen
    order.
    """
    rows = list(rows)
    if columns is None:
        seen = []  # type: List[str]
        for row in rows:
            for key in row:
                if key not in seen:
                    seen.append(key)
        columns = [c for c in CANONICAL_ORDER if c in seen] + [
            c for c in seen if c not in CANONICAL_ORDER
        ]
    buf = io.StringIO()
    for line in comments:
        buf.write("# {}\n".format(line))
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(columns))
    for row in rows:
        writer.writerow([_fmt(row.get(c)) for c in columns])
    atomic_write_text(path, buf.getvalue())


def atomic_write_text(path: str, text: str) -> None:
    """Write text to path through a temp file in the same directory and os.replace."""

    def write(fh: IO) -> None:
        fh.write(text.encode("utf-8"))

    atomic_write(path, write)


def temp_prefix(path: str) -> str:
    """Temp files of ``path`` are named after it, so a crashed write's leftovers can be found."""
    return "." + os.path.basename(path) + ".tmp-"


def atomic_write(path: str, write: Callable[[IO], None]) -> None:
    """Call ``write(binary_file)`` on a temp file beside ``path``, fsync, then os.replace.

    A reader sees the old file or the new one, never half of one; on any failure the temp file
    is removed and the old file stays. Text files, profiles and torch checkpoints all go
    through here.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
