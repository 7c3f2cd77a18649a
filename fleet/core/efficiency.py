"""Batch-size efficiency: samples needed to reach the target accuracy, per batch size.

``N_s_acc(b)`` depends on the data and the model but not on the device (paper §4.2), so the
coordinator estimates it once on a proxy dataset and ships it to every device. Only its shape
matters for the choice (the ratios ``r_b = N(b) / max N``, eq. 3); we keep absolute sample counts
anyway so that predicted times come out in seconds on the proxy's scale, which people can read.
Batch sizes that never reached the target are kept, marked, and never selected.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from fleet.common.errors import InputError
from fleet.core.profile import printable
from fleet.method.profile_io import ProfileFormatError, atomic_write_text, read_table

REQUIRED = ("batch_size", "samples_to_accuracy")
OPTIONAL_NUMERIC = ("std", "runs")
TARGET = "target_accuracy"  # the accuracy the counts are for: one value for the whole file
# Metadata columns the project writes (estimate, the device model, the efficiency store): with
# the others, what a near-miss column is checked against (``profile_io.NEAR_MISS``).
METADATA = ("model", "dataset", TARGET, "source", "noise_law_err", "learned_from")
KNOWN = REQUIRED + OPTIONAL_NUMERIC + METADATA


@dataclass
class Efficiency:
    """Samples-to-accuracy per batch size; NaN marks a batch size that never reached target."""

    samples: dict[int, float]
    std: dict[int, float] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)
    source: str = "<memory>"
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.samples)

    @property
    def target_accuracy(self) -> float | None:
        """The accuracy the counts are for (the file's ``target_accuracy`` column, checked by
        ``load_efficiency``), or None when the file does not say."""
        raw = self.metadata.get(TARGET)
        return float(raw) if raw not in (None, "") else None

    @property
    def reached(self) -> dict[int, float]:
        return {b: n for b, n in sorted(self.samples.items()) if not math.isnan(n)}

    @property
    def unreached(self) -> list[int]:
        return [b for b, n in sorted(self.samples.items()) if math.isnan(n)]

    def ratios(self) -> dict[int, float]:
        """Eq. 3: r_b = N(b) / max_b N(b) over the batch sizes that reached the target."""
        reached = self.reached
        if not reached:
            raise InputError(f"{self.source}: no batch size reached the target accuracy")
        top = max(reached.values())
        return {b: n / top for b, n in reached.items()}

    def best_batch(self) -> int:
        """The batch size needing the fewest samples (baseline B2); ties to the larger batch."""
        reached = self.reached
        if not reached:
            raise InputError(f"{self.source}: no batch size reached the target accuracy")
        return min(reached, key=lambda b: (reached[b], -b))

    def restrict(self, batch_sizes: list[int]) -> Efficiency:
        keep = set(batch_sizes)
        return Efficiency(
            {b: n for b, n in self.samples.items() if b in keep},
            {b: s for b, s in self.std.items() if b in keep},
            {b: r for b, r in self.runs.items() if b in keep},
            self.source,
            dict(self.metadata),
        )

    @classmethod
    def from_vector(cls, batch_sizes: list[int], samples: list[float | None], **kw) -> Efficiency:
        """Build from the two lists that travel in a Flower message."""
        if len(batch_sizes) != len(samples):
            raise InputError(
                f"efficiency vector: {len(batch_sizes)} batch sizes but {len(samples)} values"
            )
        vals = {}
        for b, n in zip(batch_sizes, samples, strict=True):
            v = math.nan if n is None else float(n)
            if int(b) <= 0 or (not math.isnan(v) and not 0 < v < math.inf):
                raise InputError(f"efficiency vector: batch {b} -> {n}: both must be > 0")
            vals[int(b)] = v
        return cls(vals, **kw)


MAX_BATCH = 1 << 20  # as for profiles: a larger "batch size" is a typo or a unit mix-up
MAX_SAMPLES = 1e15


def load_efficiency(path: str | Path) -> Efficiency:
    """Read and validate an efficiency CSV (``#`` comments allowed, extra columns kept unless
    one is a near miss of a known column).

    Bounded like the profile reader (file size, line length, rows); every problem is one
    InputError naming file, line and field: non-finite or non-positive counts, negative std,
    duplicate batch sizes, a ``target_accuracy`` that is not one accuracy on every row (or
    that a ``# target_accuracy=`` comment contradicts).
    """
    path = str(path)
    try:
        header, rows, comments = read_table(path, "efficiency CSV", REQUIRED, KNOWN)
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        found = ", ".join(printable(h) for h in header[:20]) or "nothing"
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected at least "
            f"{', '.join(REQUIRED)} (found: {found})"
        )
    dupes = {h for h in header if header.count(h) > 1}
    if dupes:
        raise InputError(
            f"{path}: duplicate column(s) {printable(', '.join(sorted(dupes)), 200)} in the header"
        )
    samples: dict[int, float] = {}
    std: dict[int, float] = {}
    runs: dict[int, int] = {}
    metadata: dict[str, str] = {}
    first: dict[int, int] = {}
    for lineno, row in rows:
        b = int(_positive(path, lineno, "batch_size", row["batch_size"], integer=True,
                          high=MAX_BATCH))  # fmt: skip
        if b in samples:
            raise InputError(
                f"{path}: line {lineno}: duplicate batch_size={b} (first at line {first[b]}); "
                "expected one row per batch size"
            )
        first[b] = lineno
        raw = row["samples_to_accuracy"]
        n = (
            math.nan
            if raw == ""
            else _positive(path, lineno, "samples_to_accuracy", raw, high=MAX_SAMPLES)
        )
        samples[b] = n
        if row.get("std"):
            std[b] = _positive(path, lineno, "std", row["std"], allow_zero=True, high=MAX_SAMPLES)
        if row.get("runs"):
            runs[b] = int(_positive(path, lineno, "runs", row["runs"], integer=True, high=1e6))
        if row.get(TARGET):
            _target(path, lineno, row[TARGET], metadata)
        for k, v in row.items():
            if k not in REQUIRED + OPTIONAL_NUMERIC and v:
                metadata.setdefault(k, v)
    if not samples:
        raise InputError(f"{path}: no rows")
    stated = comment_target(path, comments)
    if stated is not None and TARGET in metadata and float(metadata[TARGET]) != stated:
        raise InputError(
            f"{path}: comment line {TARGET}={stated:g} differs from the rows' {TARGET}="
            f"{printable(metadata[TARGET])}; expected one target accuracy for the whole file"
        )
    return Efficiency(samples, std, runs, path, metadata)


def accuracy(where: str, raw: str) -> float:
    """An accuracy as the fleet file and ``powerfleet estimate`` take one: a number in (0, 1].
    ``where`` starts the refusal (``FILE: line N``); a trace's accuracy is what a replayed
    device reports, so 1.5 or 0 there would be printed as reached."""
    shown = repr(raw if len(raw) <= 40 else raw[:40] + "...")
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not 0 < v <= 1:  # NaN fails too
        raise InputError(
            f"{where}: {TARGET}={shown} is not an accuracy; expected a number in (0, 1]"
        )
    return v


def comment_target(path: str, comments: list[str]) -> float | None:
    """The accuracy a file's ``# target_accuracy=X`` comment states (None: none does), checked
    as an accuracy. A curves file states its target only there (it scales every run onto the
    trace's counts), so text that is not an accuracy, or two comments that differ, are refused
    rather than skipped."""
    found: float | None = None
    for line in comments:
        for part in line.split():
            if not part.startswith(TARGET + "="):
                continue
            value = accuracy(f"{path}: comment line", part.split("=", 1)[1])
            if found is not None and value != found:
                raise InputError(
                    f"{path}: comment line {part}: differs from {TARGET}={found:g} in a comment "
                    "above; expected one target accuracy for the whole file"
                )
            found = value
    return found


def _target(path: str, lineno: int, raw: str, metadata: dict[str, str]) -> None:
    """``target_accuracy``: one accuracy for the whole file (repeated on every row). Rows that
    disagree would leave the first row's value in force without a word."""
    value = accuracy(f"{path}: line {lineno}", raw)
    first = metadata.setdefault(TARGET, raw)
    if float(first) != value:
        raise InputError(
            f"{path}: line {lineno}: {TARGET}={printable(raw)} differs from {printable(first)} "
            "above; expected one target accuracy on every row"
        )


def _positive(
    path: str,
    lineno: int,
    col: str,
    raw: str,
    *,
    integer: bool = False,
    allow_zero: bool = False,
    high: float = math.inf,
) -> float:
    shown = repr(raw if len(raw) <= 40 else raw[:40] + "...")
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"{path}: line {lineno}: {col}={shown} is not a number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero) or v > high:
        need = ">= 0" if allow_zero else "> 0"
        if high < math.inf:
            need += f" and <= {high:g}"
        raise InputError(f"{path}: line {lineno}: {col}={shown} must be a finite number {need}")
    if integer and v != int(v):
        raise InputError(f"{path}: line {lineno}: {col}={shown} is not an integer")
    return v


def save_efficiency(eff: Efficiency, path: str | Path, comments: list[str] | None = None) -> None:
    """Write the efficiency CSV atomically; unreached batch sizes get an empty value."""
    buf = io.StringIO()
    for line in comments or []:
        buf.write(f"# {line}\n")
    meta_cols = sorted(eff.metadata)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["batch_size", "samples_to_accuracy", "std", "runs", *meta_cols])
    for b in eff.batch_sizes:
        n = eff.samples[b]
        w.writerow(
            [
                b,
                "" if math.isnan(n) else f"{n:.6g}",
                f"{eff.std[b]:.6g}" if b in eff.std else "",
                eff.runs.get(b, ""),
                *(eff.metadata[c] for c in meta_cols),
            ]
        )
    atomic_write_text(str(path), buf.getvalue())
