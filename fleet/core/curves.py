"""Recorded learning curves: accuracy against samples, per batch size and seed, beside a trace.

Why a file of its own: a convergence trace (an efficiency CSV) says how many samples each batch
size took; a device that learns its efficiency online needs what it would have *seen* on the way
(every evaluation), so a replay device can fit its curve exactly as a board does. The curves of
real training come from ``powerfleet estimate`` (every run's evaluations), modeled ones from
``simulations/devicemodel/learning_curves.py``.

**Learning curves CSV** (``<trace>.curves.csv`` beside the trace ``<trace>.csv``): one row per
evaluation, ``batch_size`` (int), ``seed`` (int), ``samples`` (int, from the shipped weights),
``accuracy`` (0..1); optional ``b_noise`` and ``b_noise_se``: the gradient noise scale the
training steps showed at that evaluation and the standard error of its log
(``fleet.agent.learning.noise_scale.NoiseTracker``; empty where not yet known). ``#`` comment lines
allowed (``target_accuracy=...`` names the target the runs stopped at: an accuracy in (0, 1],
the same as its trace's ``target_accuracy`` column). Rows of one (batch size, seed) are one run,
in increasing samples.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency, comment_target
from fleet.method.profile_io import ProfileFormatError, atomic_write_text, read_table

REQUIRED = ("batch_size", "seed", "samples", "accuracy")
NOISE = ("b_noise", "b_noise_se")
SUFFIX = ".curves.csv"


@dataclass
class Curves:
    """Recorded evaluations: {(batch size, seed): [(samples, accuracy), ...]}."""

    runs: dict[tuple[int, int], list[tuple[float, float]]]
    source: str = "<memory>"
    target: float | None = None  # the accuracy the runs stopped at, when the header says
    # {(batch size, seed): [(samples, b_noise, se of its log), ...]} where the file has them
    noise: dict[tuple[int, int], list[tuple[float, float, float]]] = field(default_factory=dict)

    def batch_sizes(self) -> list[int]:
        return sorted({b for b, _ in self.runs})

    def seeds(self, batch_size: int) -> list[int]:
        return sorted(s for b, s in self.runs if b == batch_size)

    def reached_at(self, batch_size: int, seed: int, target: float) -> float:
        """The first evaluation at or above ``target`` (nan: never)."""
        for s, a in self.runs.get((batch_size, seed), []):
            if a >= target:
                return s
        return math.nan


@dataclass(frozen=True)
class CurveTrace:
    """What a replay device sees at one batch size: the curve it reads its evaluations from,
    stretched so that its first evaluation at the target falls at ``samples``, the trace's
    samples-to-target (progress is a fraction of it, as on the virtual clock)."""

    points: tuple[tuple[float, float], ...]  # (fraction of samples-to-target, accuracy)
    samples: float
    every: float  # the recorded evaluation cadence, in samples at this batch size
    noise: tuple[tuple[float, float, float], ...] = ()  # (fraction, b_noise, se of its log)

    def noise_at(self, done: float) -> tuple[float, float] | None:
        """The noise scale the training steps showed by ``done`` (the last reading at or
        before it), with its standard error; None before the first."""
        got = None
        for x, b, se in self.noise:
            if x > done:
                break
            got = (b, se)
        return got

    def accuracy_at(self, done: float) -> float:
        """The accuracy an evaluation reports at ``done`` (fraction of the target reached):
        the recorded evaluations interpolated linearly, the last one held beyond it."""
        pts = self.points
        if done <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if done <= x1:
                return y0 + (y1 - y0) * (done - x0) / (x1 - x0) if x1 > x0 else y1
        return pts[-1][1]


@dataclass
class TraceCurves:
    """Per batch size, the curve a replay device reads (one seed of the recording)."""

    by_batch: dict[int, CurveTrace] = field(default_factory=dict)
    source: str = ""


def trace_curves(
    curves: Curves, samples: dict[int, float], target: float, seed: int = 0
) -> TraceCurves:
    """The curves a replay device of a trace reads: for every batch size the trace reached, the
    recorded run of ``seed`` (the first seed when that one is missing), its samples axis scaled
    so that it meets ``target`` at the trace's count ``samples[b]``. A run that never met the
    target is not used."""
    out = TraceCurves(source=curves.source)
    for b in curves.batch_sizes():
        n = samples.get(b, math.nan)
        if not (n > 0 and math.isfinite(n)):
            continue
        seeds = curves.seeds(b)
        pick = seed if seed in seeds else (seeds[0] if seeds else None)
        if pick is None:
            continue
        hit = curves.reached_at(b, pick, target)
        if not (hit > 0):
            continue
        pts = curves.runs[(b, pick)]
        gaps = sorted(y[0] - x[0] for x, y in zip(pts, pts[1:], strict=False) if y[0] > x[0])
        every = gaps[len(gaps) // 2] if gaps else hit
        noise = tuple((s / hit, v, se) for s, v, se in curves.noise.get((b, pick), []))
        out.by_batch[b] = CurveTrace(
            tuple((s / hit, a) for s, a in pts), float(n), every * n / hit, noise
        )
    return out


def warm_noise_scale(curves: Curves, lo: float = 0.1, hi: float = 0.5) -> float | None:
    """The noise scale the training steps showed once training was under way: per run, the
    median of its finite readings between ``lo`` and ``hi`` of its samples-to-target, then the
    median over runs (None: no run recorded one). Why a window: the first steps of a new task
    read a tiny, misleading noise scale, and near the target it drifts up."""
    target = curves.target
    per_run = []
    for (b, s), pts in curves.noise.items():
        n = curves.reached_at(b, s, target) if target is not None else math.nan
        vals = sorted(v for x, v, _ in pts if n > 0 and lo * n <= x <= hi * n and math.isfinite(v))
        if vals:
            per_run.append(vals[len(vals) // 2])
    if not per_run:
        return None
    per_run.sort()
    return per_run[len(per_run) // 2]


def noise_law_error(reached: dict[int, float], curves: Curves) -> float | None:
    """RMS of ``log(law / measured)`` over the batch sizes, for ``N(b) / N(max b)``: how far
    the noise scale's law (``efficiency_learner.shape_from_noise`` at the warm noise scale)
    misses the measured shape of the very runs it was read from (None: no readings). Written
    into an efficiency file as ``noise_law_err``, it tells a device how far to trust the law
    for this model and optimizer (``EfficiencyLearner(law_err=...)``)."""
    from fleet.agent.learning.efficiency_learner import shape_from_noise

    bn = warm_noise_scale(curves)
    ok = {b: n for b, n in reached.items() if n > 0 and math.isfinite(n)}
    if bn is None or len(ok) < 2:
        return None
    law = shape_from_noise(bn, sorted(ok))
    if law is None:
        return None
    top = ok[max(ok)]
    errs = [math.log(law[b] / (n / top)) for b, n in ok.items()]
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def curves_path(trace_path: str | Path) -> Path:
    """Where a trace's curves live: ``X.csv`` -> ``X.curves.csv``."""
    p = Path(trace_path)
    return p.with_name(
        p.name[: -len(".csv")] + SUFFIX if p.name.endswith(".csv") else p.name + SUFFIX
    )


