"""Row-level reading and writing of the profile CSV (the device LUT).

This lives in the agent because the agent writes profiles on the board itself, under Python 3.6
with only the standard library guaranteed; ``fleet.core.profile`` builds the validated numpy view on
top of these rows. Keeping one reader/writer means the format cannot drift between the two sides.

Format (docs/architecture.md, "Profile CSV"): one row per measured operating point, ``#``
comment lines allowed, extra columns allowed (not a near miss of a known one: ``NEAR_MISS``).
Required: ``batch_size``, ``freq_mhz``, ``time_per_batch_s``, ``peak_power_w``.
Optional: ``mean_power_w``, ``device``, ``model``, ``input_shape``, ``samples``, ``status``
(``ok`` by default; anything else, e.g. ``oom``, marks a point that could not run, whose
time/power cells may be empty), ``idle_power_w`` (the board's power with the GPU idle, the
same on every row; what the device draws while it waits for a round to end) and ``source``
(one of ``SOURCES``).
"""

import csv
import errno
import io
import math
import os
import stat
import tempfile
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

from fleet.method.record_base import closest

REQUIRED_COLUMNS = ("batch_size", "freq_mhz", "time_per_batch_s", "peak_power_w")
OPTIONAL_COLUMNS = (
    "mean_power_w", "device", "model", "input_shape", "samples", "status", "idle_power_w",
)  # fmt: skip
CANONICAL_ORDER = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

# Where a row's numbers come from (its ``source`` column, empty: not said). The reader refuses
# any other value and lowercases these, so every module compares against the constants: a
# "predictd" row once passed for measured and "Predicted" counted as predicted in coverage but
# not in verification.
MEASURED = "measured"  # on the board that recorded the profile
MODELED = "modeled"  # the device model's reference profiles (simulations/devicemodel)
PREDICTED = "predicted"  # a model's guess from a few probes, verified before training trusts it
REPLAYED = "replayed"  # a recorded profile answered (the replay backend); nothing measured
VIRTUAL = "virtual"  # a virtual board: the host's times
SOURCES = (MEASURED, MODELED, PREDICTED, REPLAYED, VIRTUAL)

# Columns the project writes beside the canonical ones: the predictor's bound, a measured
# point's evidence (``measurers.py``), NVML's clocks and energy counter (``nvml_point.py``).
WRITTEN_COLUMNS = (
    "source", "peak_power_bound_w", "power_samples", "point_s", "power_window_s",
    "peak_spread_w", "peak_forecast_w", "power_sd_w", "time_cv", "sm_clock_mhz",
    "sm_clock_min_mhz", "sm_clock_max_mhz", "sm_clock_samples", "counter_energy_j",
    "counter_mean_w", "sampled_mean_w", "energy_source",
)  # fmt: skip
KNOWN_COLUMNS = CANONICAL_ORDER + WRITTEN_COLUMNS

# How alike (difflib's ratio) an unknown column must be to a known one to be taken for a
# misspelling of it and refused. Extra columns are allowed, but a near miss of a known one
# silently changes numbers (``mean_pwr_w``: energy from the peak; ``idle_pwr_w``: no idle
# power). At 0.9 a dropped letter or two (``mean_pwr_w``: 0.91) and a unit slip
# (``idle_power_mw``: 0.96) are refused, while an extra column that extends a known name
# (``time_per_batch_std_s``: 0.89, ``mean_power_std_w``: 0.86, ``emc_freq_mhz``: 0.80) stays.
NEAR_MISS = 0.9

# What one profiled point measured: the numbers a profile row carries (the sweep, the staircase
# plan and the replay backend produce it).
Measurement = NamedTuple(
    "Measurement",
    [("time_per_batch_s", float), ("peak_power_w", float), ("mean_power_w", Optional[float])],
)


class ProfileFormatError(ValueError):
    """A profile file does not follow the contract; the message names file, row and field."""


