"""Fuzz target family: the profile and efficiency CSVs.

CSV-aware mutators (they keep the file a CSV and change what a cell, the header or a row says),
the physical checks of a loaded profile and efficiency, the format that writes a mutated file
and loads it as a user would, and a sample of mutated files through the CLI
(``powerfleet select``/``inspect``: exit 2 and one stderr line is clean).
"""

from __future__ import annotations

import functools
import math
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks.fuzz_harness import (
    EFFICIENCY_SEED,
    PROFILE_SEED,
    ROOT,
    Format,
    classify_call,
    finite,
)
from benchmarks.fuzz_mutators import HOSTILE, m_many_rows, mutate

# CSV-aware mutators: they keep the file a CSV and change what a cell says.


def _csv_split(data: bytes) -> tuple[list[str], int, list[int]]:
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    header = next(
        (i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), 0
    )
    body = [i for i in range(header + 1, len(lines)) if lines[i].strip()]
    return lines, header, body


def _join(lines: list[str]) -> bytes:
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _col(lines: list[str], header: int, name: str) -> int | None:
    cols = [c.strip() for c in lines[header].split(",")]
    return cols.index(name) if name in cols else None


def _row_mutator(edit: Callable[[random.Random, list[str], int, list[int], int], None]):
    """A CSV mutator from an edit of one random body row ``i``, made in place on ``lines``
    (``edit(rng, lines, header, body, i)``); a file without body rows comes back unchanged."""

    @functools.wraps(edit)
    def mutator(rng: random.Random, data: bytes) -> bytes:
        lines, header, body = _csv_split(data)
        if not body:
            return data
        edit(rng, lines, header, body, rng.choice(body))
        return _join(lines)

    return mutator


def _replace_cell(rng: random.Random, lines: list[str], i: int, value: str) -> None:
    cells = lines[i].split(",")
    cells[rng.randrange(len(cells))] = value
    lines[i] = ",".join(cells)


@_row_mutator
def m_cell(rng: random.Random, lines: list[str], header: int, body: list[int], i: int) -> None:
    _replace_cell(rng, lines, i, rng.choice(HOSTILE))


def m_header(rng: random.Random, data: bytes) -> bytes:
    lines, header, _ = _csv_split(data)
    cells = lines[header].split(",")
    op = rng.randrange(4)
    j = rng.randrange(len(cells))
    if op == 0:
        del cells[j]
    elif op == 1:
        cells.append(cells[j])
    elif op == 2:
        cells[j] = cells[j].upper()
    else:
        cells.insert(j, rng.choice(HOSTILE))
    lines[header] = ",".join(cells)
    return _join(lines)


def _set(lines: list[str], header: int, row: int, name: str, value: str) -> None:
    j = _col(lines, header, name)
    if j is None:
        return
    cells = lines[row].split(",")
    if j < len(cells):
        cells[j] = value
        lines[row] = ",".join(cells)


def _get(lines: list[str], header: int, row: int, name: str) -> str | None:
    j = _col(lines, header, name)
    cells = lines[row].split(",")
    return cells[j] if j is not None and j < len(cells) else None


@_row_mutator
def m_conflict(rng: random.Random, lines: list[str], header: int, body: list[int], i: int) -> None:
    """Duplicate a row with one numeric value changed (a conflicting measurement)."""
    cells = lines[i].split(",")
    j = rng.randrange(len(cells))
    try:
        cells[j] = repr(float(cells[j]) * rng.choice([0.5, 2.0, 1.0001]))
    except ValueError:
        cells[j] = "7"
    lines.insert(rng.choice(body) + 1, ",".join(cells))


@_row_mutator
def m_physics(rng: random.Random, lines: list[str], header: int, body: list[int], i: int) -> None:
    """Values that parse but cannot be true of a board (profile columns)."""
    choice = rng.randrange(6)
    if choice == 0:  # mean above peak
        peak = _get(lines, header, i, "peak_power_w") or "5"
        try:
            _set(lines, header, i, "mean_power_w", repr(float(peak) * rng.choice([1.5, 3.0])))
        except ValueError:
            _set(lines, header, i, "mean_power_w", "99")
    elif choice == 1:
        _set(lines, header, i, rng.choice(["peak_power_w", "mean_power_w"]), rng.choice(
            ["0", "-0", "0.0", "-2", "1e-320"]))  # fmt: skip
    elif choice == 2:
        _set(lines, header, i, "freq_mhz", rng.choice(["0", "-0", "-1", "1e-320", "nan"]))
    elif choice == 3:
        _set(lines, header, i, "time_per_batch_s", rng.choice(["1e-320", "1e-9", "5e-7", "0"]))
    elif choice == 4:
        _set(lines, header, i, "batch_size", rng.choice(["0", "-8", "1e12", "2.5", "1e400"]))
    else:
        _set(lines, header, i, "samples", rng.choice(["-1", "0", "nan", "1e400"]))