def load_curves(path: str | Path) -> Curves:
    """Read and check a learning-curves CSV; every problem is one InputError naming the file,
    line and field."""
    path = str(path)
    try:
        header, rows, comments = read_table(path, "learning curves CSV", REQUIRED, REQUIRED + NOISE)
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(REQUIRED)}"
        )
    runs: dict[tuple[int, int], list[tuple[float, float]]] = {}
    noise: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
    for lineno, row in rows:
        b = _number(path, lineno, "batch_size", row["batch_size"], integer=True, low=1)
        seed = _number(path, lineno, "seed", row["seed"], integer=True, low=0)
        s = _number(path, lineno, "samples", row["samples"], integer=False, low=0)
        a = _number(path, lineno, "accuracy", row["accuracy"], integer=False, low=0, high=1)
        run = runs.setdefault((int(b), int(seed)), [])
        if run and s <= run[-1][0]:
            raise InputError(
                f"{path}: line {lineno}: samples={row['samples']} for batch {int(b)} seed "
                f"{int(seed)} does not increase; expected one run's evaluations in order"
            )
        run.append((s, a))
        raw = row.get("b_noise") or ""
        if raw:
            v = _number(path, lineno, "b_noise", raw, integer=False, low=0, high=math.inf)
            se = _number(path, lineno, "b_noise_se", row.get("b_noise_se") or "inf",
                         integer=False, low=0, high=math.inf)  # fmt: skip
            noise.setdefault((int(b), int(seed)), []).append((s, v, se))
    if not runs:
        raise InputError(f"{path}: no rows")
    return Curves(runs, path, comment_target(path, comments), noise)


def agreed_target(curves: Curves, trace: Efficiency) -> float | None:
    """The target a trace's curves are read at: the one both files state (None: neither does).

    The curves' comment is where each recorded run is taken to meet the target (``trace_curves``
    scales it to the trace's count there); the trace's column is what its counts are for and
    what a replayed device reports reaching. Curves of another target would move every
    evaluation a learning device sees, so two targets that differ are refused, not chosen
    between."""
    mine, theirs = curves.target, trace.target_accuracy
    if mine is not None and theirs is not None and mine != theirs:
        raise InputError(
            f"{curves.source}: comment line target_accuracy={mine:g} differs from "
            f"target_accuracy={theirs:g} of its trace {trace.source}; expected the curves "
            "recorded to the trace's target"
        )
    return mine if mine is not None else theirs


def _number(
    path: str, lineno: int, col: str, raw: str, *, integer: bool, low: float, high: float = 1e15
) -> float:
    shown = repr(raw if len(raw) <= 40 else raw[:40] + "...")
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"{path}: line {lineno}: {col}={shown} is not a number") from None
    if math.isnan(v) or v < low or v > high or (integer and v != int(v)):
        kind = "an integer" if integer else "a number"
        raise InputError(
            f"{path}: line {lineno}: {col}={shown} must be {kind} in [{low:g}, {high:g}]"
        )
    return v


def save_curves(curves: Curves, path: str | Path, comments: list[str] | None = None) -> None:
    """Write the learning-curves CSV atomically."""
    buf = io.StringIO()
    for line in comments or []:
        buf.write(f"# {line}\n")
    if curves.target is not None:
        buf.write(f"# target_accuracy={curves.target:g}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REQUIRED + (NOISE if curves.noise else ()))
    for (b, seed), pts in sorted(curves.runs.items()):
        readings = {s: (v, se) for s, v, se in curves.noise.get((b, seed), [])}
        for s, a in pts:
            row = [b, seed, f"{s:.10g}", f"{a:.4f}"]
            if curves.noise:
                v, se = readings.get(s, (math.nan, math.nan))
                known = not math.isnan(v)  # nan: no variance measured, no reading
                row += [f"{v:.6g}" if known else "", f"{se:.4g}" if known else ""]
            w.writerow(row)
    atomic_write_text(str(path), buf.getvalue())
