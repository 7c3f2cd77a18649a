"""The profile (LUT) of one device x model x input shape, and its feasible frontier per budget.

A profile holds, for every measured (batch size, frequency) point, the mean step time and the
peak (and mean) power. Time and power do not depend on the training data, so a profile is
measured once per device and model and reused (paper §4.1). This module loads and validates the
CSV (the file format lives in ``fleet.method.profile_io`` and the point type in
``fleet.method.point``, so the board reads and writes the same under Python 3.6), and answers
"for each batch size, what is the fastest measured point whose *measured* peak power fits the
budget". Real profiles are noisy: nothing here assumes power or time is monotone in batch size
or frequency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fleet.common.errors import InfeasibleError, InputError
from fleet.method.budget import budget_limit
from fleet.method.point import Point
from fleet.method.profile_io import (
    REQUIRED_COLUMNS,
    ProfileFormatError,
    read_rows,
    write_rows,
)
from fleet.method.selection import best_per_batch

UNLIMITED = math.inf


@dataclass
class Profile:
    """A validated profile: points that ran, plus the batch sizes/frequencies that did not."""

    points: list[Point]
    source: str = "<memory>"
    metadata: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    failed: list[tuple[int, float, str]] = field(default_factory=list)  # (b, f, status)
    # after restrict(): the whole file's lowest peak, which infeasibility messages name
    file_lowest: Point | None = None

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({p.batch_size for p in self.points})

    @property
    def freqs_mhz(self) -> list[float]:
        return sorted({p.freq_mhz for p in self.points})

    @property
    def idle_power_w(self) -> float | None:
        """Board power with the GPU idle (the ``idle_power_w`` column), or None if not known:
        what the device draws while it waits for the round to end
        (``fleet.planning.roundenergy``)."""
        raw = self.metadata.get("idle_power_w")
        try:
            value = float(raw) if raw else math.nan
        except ValueError:
            return None
        return value if math.isfinite(value) and value > 0 else None

    @property
    def has_power(self) -> bool:
        return any(not math.isnan(p.peak_power_w) for p in self.points)

    def point(self, batch_size: int, freq_mhz: float) -> Point | None:
        for p in self.points:
            if p.batch_size == batch_size and p.freq_mhz == freq_mhz:
                return p
        return None

    def lowest_peak(self) -> Point:
        """The point with the lowest measured peak power (named in infeasibility errors)."""
        powered = [p for p in self.points if not math.isnan(p.peak_power_w)]
        return min(powered, key=lambda p: (p.peak_power_w, p.freq_mhz, p.batch_size))

    def restrict(self, batch_sizes: list[int]) -> Profile:
        keep = set(batch_sizes)
        file_lowest = self.file_lowest
        if file_lowest is None and self.has_power:
            file_lowest = self.lowest_peak()
        return Profile(
            [p for p in self.points if p.batch_size in keep],
            self.source,
            dict(self.metadata),
            list(self.comments),
            [f for f in self.failed if f[0] in keep],
            file_lowest,
        )


def frontier(profile: Profile, budget_w: float | None) -> dict[int, Point]:
    """Eq. 4 per batch size: the fastest measured point whose measured peak fits the budget.

    The kernel's first stage (``fleet.method.selection.best_per_batch``, time objective):
    "fastest" is the lowest time per sample, not the highest frequency: on a noisy profile a
    higher clock can measure slower, and the method wants time. Ties go to lower peak power,
    then to the lower frequency. Batch sizes with no fitting point are absent.
    """
    budget = budget_limit(budget_w)
    if not math.isinf(budget) and not profile.has_power:
        raise InputError(
            f"{profile.source}: profile has no power measurements (time-only); it cannot be "
            "used under a power budget (use --budget-w none, or profile on a backend with power)"
        )
    return best_per_batch(profile.points, budget, "time")


def require_feasible(profile: Profile, budget_w: float | None) -> dict[int, Point]:
    """The frontier, or an InfeasibleError naming the lowest peak power and where it occurs."""
    front = frontier(profile, budget_w)
    if not front:
        low = profile.file_lowest or profile.lowest_peak()
        msg = (
            f"{profile.source}: no operating point fits the budget of {budget_w:g} W; the lowest "
            f"measured peak power is {low.peak_power_w:g} W at batch_size={low.batch_size}, "
            f"freq_mhz={low.freq_mhz:g}"
        )
        usable = profile.lowest_peak()
        if usable != low:
            msg += (
                f" (among the batch sizes with an efficiency: {usable.peak_power_w:g} W at "
                f"batch_size={usable.batch_size}, freq_mhz={usable.freq_mhz:g})"
            )
        raise InfeasibleError(msg)
    return front


# ---------------------------------------------------------------------------- loading / saving


# Physical bounds of a profile row: anything outside is a typo, a unit mix-up or a broken
# measurement, and selecting on it would be silently wrong (paper §4.1 measures real boards).
MAX_BATCH = 1 << 20
MIN_STEP_S = 1e-6  # no training step of a real model takes less than a microsecond
MAX_STEP_S = 1e6
MAX_FREQ = 1e6  # MHz (or watts where the knob is a power limit)
MAX_POWER_W = 1e5


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:40] + "...")


def printable(text: str, limit: int = 40) -> str:
    """A cell as it may appear in a one-line message: short, control characters replaced."""
    short = text if len(text) <= limit else text[:limit] + "..."
    return "".join(ch if ch.isprintable() else "?" for ch in short)


def _num(
    path: str,
    lineno: int,
    col: str,
    raw: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = True,
) -> float:
    """A finite number in (low, high] (or [low, high] with ``low_open=False``), or InputError."""
    try:
        v = float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise InputError(f"{path}: line {lineno}: {col}={_show(raw)} is not {kind}") from None
    if not math.isfinite(v):
        raise InputError(f"{path}: line {lineno}: {col}={_show(raw)} must be a finite number")
    if integer and v != int(v):
        raise InputError(f"{path}: line {lineno}: {col}={_show(raw)} is not an integer")
    below = low is not None and (v <= low if low_open else v < low)
    if below or (high is not None and v > high):
        lo = "" if low is None else ("> " if low_open else ">= ") + f"{low:g}"
        hi = "" if high is None else f"<= {high:g}"
        bounds = " and ".join(x for x in (lo, hi) if x)
        shown = printable(raw)
        raise InputError(f"{path}: line {lineno}: {col}={shown} must be {bounds}")
    return v


def _idle(path: str, lineno: int, raw: str, metadata: dict[str, str]) -> None:
    """``idle_power_w``: one positive wattage for the whole profile (repeated on every row)."""
    value = _num(path, lineno, "idle_power_w", raw, low=0, high=MAX_POWER_W)
    first = metadata.setdefault("idle_power_w", raw)
    if float(first) != value:
        raise InputError(
            f"{path}: line {lineno}: idle_power_w={printable(raw)} differs from "
            f"{printable(first)} above; expected one value on every row"
        )


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile CSV; every problem is one InputError naming file/line/field.

    Physically impossible rows are refused, not repaired: batch sizes <= 0, clocks <= 0 (no
    GPU runs at 0 MHz; a backend without a clock knob, the CPU, records the clock it ran at),
    step times under a microsecond, powers <= 0, mean power above the peak, non-finite numbers,
    two rows for the same (batch_size, freq_mhz), and an ``idle_power_w`` that is not one
    positive wattage on every row that sets it.
    """
    path = str(path)
    try:
        header, rows, comments = read_rows(path)
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected at least "
            f"{', '.join(REQUIRED_COLUMNS)} (found: {', '.join(printable(h) for h in header[:20])})"
        )
    dupes = {h for h in header if header.count(h) > 1}
    if dupes:
        raise InputError(
            f"{path}: duplicate column(s) {printable(', '.join(sorted(dupes)), 200)} in the header"
        )
    points: list[Point] = []
    failed: list[tuple[int, float, str]] = []
    seen: dict[tuple[int, float], int] = {}
    metadata: dict[str, str] = {}
    for lineno, row in rows:
        b = _num(path, lineno, "batch_size", row["batch_size"], integer=True, low=0,
                 high=MAX_BATCH)  # fmt: skip
        f = _num(path, lineno, "freq_mhz", row["freq_mhz"], low=0, high=MAX_FREQ)
        key = (int(b), f)
        if key in seen:
            raise InputError(
                f"{path}: line {lineno}: duplicate point batch_size={int(b)}, freq_mhz={f:g} "
                f"(first at line {seen[key]}); expected one row per operating point"
            )
        seen[key] = lineno
        for meta in ("device", "model", "input_shape", "source"):
            if row.get(meta):
                metadata.setdefault(meta, row[meta])
        if row.get("idle_power_w"):
            _idle(path, lineno, row["idle_power_w"], metadata)
        if row.get("samples"):
            _num(path, lineno, "samples", row["samples"], integer=True, low=0)
        status = (row.get("status") or "ok").lower()
        if status != "ok":
            failed.append((int(b), f, status))
            continue
        t = _num(path, lineno, "time_per_batch_s", row["time_per_batch_s"], low=MIN_STEP_S,
                 high=MAX_STEP_S, low_open=False)  # fmt: skip
        peak = math.nan
        if row["peak_power_w"] != "":
            peak = _num(path, lineno, "peak_power_w", row["peak_power_w"], low=0,
                        high=MAX_POWER_W)  # fmt: skip
        mean = peak
        if row.get("mean_power_w"):
            if math.isnan(peak):
                raise InputError(
                    f"{path}: line {lineno}: mean_power_w is set but peak_power_w is empty; "
                    "expected both or neither"
                )
            mean = _num(path, lineno, "mean_power_w", row["mean_power_w"], low=0,
                        high=MAX_POWER_W)  # fmt: skip
            if mean > peak:
                raise InputError(
                    f"{path}: line {lineno}: mean_power_w={_show(row['mean_power_w'])} is above "
                    f"peak_power_w={_show(row['peak_power_w'])}; expected mean <= peak"
                )
        bound = math.nan
        if row.get("peak_power_bound_w"):
            bound = _num(path, lineno, "peak_power_bound_w", row["peak_power_bound_w"], low=0,
                         high=MAX_POWER_W)  # fmt: skip
            if math.isnan(peak) or bound < peak:
                raise InputError(
                    f"{path}: line {lineno}: peak_power_bound_w={_show(row['peak_power_bound_w'])}"
                    f" is below peak_power_w={_show(row['peak_power_w'])}; expected an upper "
                    "bound on the predicted peak"
                )
        points.append(Point(int(b), f, t, peak, mean, bound))
    if not points:
        raise InputError(f"{path}: no usable rows (every row is missing or marked not ok)")
    with_power = sum(not math.isnan(p.peak_power_w) for p in points)
    if 0 < with_power < len(points):
        gap = next(p for p in points if math.isnan(p.peak_power_w))
        raise InputError(
            f"{path}: peak_power_w is empty at batch_size={gap.batch_size}, "
            f"freq_mhz={gap.freq_mhz:g} but set elsewhere; a profile is either time-only or "
            "fully powered"
        )
    return Profile(points, path, metadata, comments, failed)


def save_profile(profile: Profile, path: str | Path, comments: list[str] | None = None) -> None:
    """Write the profile CSV atomically (metadata as columns, comments as ``#`` lines)."""
    rows: list[dict[str, object]] = []
    for p in sorted(profile.points, key=lambda p: (p.batch_size, p.freq_mhz)):
        row: dict[str, object] = {
            "batch_size": p.batch_size,
            "freq_mhz": p.freq_mhz,
            "time_per_batch_s": p.time_per_batch_s,
            "peak_power_w": p.peak_power_w,
            "mean_power_w": p.mean_power_w,
        }
        if not math.isnan(p.peak_power_bound_w):
            row["peak_power_bound_w"] = p.peak_power_bound_w
        row.update(profile.metadata)
        rows.append(row)
    for b, f, status in profile.failed:
        row = {"batch_size": b, "freq_mhz": f, "status": status}
        row.update(profile.metadata)
        rows.append(row)
    if profile.failed:
        for row in rows:
            row.setdefault("status", "ok")
    write_rows(str(path), rows, comments if comments is not None else profile.comments)
