"""Fuzz every input format powerfleet reads and count how each mutated input is handled.

Why a harness and not only unit tests: the hardening issue (docs/architecture.md, "inputs") is
about the inputs nobody thought of. Unit tests pin the classes of bad input we know; this script
throws thousands of mutated files and lines (truncation, wrong types, NaN/inf/huge/negative
values, duplicates, BOM, CRLF, quoted newlines, binary, deep nesting, very long lines) at the
same loaders a user reaches and sorts every outcome into:

- ``clean``: the project's own error type with a one-line message (what the CLI prints, exit 2);
- ``accepted``: the loader returned and the result passed the physical checks below;
- ``impossible``: the loader returned something physically impossible (mean power above peak,
  0 W, 0 MHz, sub-microsecond steps, non-finite numbers, a corrupted tensor file whose content
  changed, a checkpoint whose counters disagree with its own curve, a request split in two...);
- ``traceback``: any other exception (a bare ``ValueError``, ``KeyError``, ``RecursionError``...),
  or the agent dying;
- ``hang``: over the per-input time limit, or over the memory cap.

In-process for volume, plus a sample through the CLI (``powerfleet select``/``inspect``: exit 2 and
one stderr line is clean) and a live ``python -m fleet.agent --backend replay`` fed hostile lines,
each followed by a ``hello`` that must still be answered. CI does not run this (it is slow);
``python benchmarks/fuzz.py --n 10000`` is the acceptance run, ``--n 300`` a quick look.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import json
import math
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILE_SEED = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"
EFFICIENCY_SEED = ROOT / "simulations" / "efficiency" / "resnet18_cinic.csv"
MAX_INPUT = 8 << 20  # the harness's own memory: no mutated input grows past this
OUTCOMES = ("clean", "accepted", "impossible", "traceback", "hang")


class Timeout(BaseException):
    """Raised by the interval timer inside a loader that runs too long (BaseException: a
    loader's ``except Exception`` must not swallow it)."""


def _on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Timeout()


def project_errors() -> tuple[type, ...]:
    """The error types whose one-line message the CLI/agent shows a user as is."""
    names = [
        ("fleet.common.errors", "InputError"),
        ("fleet.agent.profile_io", "ProfileFormatError"),
        ("fleet.agent.trainer", "TrainerError"),
        ("fleet.agent.dataerror", "DatasetError"),
        ("fleet.agent.protocol", "ProtocolError"),
        ("fleet.agent.devices.base", "DeviceError"),
        ("fleet.agent.tensorfile", "TensorFileError"),
    ]
    out = []
    for mod, name in names:
        try:
            out.append(getattr(importlib.import_module(mod), name))
        except (ImportError, AttributeError):
            continue
    return tuple(out)


def classify_call(fn: Callable[[], object], check: Callable[[object], str | None], limit_s: float):
    """Run ``fn`` under a time limit; return (outcome, detail)."""
    try:
        return _classify(fn, check, limit_s)
    except Timeout:  # the timer fired just as the call ended: over the limit all the same
        signal.setitimer(signal.ITIMER_REAL, 0)
        return "hang", f"over {limit_s:g} s"


def _classify(fn, check, limit_s: float):
    errors = project_errors()
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        result = fn()
    except Timeout:
        return "hang", f"over {limit_s:g} s"
    except MemoryError:
        return "hang", "memory cap"
    except errors as exc:
        msg = str(exc)
        if not msg.strip() or "\n" in msg or "\r" in msg:
            return "traceback", f"{type(exc).__name__} with a multi-line message: {msg[:200]!r}"
        return "clean", msg[:200]
    except Exception as exc:  # noqa: BLE001 - this is what we count
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        problem = check(result)
    except Exception as exc:  # noqa: BLE001 - the check reading a half-valid result
        problem = f"result unreadable by the check: {type(exc).__name__}: {exc}"
    if problem:
        return "impossible", problem
    return "accepted", ""


# ---------------------------------------------------------------------------------- mutators

HOSTILE = [
    "", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-320", "5e-324",
    "0", "-0", "-1", "-0.5", "1e300", "123456789012345678901234567890", "abc", "0x1A", "1_000",
    "\uff11\uff12", "1e", ".", "+", "\x00", "true", "None", '"', '"quoted\nnewline"', "9" * 5000,
    "2.5", "1e-9", "\u22123", "1e-7", "3.0", "1,5", "  7  ", "\ufeff5",
]  # fmt: skip


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def m_truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def m_flip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def m_bom(rng: random.Random, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def m_crlf(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n" if rng.random() < 0.7 else b"\r")


def m_binary(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[i:]


def m_long_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    lines[i] = lines[i] + b"x" * rng.choice([10_000, 200_000, 2_000_000])
    return b"\n".join(lines)


def m_dup_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"\n".join(lines[: i + 1] + [lines[i]] * rng.randint(1, 3) + lines[i + 1 :])


def m_del_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def m_many_rows(rng: random.Random, data: bytes) -> bytes:
    """Repeat the last row 1,000 or 20,000 times (a bloated or looping writer)."""
    lines = _lines(data.rstrip(b"\n"))
    times = min(rng.choice([1000, 20_000]), MAX_INPUT // (len(lines[-1]) + 1))
    return b"\n".join(lines + [lines[-1]] * times) + b"\n"


def m_nul(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + b"\x00" + data[i:]


def m_invalid_utf8(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + data[i:]


GENERIC = [m_truncate, m_flip, m_bom, m_crlf, m_binary, m_dup_line, m_del_line, m_nul,
           m_invalid_utf8]  # fmt: skip
BIG = [m_long_line]  # costly inputs (megabytes): one input in BIG_SHARE gets one of them
BIG_SHARE = 20


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


BIG.append(m_many_rows)
CSV_MUTATORS = [m_cell, m_cell, m_header, m_conflict, m_physics, m_quoted_newline, m_many_rows]


def mutate(rng: random.Random, data: bytes, specific: list) -> bytes:
    """One to three mutations; format-specific ones twice as likely as generic byte damage."""
    pool = [m for m in specific if m not in BIG] * 2 + GENERIC
    big = [m for m in specific if m in BIG] + BIG
    for _ in range(rng.randint(1, 3)):
        if data and len(data) < MAX_INPUT // 2:
            data = rng.choice(pool)(rng, data)
    if data and rng.randrange(BIG_SHARE) == 0:
        data = rng.choice(big)(rng, data)
    return data[:MAX_INPUT]


# ------------------------------------------------------------------------------ checks


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


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
        if not _finite(p.freq_mhz) or (p.freq_mhz <= 0 and not unclocked):
            return f"freq_mhz {p.freq_mhz} accepted"
        if not _finite(p.time_per_batch_s) or p.time_per_batch_s < 1e-6:
            return f"time_per_batch_s {p.time_per_batch_s} accepted"
        if not math.isnan(p.peak_power_w):
            if not _finite(p.peak_power_w) or p.peak_power_w <= 0:
                return f"peak_power_w {p.peak_power_w} accepted"
            if not _finite(p.mean_power_w) or p.mean_power_w <= 0:
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
        if not math.isnan(n) and (not _finite(n) or n <= 0):
            return f"samples_to_accuracy {n} accepted"
    for s in eff.std.values():
        if not _finite(s) or s < 0:
            return f"std {s} accepted"
    for r in eff.runs.values():
        if r <= 0:
            return f"runs {r} accepted"
    return None


SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KNOWN_OPTIMIZERS = ("adam", "adamw", "sgd")


def check_fleet(fleet) -> str | None:
    run = fleet.run
    if not SAFE_NAME.match(str(run.name)) or ".." in str(run.name):
        return f"run name {run.name!r} accepted"
    if not _finite(run.lr_ref) or run.lr_ref <= 0:
        return f"lr_ref {run.lr_ref} accepted"
    if not isinstance(run.lr_ref_batch, int) or run.lr_ref_batch <= 0:
        return f"lr_ref_batch {run.lr_ref_batch} accepted"
    if not _finite(run.target_accuracy) or not 0 < run.target_accuracy <= 1:
        return f"target_accuracy {run.target_accuracy} accepted"
    if str(run.optimizer).lower() not in KNOWN_OPTIMIZERS:
        return f"optimizer {run.optimizer!r} accepted"
    if not isinstance(run.rounds, int) or not 1 <= run.rounds <= 10**6:
        return f"rounds {run.rounds} accepted"
    if len(fleet.devices) > 100_000:
        return f"{len(fleet.devices)} devices accepted"
    for d in fleet.devices:
        if not SAFE_NAME.match(str(d.name)) or ".." in str(d.name):
            return f"device name {d.name!r} accepted"
        if d.budget_w is not None and (not _finite(d.budget_w) or d.budget_w <= 0):
            return f"budget_w {d.budget_w} accepted"
        for step in d.schedule:
            if not _finite(step.at_s) or step.at_s < 0:
                return f"schedule time {step.at_s} accepted"
            if step.budget_w is not None and (not _finite(step.budget_w) or step.budget_w <= 0):
                return f"schedule budget {step.budget_w} accepted"
    return None


# ------------------------------------------------------------------------------ formats


class Format:
    """One input format: seeds, mutators, the loader a user reaches and the physical check."""

    name = ""
    available = True
    why_skipped = ""

    def inputs(self, rng: random.Random, n: int):
        raise RuntimeError("subclass")


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


def fleet_format(tmp: str):
    from fleet.config.fleetfile import load_fleet

    shutil.copy(PROFILE_SEED, os.path.join(tmp, "p.csv"))
    shutil.copy(EFFICIENCY_SEED, os.path.join(tmp, "e.csv"))
    seed = (
        b'# fleet\n[run]\nname = "fuzz-run"\nmodel = "resnet18"\nefficiency = "e.csv"\n'
        b'target_accuracy = 0.9\nmode = "local"\nobjective = "time"\nrounds = 1\n'
        b'optimizer = "adam"\nlr_ref_batch = 128\nlr_ref = 5e-4\n\n'
        b'[[devices]]\nname = "nano-a"\ntype = "jetson-nano"\nbudget_w = 4.5\n'
        b'profile = "p.csv"\ndata = "e.csv"\n\n'
        b'[[devices]]\nname = "nano-b"\ntype = "jetson-nano"\nbudget_w = "none"\n'
        b'profile = "p.csv"\ndata = "e.csv"\n\n'
        b'[[devices]]\nname = "nano-c"\ntype = "jetson-nano"\n'
        b'budget_schedule = [[0, 7.0], [3000, 4.5]]\nprofile = "p.csv"\ndata = "e.csv"\ncount = 3\n'
    )
    toml_values = [
        "nan", "inf", "-inf", "1e309", "0", "-1", "0.0", '""', '"../../x"', '"a/b"', '"none"',
        '"NONE"', "[1, [2, [3]]]", "[" * 3000 + "]" * 3000, "{a = 1}", "true", "9999999999",
        "1e-320", '"x' + "y" * 100000 + '"', "[[0, 7.0], [0, 4.5]]", "[[-5, 7.0]]",
        "[[0, nan]]", "[]", "'\\u0000'", '"\\u0000"', "1979-05-27", "0x10", "2.5", '"adamw"',
        '"rmsprop"', '".."', '"/etc/passwd"', "-0.0", "100000000000",
    ]  # fmt: skip

    def m_value(rng: random.Random, data: bytes) -> bytes:
        lines = data.decode("utf-8", "surrogateescape").split("\n")
        idx = [i for i, ln in enumerate(lines) if "=" in ln]
        if not idx:
            return data
        i = rng.choice(idx)
        key = lines[i].split("=", 1)[0]
        lines[i] = key + "= " + rng.choice(toml_values)
        return "\n".join(lines).encode("utf-8", "surrogateescape")

    def m_count(rng: random.Random, data: bytes) -> bytes:
        """The repeated device's ``count``: nothing, wrong types, or far too many devices."""
        n = rng.choice(["0", "-2", "2.5", "1000000000", "10000000000000", "50001", '"3"'])
        return data.replace(b"count = 3", f"count = {n}".encode())

    def m_dup_table(rng: random.Random, data: bytes) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        j = text.find("[[devices]]")
        return (text + "\n" + text[j:]).encode("utf-8", "surrogateescape") if j >= 0 else data

    def m_dup_key(rng: random.Random, data: bytes) -> bytes:
        return data + b"budget_w = 3\n"

    class Fmt(Format):
        name = "fleet TOML"

        def run_one(self, rng, limit_s):
            data = mutate(rng, seed, [m_value, m_value, m_count, m_dup_table, m_dup_key])
            path = os.path.join(tmp, "fuzz.toml")
            with open(path, "wb") as fh:
                fh.write(data)
            return (*classify_call(lambda: load_fleet(path), check_fleet, limit_s), data)

    return Fmt()


def budget_format(tmp: str):
    """A live budget file (watts or ``none``): fuzzed when this tree has a reader for it."""
    reader = None
    for mod, fn in (("fleet.agent.budget", "read_budget_file"),
                    ("fleet.agent.closedloop", "read_budget_file")):  # fmt: skip
        try:
            reader = getattr(importlib.import_module(mod), fn)
            break
        except (ImportError, AttributeError):
            continue

    class Fmt(Format):
        name = "budget file"
        available = reader is not None
        why_skipped = "no budget-file reader in this tree yet"

        def run_one(self, rng, limit_s):
            seed = rng.choice([b"7.5\n", b"none\n", b"4\n"])
            pool = [lambda r, d: r.choice(HOSTILE).encode("utf-8", "replace") + b"\n"]
            data = mutate(rng, seed, pool)
            path = os.path.join(tmp, "budget")
            with open(path, "wb") as fh:
                fh.write(data)

            def check(v):
                if v is None:
                    return None
                return None if _finite(v) and v > 0 else f"budget {v} accepted"

            return (*classify_call(lambda: reader(path), check, limit_s), data)

    return Fmt()


# ---- tensor files (weights, data, checkpoints)


def tensor_io():
    """(save(obj, path), how the project loads weights/data/checkpoints) for this tree."""
    try:
        tf = importlib.import_module("fleet.agent.tensorfile")
        return tf.save, "tensorfile"
    except ImportError:
        import torch

        return (lambda obj, path: torch.save(obj, path)), "torch.save"


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def counters_problem(counters: dict) -> str | None:
    """A checkpoint's counters against its own history (what a tampered file gets wrong)."""
    samples = counters.get("samples")
    curve = counters.get("curve") or []
    if not isinstance(samples, int) or samples < 0:
        return f"samples counter {samples!r} accepted"
    if curve and max(int(s) for s, _ in curve) > samples:
        return f"samples counter {samples} below the curve's last point {curve[-1][0]}"
    if curve and int(curve[-1][0]) != samples:
        return f"samples counter {samples} is not the last evaluation's {curve[-1][0]}"
    if counters.get("status") == "reached" and counters.get("samples_to_accuracy") is None:
        return "status reached without samples_to_accuracy"
    return None


def tensor_format(tmp: str):
    import torch

    from fleet.agent import protocol, trainer
    from fleet.agent.models import build_model

    save, how = tensor_io()
    torch.manual_seed(0)
    x = torch.randn(48, 1, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    data = {"train": (x[:32], y[:32]), "test": (x[32:], y[32:])}
    model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ckpt_path = os.path.join(tmp, "seed.ckpt")
    trainer.train_to_target(
        model, data["train"], data["test"], 16, 1e-3, 0.999, eval_every_samples=16,
        max_samples=32, checkpoint_path=ckpt_path, eval_at_start=False,
    )  # fmt: skip
    seeds = {}
    for kind, obj in (("weights", weights), ("data", data)):
        p = os.path.join(tmp, "seed-" + kind)
        save(obj, p)
        seeds[kind] = (Path(p).read_bytes(), obj)
    ckpt_obj = _load_ckpt_any(ckpt_path)
    seeds["checkpoint"] = (Path(ckpt_path).read_bytes(), ckpt_obj)
    fingerprint = ckpt_obj["fingerprint"]

    from fleet.training.task import read_weights

    loaders = {
        "weights": read_weights,
        "data": protocol._load_train_data,
        "checkpoint": lambda p: trainer._load_checkpoint(p, fingerprint),
    }

    class HostilePickle:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(tmp, "PWNED"),))

    def m_tamper(rng: random.Random, kind: str, obj) -> bytes | None:
        """Re-save a checkpoint with its counters changed (as a tamperer with the tool would)."""
        if kind != "checkpoint":
            return None
        c = dict(obj)
        counters = dict(c["counters"])
        field = rng.choice(["samples", "steps", "status", "curve"])
        if field == "samples":
            counters["samples"] = counters["samples"] + rng.choice([-16, 16, 10**6])
        elif field == "steps":
            counters["samples"] = 0
        elif field == "status":
            counters["status"] = "reached"
        else:
            counters["curve"] = [[10**9, 1.0]]
        c["counters"] = counters
        p = os.path.join(tmp, "tamper")
        save(c, p)
        return Path(p).read_bytes()

    class Fmt(Format):
        name = "tensor files"
        detail = how

        def run_one(self, rng, limit_s):
            kind = rng.choice(sorted(seeds))
            raw, obj = seeds[kind]
            r = rng.random()
            if r < 0.15:
                data = m_tamper(rng, kind, obj) or m_flip(rng, raw)
            elif r < 0.2:
                import pickle

                data = pickle.dumps(HostilePickle())
            else:
                data = rng.choice([m_flip, m_flip, m_truncate, m_binary, m_nul])(rng, raw)
            path = os.path.join(tmp, "fuzz-" + kind)
            with open(path, "wb") as fh:
                fh.write(data)
            marker = os.path.join(tmp, "PWNED")

            def check(loaded):
                if os.path.exists(marker):
                    os.unlink(marker)
                    return "a hostile pickle ran code"
                if kind == "data":
                    loaded = {"train": loaded[0], "test": loaded[1]}
                if kind == "checkpoint":
                    problem = counters_problem(loaded.get("counters") or {})
                    if problem:
                        return problem
                    if data != raw and not _same_ckpt(loaded, obj):
                        return "a corrupted checkpoint loaded with different content"
                    return None
                if data != raw and not _same(loaded, obj):
                    return f"a corrupted {kind} file loaded with different content"
                return None

            outcome, detail = classify_call(lambda: loaders[kind](path), check, limit_s)
            if os.path.exists(marker):
                os.unlink(marker)
                outcome, detail = "impossible", "a hostile pickle ran code"
            return outcome, kind + ": " + detail, data

    return Fmt()


def _load_ckpt_any(path: str):
    try:
        tf = importlib.import_module("fleet.agent.tensorfile")
        return tf.load(path)
    except ImportError:
        import torch

        return torch.load(path, weights_only=True)


def _same_ckpt(a, b) -> bool:
    keys = ("model", "optimizer", "counters", "fingerprint")
    return all(_same(a.get(k), b.get(k)) for k in keys)


# ---- agent protocol lines


AGENT_SEEDS = [
    {"id": 1, "cmd": "hello"},
    {"id": 2, "cmd": "power"},
    {"id": 3, "cmd": "lock", "freq_mhz": 921.6},
    {"id": 4, "cmd": "restore"},
    {"id": 5, "cmd": "train", "model": "small_cnn", "data": "/nonexistent/d.pt",
     "batch_size": 16, "lr": 0.001, "target_accuracy": 0.9},
    {"id": 6, "cmd": "lock", "freq_mhz": 76.8},
]  # fmt: skip


def agent_line(rng: random.Random) -> bytes:
    """One hostile request line (without its trailing newline)."""
    req = dict(rng.choice(AGENT_SEEDS))
    op = rng.randrange(14)
    if op == 0:
        depth = rng.choice([50, 1000, 100_000, 400_000])
        return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1"
    if op == 1:
        return json.dumps({**req, "pad": "x" * rng.choice([100_000, 2_000_000])}).encode()
    if op == 2:
        raw = json.dumps(req).encode()
        i = rng.randrange(len(raw) + 1)
        return raw[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + raw[i:]
    if op == 3:
        return rng.choice([b"1", b"[]", b'"hello"', b"null", b"true", b"[{}]", b"1e999"])
    if op == 4:
        key = rng.choice([k for k in req if k not in ("id", "cmd")] or ["freq_mhz"])
        req[key] = rng.choice([float("nan"), float("inf"), -float("inf")])
        return json.dumps(req).encode()  # Python writes NaN/Infinity tokens
    if op == 5:
        raw = json.dumps(req).encode()
        i = raw.find(b",") + 1 or len(raw) // 2
        return raw[:i] + rng.choice([b"\r", b"\r\r", b" \r "]) + raw[i:]
    if op == 6:
        key = rng.choice(list(req))
        req[key] = rng.choice(
            [None, [], {}, "x", -1, 0, 10**400 if False else 10**30, True, [1] * 100, "\u0000"]
        )
        return json.dumps(req).encode()
    if op == 7:
        raw = json.dumps(req).encode()
        return raw[: rng.randrange(len(raw) + 1)]
    if op == 8:
        return b"\xef\xbb\xbf" + json.dumps(req).encode()
    if op == 9:
        return json.dumps(req).encode()[:-1] + b',"id":"dup"}'
    if op == 10:
        req["freq_mhz"] = rng.choice([-1, 0, 1e-320, 1e308, "921.6", 921])
        return json.dumps(req).encode()
    if op == 11:
        return b"1" * rng.choice([5000, 100_000])  # a huge integer literal
    if op == 12:
        req["extra"] = {"deep": json.loads("[" * 200 + "]" * 200)}
        return json.dumps(req).encode()
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))).replace(b"\n", b" ")


def _nonfinite(obj) -> bool:
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_nonfinite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_nonfinite(v) for v in obj)
    return False


def _expected_requests(line: bytes) -> int:
    return 0 if not line.strip(b" \t\r\x0b\x0c") else 1


def agent_format(tmp: str):
    from fleet.agent import protocol
    from fleet.agent.devices import open_backend

    class Fmt(Format):
        name = "agent lines"

        def run_one(self, rng, limit_s):
            line = agent_line(rng)
            backend = open_backend("replay", profile_csv=str(PROFILE_SEED))
            out: list[dict] = []
            ctx = protocol.Context(backend, "replay", out.append, {"profile_csv": "p"})
            stream = io.BytesIO(line + b"\n" + b'{"id":"probe","cmd":"hello"}\n')
            stdin = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")

            def go():
                protocol.serve(ctx, stdin)
                return out

            def check(responses):
                n = _expected_requests(line)
                probe = [r for r in responses if r.get("id") == "probe"]
                if not probe or not probe[-1].get("ok"):
                    return "the agent stopped answering (no reply to the hello after this line)"
                if len(responses) != n + 1:
                    return f"{len(responses) - 1} replies to one line (a line split in two)"
                if n and responses[0].get("ok"):
                    try:
                        req = json.loads(line.decode("utf-8-sig"))
                    except ValueError:
                        return "an unparseable line was answered ok"
                    if _nonfinite(req):
                        return "a request with a non-finite number was answered ok"
                return None

            outcome, detail = classify_call(go, check, limit_s)
            if outcome == "accepted" and out and not out[0].get("ok"):
                err = str(out[0].get("error", ""))
                outcome, detail = ("clean", err[:200]) if "\n" not in err else ("traceback", err)
            return outcome, detail, line

    return Fmt()


# ------------------------------------------------------------------------------ driver


def set_memory_cap(gib: float) -> None:
    """Cap this process's address space so a count blow-up fails fast instead of eating RAM."""
    with open("/proc/self/status") as fh:
        vm = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmSize:"))
    cap = vm + int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))


def fuzz_format(fmt: Format, n: int, seed: int, limit_s: float, examples: int):
    rng = random.Random(seed)
    counts = Counter()
    samples: dict[str, list[str]] = {o: [] for o in OUTCOMES}
    kept: dict[str, list[bytes]] = {o: [] for o in OUTCOMES}
    t0 = time.perf_counter()
    for _ in range(n):
        outcome, detail, data = fmt.run_one(rng, limit_s)
        counts[outcome] += 1
        if (
            outcome != "accepted"
            and len(samples[outcome]) < examples
            and detail not in samples[outcome]
        ):
            samples[outcome].append(detail)
        if len(kept[outcome]) < 100 and len(data) < 65536:  # the CLI sample's pool
            kept[outcome].append(data)
    return counts, samples, kept, time.perf_counter() - t0


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


class LiveAgent:
    """A real ``python -m fleet.agent --backend replay`` reading from a pipe."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet.agent", "--backend", "replay",
             "--profile-csv", str(PROFILE_SEED)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        self.buf = b""

    def replies_until(self, probe: str, timeout_s: float) -> list[dict] | None:
        out = []
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = {"unparseable": True}
                if obj.get("event"):
                    continue
                out.append(obj)
                if obj.get("id") == probe:
                    return out
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def live_agent_sample(k: int, seed: int, limit_s: float) -> Counter:
    """Hostile lines into a live agent, each followed by a hello that must be answered."""
    rng = random.Random(seed)
    counts = Counter()
    agent = LiveAgent()
    try:
        for i in range(k):
            line = agent_line(rng)
            probe = f"probe-{i}"
            try:
                agent.proc.stdin.write(line + b"\n")
                agent.proc.stdin.write(json.dumps({"id": probe, "cmd": "hello"}).encode() + b"\n")
                agent.proc.stdin.flush()
            except BrokenPipeError:
                replies = None
            else:
                replies = agent.replies_until(probe, limit_s * 20)
            if replies is None:
                try:
                    agent.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
                counts["traceback" if agent.proc.poll() is not None else "hang"] += 1
                agent.close()
                agent = LiveAgent()
                continue
            n = _expected_requests(line)
            if len(replies) != n + 1:
                counts["impossible"] += 1  # a line answered twice (split) or not at all
            elif n and replies[0].get("ok"):
                counts["accepted"] += 1
            else:
                counts["clean"] += 1
    finally:
        agent.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="inputs per format (goal: 10000)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--limit-s", type=float, default=10.0, help="per-input time limit")
    ap.add_argument("--cli", type=int, default=20, help="CLI subprocess sample per CSV format")
    ap.add_argument("--agent", type=int, default=100, help="hostile lines into a live agent")
    ap.add_argument("--formats", default="", help="comma list of format names to run (substr)")
    ap.add_argument("--examples", type=int, default=3, help="example messages per outcome")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import logging
    import warnings

    import torch

    logging.disable(logging.CRITICAL)  # the agent logs failed commands; the counts say enough
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    tmp = tempfile.mkdtemp(prefix="powerfleet-fuzz-")
    from fleet.core.efficiency import load_efficiency
    from fleet.core.profile import load_profile

    formats = [
        CsvFormat("profile CSV", PROFILE_SEED, ".csv", load_profile, check_profile,
                  CSV_MUTATORS, tmp),
        CsvFormat("efficiency CSV", EFFICIENCY_SEED, ".csv", load_efficiency, check_efficiency,
                  CSV_MUTATORS[:-3] + [m_eff_physics, m_quoted_newline, m_many_rows], tmp),
        fleet_format(tmp),
        agent_format(tmp),
        tensor_format(tmp),
        budget_format(tmp),
    ]  # fmt: skip
    wanted = [w.strip().lower() for w in args.formats.split(",") if w.strip()]
    set_memory_cap(6.0)
    report = {}
    try:
        for fmt in formats:
            if wanted and not any(w in fmt.name.lower() for w in wanted):
                continue
            if not fmt.available:
                report[fmt.name] = {"skipped": fmt.why_skipped}
                print(f"{fmt.name:15s} skipped: {fmt.why_skipped}", flush=True)
                continue
            counts, samples, kept, secs = fuzz_format(
                fmt, args.n, args.seed, args.limit_s, args.examples
            )
            entry = {"n": args.n, "seconds": round(secs, 1), **{o: counts[o] for o in OUTCOMES}}
            entry["examples"] = {o: s for o, s in samples.items() if s}
            if fmt.name in ("profile CSV", "efficiency CSV") and args.cli:
                rng = random.Random(args.seed)
                pool = kept["clean"] + kept["impossible"] + kept["traceback"] + kept["accepted"]
                pick = rng.sample(pool, min(args.cli, len(pool)))
                entry["cli"] = dict(cli_sample(fmt.name, pick, tmp, args.limit_s))
            if fmt.name == "agent lines" and args.agent:
                entry["live_agent"] = dict(live_agent_sample(args.agent, args.seed, args.limit_s))
            report[fmt.name] = entry
            print_entry(fmt.name, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=1))
    bad = sum(e.get(k, 0) for e in report.values() for k in ("impossible", "traceback", "hang"))
    return 1 if bad else 0


def print_entry(name: str, entry: dict) -> None:
    n = entry["n"]
    cells = "  ".join(f"{o} {entry[o]:5d} ({100.0 * entry[o] / max(1, n):5.1f}%)" for o in OUTCOMES)
    print("{:15s} n={:<6d} {}  [{:.0f} s]".format(name, n, cells, entry["seconds"]), flush=True)
    for key in ("cli", "live_agent"):
        if key in entry:
            print("{:15s}   {}: {}".format("", key, entry[key]), flush=True)
    for outcome, texts in entry["examples"].items():
        if outcome in ("impossible", "traceback", "hang"):
            for t in texts:
                print("{:15s}   e.g. {}: {}".format("", outcome, t[:160]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