@_row_mutator
def m_eff_physics(
    rng: random.Random, lines: list[str], header: int, body: list[int], i: int
) -> None:
    col = rng.choice(["samples_to_accuracy", "std", "runs", "batch_size"])
    _set(lines, header, i, col, rng.choice(["0", "-1", "nan", "inf", "1e-320", "1e400", "2.5"]))


@_row_mutator
def m_quoted_newline(
    rng: random.Random, lines: list[str], header: int, body: list[int], i: int
) -> None:
    _replace_cell(rng, lines, i, '"7\n8"')


CSV_MUTATORS = [m_cell, m_cell, m_header, m_conflict, m_physics, m_quoted_newline, m_many_rows]


def check_profile(profile) -> str | None:
    if not profile.points:
        return "accepted a profile with no points"
    seen = {}
    for p in profile.points:
        key = (p.batch_size, p.freq_mhz)
        if key in seen:
            return f"duplicate point {key} accepted"
        seen[key] = p
        if p.batch_size <= 0 or p.batch_size > 10**7:
            return f"batch_size {p.batch_size} accepted"
        unclocked = p.freq_mhz == 0 and profile.freqs_mhz == [0.0]  # a CPU: no clock knob
        if not finite(p.freq_mhz) or (p.freq_mhz <= 0 and not unclocked):
            return f"freq_mhz {p.freq_mhz} accepted"
        if not finite(p.time_per_batch_s) or p.time_per_batch_s < 1e-6:
            return f"time_per_batch_s {p.time_per_batch_s} accepted"
        if not math.isnan(p.peak_power_w):
            if not finite(p.peak_power_w) or p.peak_power_w <= 0:
                return f"peak_power_w {p.peak_power_w} accepted"
            if not finite(p.mean_power_w) or p.mean_power_w <= 0:
                return f"mean_power_w {p.mean_power_w} accepted"
            if p.mean_power_w > p.peak_power_w * (1 + 1e-9):
                return f"mean_power_w {p.mean_power_w} above peak {p.peak_power_w} accepted"
    return None


def check_efficiency(eff) -> str | None:
    if not eff.samples:
        return "accepted an efficiency with no rows"
    for b, n in eff.samples.items():
        if b <= 0 or b > 10**7:
            return f"batch_size {b} accepted"
        if not math.isnan(n) and (not finite(n) or n <= 0):
            return f"samples_to_accuracy {n} accepted"
    for s in eff.std.values():
        if not finite(s) or s < 0:
            return f"std {s} accepted"
    for r in eff.runs.values():
        if r <= 0:
            return f"runs {r} accepted"
    return None


class CsvFormat(Format):
    def __init__(self, name, seed_path, suffix, loader, check, mutators, tmp):
        self.name = name
        self.seed = Path(seed_path).read_bytes()
        self.suffix = suffix
        self.loader = loader
        self.check = check
        self.mutators = mutators
        self.tmp = tmp

    def run_one(self, rng: random.Random, limit_s: float):
        data = mutate(rng, self.seed, self.mutators)
        path = os.path.join(self.tmp, "fuzz" + self.suffix)
        with open(path, "wb") as fh:
            fh.write(data)
        return (*classify_call(lambda: self.loader(path), self.check, limit_s), data)


def csv_formats(tmp: str) -> list[Format]:
    """The profile CSV and the efficiency CSV, each with its loader, check and mutators."""
    from fleet.core.efficiency import load_efficiency
    from fleet.core.profile import load_profile

    return [
        CsvFormat("profile CSV", PROFILE_SEED, ".csv", load_profile, check_profile,
                  CSV_MUTATORS, tmp),
        CsvFormat("efficiency CSV", EFFICIENCY_SEED, ".csv", load_efficiency, check_efficiency,
                  CSV_MUTATORS[:-3] + [m_eff_physics, m_quoted_newline, m_many_rows], tmp),
    ]  # fmt: skip


def cli_sample(fmt_name: str, inputs: list[bytes], tmp: str, limit_s: float) -> Counter:
    """Run mutated files through ``powerfleet select`` / ``inspect``: exit 2 + one line is clean."""
    counts = Counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i, data in enumerate(inputs):
        path = os.path.join(tmp, f"cli{i}.csv")
        Path(path).write_bytes(data)
        if fmt_name == "profile CSV":
            select = ["select", "--profile", path, "--efficiency", str(EFFICIENCY_SEED)]
            cmd = ["inspect", path] if i % 2 else select + ["--budget-w", "6"]
        else:
            cmd = [
                "select",
                "--profile",
                str(PROFILE_SEED),
                "--efficiency",
                path,
                "--budget-w",
                "6",
            ]
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "fleet", *cmd, "--json"],
                capture_output=True, env=env, timeout=limit_s * 10,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            counts["hang"] += 1
            continue
        err = proc.stderr.decode("utf-8", "replace").strip()
        if proc.returncode == 0:
            counts["accepted"] += 1
        elif "Traceback" in err or proc.returncode not in (1, 2) or "\n" in err:
            counts["traceback"] += 1
        else:
            counts["clean"] += 1
        os.unlink(path)
    return counts
