"""Trust a profile before training on it: fill coverage gaps and verify predicted choices.

The device round (``fleet.rounds.device_round.run_device``) selects from a profile file. Two things
can make that choice wrong without anyone noticing (issue 11; docs/architecture.md, profile
lifecycle):

- **coverage**: the file lacks grid points that could fit the budget and beat the choice (a
  staircase made for another budget, a sparse file): ``fleet.trust.coverage.missing_points``;
- **prediction**: the choice is a ``source=predicted`` row (``powerfleet profile --predict``),
  a model's guess of time and power.

On a runner that can measure (it has ``probe(run, batch_size, freq_mhz) -> row``, e.g. the
agent runner on a board), the missing points are profiled and the choice is verified with
``fleet.trust.verify.select_verified`` (probe the predicted choice, correct, select again); the
corrected table is written back to the profile file so the next round starts from it. On a
runner that cannot (the virtual clock, host training), a coverage gap is the row's error
(``CoverageError``: one line naming the budget the profile covers) and a predicted choice is
said in the row's message.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fleet.common.errors import InfeasibleError, InputError
from fleet.core.choice import Choice, align
from fleet.core.efficiency import Efficiency
from fleet.core.profile import Profile, load_profile
from fleet.core.selection import SelectionIndex
from fleet.method.profile_io import ProfileFormatError, read_rows, write_rows
from fleet.trust.coverage import Coverage, check_coverage, missing_points, read_coverage
from fleet.trust.verify import probed, profile_from_rows, select_verified

MAX_FILL = 24  # missing points profiled in one round (a third of a Nano grid); more: re-profile
FILL_STEP = 6  # points measured before the gaps are computed again (a win prunes the rest)
Measure = Callable[[int, float], dict[str, Any]]


@dataclass
class Trusted:
    """The inputs the round goes on with (unchanged when there was nothing to do)."""

    profile: Profile  # aligned with the shipped efficiency
    index: SelectionIndex
    first: Choice | None
    note: str = ""
    probes: int = 0


@lru_cache(maxsize=256)
def _coverage(path: str, mtime_ns: int, size: int) -> tuple[Coverage, bool]:
    cov = read_coverage(path)
    return cov, bool(cov.predicted or cov.lacking())


def coverage_of(path: str) -> Coverage | None:
    """The file's coverage (cached per file version: thousands of devices share a profile)."""
    got = _coverage_entry(path)
    return None if got is None else got[0]


def _coverage_entry(path: str) -> tuple[Coverage, bool] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _coverage(path, st.st_mtime_ns, st.st_size)


def _budget_label(budget_w: float | None) -> str:
    return "no budget" if budget_w is None else f"{budget_w:g} W"


def trust(
    profile: Profile,
    shipped: Efficiency,
    index: SelectionIndex,
    first: Choice | None,
    budget_w: float | None,
    objective: str,
    measure: Measure | None,
    context: dict[str, Any] | None = None,
) -> Trusted:
    """Check (and on a measuring runner, repair) the choice ``first`` made from ``profile``.

    ``profile`` and ``shipped`` are aligned; ``profile.source`` is the file. Raises
    ``CoverageError`` (an ``InputError``) when points are missing and nothing can measure them.
    """
    unchanged = Trusted(profile, index, first)
    path = profile.source
    entry = _coverage_entry(path) if objective in ("time", "energy") else None
    if entry is None or not entry[1]:  # a complete, measured grid: nothing to check
        return unchanged
    cov = entry[0]
    gaps = missing_points(profile, cov, shipped, budget_w, first)
    predicted = first is not None and cov.is_predicted(first.batch_size, first.freq_mhz)
    if not gaps and not predicted:
        return unchanged
    if measure is None:
        check_coverage(profile, cov, shipped, budget_w, first)
        assert first is not None  # no gap (check_coverage raised): the choice is predicted
        return Trusted(
            profile, index, first, f"choice {first.batch_size}@{first.freq_mhz:g} is a "
            "predicted point (not verified: this runner cannot measure)",
        )  # fmt: skip
    try:
        _header, numbered, comments = read_rows(path)
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    rows = [dict(r) for _, r in numbered]
    filled = _fill_gaps(rows, cov, gaps, shipped, budget_w, objective, measure)
    try:
        verified = select_verified(rows, shipped, budget_w, measure, objective)
        rows, corrections = verified.rows, verified.corrections
    except InfeasibleError:
        corrections = []  # nothing fits even after probing: the re-selection below says so
    comments = [c for c in comments if not c.startswith("verified=")]
    comments.append(
        f"verified=at {_budget_label(budget_w)}: {len(filled)} missing point(s) profiled, "
        f"{len(corrections)} predicted point(s) probed"
    )
    write_rows(path, rows, comments)
    fresh, _, _ = align(load_profile(path), shipped)
    new_index = SelectionIndex(fresh)
    try:
        new_first: Choice | None = new_index.select(shipped, budget_w, objective, **(context or {}))
    except InfeasibleError:
        new_first = None
    if len(filled) >= MAX_FILL:
        cov2 = coverage_of(path)
        if cov2 is not None:
            check_coverage(fresh, cov2, shipped, budget_w, new_first)
    fixed = [c for c in corrections if c.reason != "ok"]
    note = (
        f"profile checked at {_budget_label(budget_w)}: {len(filled)} missing point(s) profiled, "
        f"{len(corrections)} predicted point(s) probed ({len(fixed)} corrected)"
    )
    return Trusted(fresh, new_index, new_first, note, len(filled) + len(corrections))


def _fill_gaps(
    rows: list[dict[str, Any]],
    cov: Coverage,
    gaps: list[tuple[int, float]],
    shipped: Efficiency,
    budget_w: float | None,
    objective: str,
    measure: Measure,
) -> list[tuple[int, float]]:
    """Measure missing points a few at a time, recomputing the gaps with each new choice (a
    measured winner makes many gaps unable to beat it), up to ``MAX_FILL`` points."""
    filled: list[tuple[int, float]] = []
    present = set(cov.present)
    while gaps and len(filled) < MAX_FILL:
        step = gaps[: min(FILL_STEP, MAX_FILL - len(filled))]
        filled += _fill(rows, step, measure)
        present.update(step)
        now = Coverage(cov.source, cov.batch_sizes, cov.knobs, present, set(), cov.plan, None)
        prof, eff, _ = align(profile_from_rows(rows, cov.source), shipped)
        try:
            choice: Choice | None = SelectionIndex(prof).select(eff, budget_w, objective)
        except InfeasibleError:
            choice = None
        gaps = missing_points(prof, now, eff, budget_w, choice)
    return filled


def _fill(rows: list[dict[str, Any]], keys: list[tuple[int, float]], measure: Measure) -> list:
    """Measure each missing point and put it into ``rows`` (replacing any row at that point)."""
    done = []
    for b, f in keys:
        got = probed(measure(b, f))
        for i, r in enumerate(rows):
            try:
                same = int(float(r["batch_size"])) == b and math.isclose(float(r["freq_mhz"]), f)
            except (KeyError, ValueError):
                same = False
            if same:
                rows[i] = got
                break
        else:
            rows.append(got)
        done.append((b, f))
    return done