# Bounds on what a table reader takes in: a real profile has a few thousand rows of short cells;
# these are orders of magnitude above that and keep a hostile file from costing memory or time.
MAX_FILE_BYTES = 64 << 20
MAX_LINE_CHARS = 1 << 16
MAX_ROWS = 100000


def read_rows(path: str) -> Tuple[List[str], List[Tuple[int, Dict[str, str]]], List[str]]:
    """Read a profile CSV into (header, [(line_number, row)], comment_lines).

    Line numbers are the 1-based lines of the file so error messages point where a person looks.
    A row's ``source`` is one of ``SOURCES`` (any case; returned lowercase), else the file is
    refused: every reader of profile rows (selection, coverage, verification, the board's
    replay and drift watch) reads it here.
    """
    header, rows, comments = read_table(path, "profile CSV", REQUIRED_COLUMNS, KNOWN_COLUMNS)
    for lineno, row in rows:
        if row.get("source"):
            row["source"] = _source(path, lineno, row["source"])
    return header, rows, comments


def _source(path, lineno, raw):
    # type: (str, int, str) -> str
    """A row's ``source`` in its one spelling, or a ProfileFormatError naming file and line."""
    value = raw.lower()
    if value not in SOURCES:
        raise ProfileFormatError(
            "{}: line {}: source={!r} is not known; expected one of {}".format(
                path, lineno, raw[:40], ", ".join(SOURCES)
            )
        )
    return value


def read_table(
    path: str, what: str, required: Sequence[str], known: Sequence[str] = ()
) -> Tuple[List[str], List[Tuple[int, Dict[str, str]]], List[str]]:
    """A bounded, strict CSV table: (header, [(line_number, row)], comment lines).

    With ``known`` (the columns the format names), a header column that is not known but is a
    near miss of one (``NEAR_MISS``) is refused naming the known one; others are kept.

    One record per physical line (lines end at ``\\n``, an optional ``\\r`` before it is
    dropped): a quoted cell may not span lines, so every error names the line a person sees.
    A UTF-8 byte-order mark is allowed; NUL bytes, other encodings, unterminated quotes, lines
    over ``MAX_LINE_CHARS``, files over ``MAX_FILE_BYTES`` or ``MAX_ROWS`` rows are refused
    with one ProfileFormatError line naming the file and line.
    """
    text = _read_text(path, what)
    comments = []  # type: List[str]
    header = None  # type: Optional[List[str]]
    rows = []  # type: List[Tuple[int, Dict[str, str]]]
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if len(line) > MAX_LINE_CHARS:
            raise ProfileFormatError(
                "{}: line {}: {} characters, at most {} allowed".format(
                    path, lineno, len(line), MAX_LINE_CHARS
                )
            )
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            comments.append(stripped[1:].strip())
            continue
        cells = _cells(path, lineno, line)
        if header is None:
            header = cells
            _near_misses(path, header, known)
            continue
        if len(cells) != len(header):
            raise ProfileFormatError(
                "{}: line {}: expected {} cells as in the header, got {}".format(
                    path, lineno, len(header), len(cells)
                )
            )
        if len(rows) >= MAX_ROWS:
            raise ProfileFormatError(
                "{}: line {}: more than {} rows; is this really a {}?".format(
                    path, lineno, MAX_ROWS, what
                )
            )
        rows.append((lineno, dict(zip(header, cells))))
    if header is None:
        raise ProfileFormatError(
            "{}: no header row (expected columns {})".format(path, ", ".join(required))
        )
    return header, rows, comments


def _near_misses(path, header, known):
    # type: (str, List[str], Sequence[str]) -> None
    """Refuse the first column of ``header`` that is a misspelling of a ``known`` one."""
    for name in header:
        if name in known:
            continue
        near = closest(name, known, NEAR_MISS)
        if near:
            raise ProfileFormatError(
                "{}: column {!r} is not known; did you mean {}?".format(path, name[:40], near)
            )


