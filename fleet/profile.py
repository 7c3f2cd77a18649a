"""The profile (LUT) of one device x model x input shape, and its feasible frontier per budget.

A profile holds, for every measured (batch size, frequency) point, the mean step time and the
peak (and mean) power. Time and power do not depend on the training data, so a profile is
measured once per device and model and reused (paper §4.1). This module loads and validates the
CSV (the file format itself lives in ``fleet.agent.profile_io`` so the board can write it under
Python 3.6), and answers "for each batch size, what is the fastest measured point whose
*measured* peak power fits the budget". Real profiles are noisy: nothing here assumes power or
time is monotone in batch size or frequency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fleet import fleetconfig
from fleet.agent.profile_io import (
    REQUIRED_COLUMNS,
    ProfileFormatError,
    read_rows,
    write_rows,
)
from fleet.errors import InfeasibleError, InputError

UNLIMITED = math.inf


@dataclass(frozen=True)
class Point:
    """One measured operating point."""

    batch_size: int
    freq_mhz: float
    time_per_batch_s: float
    peak_power_w: float  # NaN when the profile is time-only
    mean_power_w: float  # falls back to peak when not measured

    @property
    def time_per_sample_s(self) -> float:
        return self.time_per_batch_s / self.batch_size


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


def check_budget(budget_w: float | None) -> float:
    """A budget as a limit to compare peaks with: None (unlimited) is +inf; validated once,
    by the budget codec (``fleet.fleetconfig.check_budget``)."""
    checked = fleetconfig.check_budget("budget_w", budget_w)
    return UNLIMITED if checked is None else checked


def feasible(point: Point, budget_w: float) -> bool:
    """Within budget by measurement. An unmeasured peak only fits an unlimited budget."""
    if math.isinf(budget_w):
        return True
    return not math.isnan(point.peak_power_w) and point.peak_power_w <= budget_w


def frontier(profile: Profile, budget_w: float | None) -> dict[int, Point]:
    """Eq. 4 per batch size: the fastest measured point whose measured peak fits the budget.

    "Fastest" is the lowest step time, not the highest frequency: on a noisy profile a higher
    clock can measure slower, and the method wants time. Ties go to lower peak power, then to
    the lower frequency. Batch sizes with no fitting point are absent.
    """
    budget = check_budget(budget_w)
    if not math.isinf(budget) and not profile.has_power:
        raise InputError(
            f"{profile.source}: profile has no power measurements (time-only); it cannot be "
            "used under a power budget (use --budget-w none, or profile on a backend with power)"
        )
    best: dict[int, Point] = {}
    for p in profile.points:
        if not feasible(p, budget):
            continue
        cur = best.get(p.batch_size)
        if cur is None or _speed_key(p) < _speed_key(cur):
            best[p.batch_size] = p
    return dict(sorted(best.items()))


def _speed_key(p: Point) -> tuple[float, float, float]:
    peak = p.peak_power_w if not math.isnan(p.peak_power_w) else math.inf
    return (p.time_per_batch_s, peak, p.freq_mhz)


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


def _num(path: str, lineno: int, col: str, raw: str, *, integer: bool = False) -> float:
    try:
        v = float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise InputError(f"{path}: line {lineno}: {col}={raw!r} is not {kind}") from None
    if math.isnan(v) or math.isinf(v):
        raise InputError(f"{path}: line {lineno}: {col}={raw!r} must be a finite number")
    if integer and v != int(v):
        raise InputError(f"{path}: line {lineno}: {col}={raw!r} is not an integer")
    return v


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile CSV; every problem is one InputError naming file/line/field."""
    path = str(path)
    try:
        header, rows, comments = read_rows(path)
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected at least "
            f"{', '.join(REQUIRED_COLUMNS)} (found: {', '.join(header) or 'nothing'})"
        )
    dupes = {h for h in header if header.count(h) > 1}
    if dupes:
        raise InputError(f"{path}: duplicate column(s) {', '.join(sorted(dupes))} in the header")
    points: list[Point] = []
    failed: list[tuple[int, float, str]] = []
    seen: dict[tuple[int, float], int] = {}
    metadata: dict[str, str] = {}
    for lineno, row in rows:
        b = _num(path, lineno, "batch_size", row["batch_size"], integer=True)
        f = _num(path, lineno, "freq_mhz", row["freq_mhz"])
        if b <= 0:
            raise InputError(f"{path}: line {lineno}: batch_size={row['batch_size']} must be > 0")
        if f < 0:
            raise InputError(f"{path}: line {lineno}: freq_mhz={row['freq_mhz']} must be >= 0")
        key = (int(b), f)
        if key in seen:
            raise InputError(
                f"{path}: line {lineno}: duplicate point batch_size={int(b)}, freq_mhz={f:g} "
                f"(first at line {seen[key]})"
            )
        seen[key] = lineno
        for meta in ("device", "model", "input_shape", "source"):
            if row.get(meta):
                metadata.setdefault(meta, row[meta])
        status = (row.get("status") or "ok").lower()
        if status != "ok":
            failed.append((int(b), f, status))
            continue
        t = _num(path, lineno, "time_per_batch_s", row["time_per_batch_s"])
        if t <= 0:
            raise InputError(
                f"{path}: line {lineno}: time_per_batch_s={row['time_per_batch_s']} must be > 0"
            )
        peak = math.nan
        if row["peak_power_w"] != "":
            peak = _num(path, lineno, "peak_power_w", row["peak_power_w"])
            if peak < 0:
                raise InputError(
                    f"{path}: line {lineno}: peak_power_w={row['peak_power_w']} must be >= 0"
                )
        mean = peak
        if row.get("mean_power_w"):
            mean = _num(path, lineno, "mean_power_w", row["mean_power_w"])
            if mean < 0:
                raise InputError(
                    f"{path}: line {lineno}: mean_power_w={row['mean_power_w']} must be >= 0"
                )
        points.append(Point(int(b), f, t, peak, mean))
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