def _cells(path: str, lineno: int, line: str) -> List[str]:
    """One line's stripped cells; quotes go through the csv module, strictly, on this line only."""
    if "\x00" in line or "\r" in line:
        what = "NUL byte (not a text CSV)" if "\x00" in line else "carriage return inside a line"
        raise ProfileFormatError("{}: line {}: {}".format(path, lineno, what))
    if '"' not in line:
        return [c.strip() for c in line.split(",")]
    try:
        records = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise ProfileFormatError(
            "{}: line {}: not a CSV record ({}; a quoted cell may not span lines)".format(
                path, lineno, exc
            )
        ) from None
    return [c.strip() for c in (records[0] if records else [])]


def _read_bounded(fh: IO, limit: int) -> bytes:
    """At most ``limit`` bytes, read in chunks (``read(limit)`` would allocate all of it)."""
    chunks = []  # type: List[bytes]
    total = 0
    while total < limit:
        chunk = fh.read(min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _a(what):
    # type: (str) -> str
    """'an efficiency CSV', 'a profile CSV'."""
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = _read_bounded(fh, MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ProfileFormatError("{}: file not found".format(path)) from None
    except IsADirectoryError:
        msg = "{}: is a directory, expected {} file".format(path, _a(what))
        raise ProfileFormatError(msg) from None
    except (IOError, OSError) as exc:
        reason = exc.strerror or type(exc).__name__
        raise ProfileFormatError("{}: cannot read ({})".format(path, reason)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ProfileFormatError(
            "{}: larger than {} bytes; is this really {}?".format(path, MAX_FILE_BYTES, _a(what))
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ProfileFormatError(
            "{}: line {}: not UTF-8 text (expected {})".format(path, line, _a(what))
        ) from None


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:  # NaN: an empty cell is the contract's "no value"
            return ""
        return "{:.6g}".format(value)
    return _one_line(str(value))


def _one_line(text: str) -> str:
    """The reader takes one record per line, so the writer never puts a line break in a cell."""
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


def write_rows(
    path: str,
    rows: Iterable[Mapping[str, object]],
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
        buf.write("# {}\n".format(_one_line(line)))
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(columns))
    for row in rows:
        writer.writerow([_fmt(row.get(c)) for c in columns])
    atomic_write_text(path, buf.getvalue())


def atomic_write_text(path: str, text: str, mode: Optional[int] = None) -> None:
    """Write text to path through a temp file in the same directory and os.replace."""

    def write(fh: IO) -> None:
        fh.write(text.encode("utf-8"))

    atomic_write(path, write, mode)


def temp_prefix(path: str) -> str:
    """Temp files of ``path`` are named after it, so a crashed write's leftovers can be found."""
    return "." + os.path.basename(path) + ".tmp-"


def atomic_write(path: str, write: Callable[[IO], object], mode: Optional[int] = None) -> None:
    """Call ``write(binary_file)`` on a temp file beside ``path``, fsync, then os.replace.

    A reader sees the old file or the new one, never half of one; on any failure the temp file
    is removed and the old file stays. Text files, profiles and torch checkpoints all go
    through here. The file gets ``mode`` where given, else the mode it had, else what ``open``
    would give a new file (0666 less the umask): ``mkstemp``'s 0600 made every profile, report
    and plot unreadable to the next user or service account whatever the umask said. Set before
    the rename, so no reader ever meets the file closed.
    """
    path = os.path.realpath(path)  # through a symbolic link: the link stays, its file changes
    if os.path.exists(path) and not os.path.isfile(path):
        raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket)", path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode if mode is not None else _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _mode_for(path):
    # type: (str) -> int
    """The mode a rewritten ``path`` keeps, or a new file's under this process's umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask():
    # type: () -> int
    """The process umask, read without changing it where Linux says it (``/proc``, 4.7+): the
    set-and-restore of ``os.umask`` would race with another thread creating a file."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def cell_number(value: Any) -> Optional[float]:
    """A profile cell as a finite number, or None (empty, not a number, NaN or infinite): how
    in-memory rows (strings read from a CSV or numbers just measured) are read everywhere."""
    if value is None or value == "":
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
