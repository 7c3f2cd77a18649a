"""Drift: notice when the board stops matching its profile, and refresh the profile (issue 11).

A LUT is measured once; a board warms up, ages, gets another power supply or kernel, and the
step time or the peak power at the locked point moves away from what the LUT says. The closed
loop feeds :class:`DriftDetector` every training step (its measured step time and the highest
power sample seen during it) at the locked (batch size, knob). A deviation counts only when it
*persists*: the median over a window of steps (or seconds) is beyond the tolerance (defaults
10 % time, 8 % power), so one slow step (a GC pause, a page fault) never fires. Each persistent
episode at a point gives exactly one event; the point re-arms when its expectation is corrected
(:meth:`DriftDetector.set_expected`, :meth:`DriftDetector.set_rows`) or the deviation ends.

At the next segment boundary the device

1. re-probes a few neighbours of the drifted point (:func:`pick_reprobes`; never a point the
   drift says may now be over the budget),
2. refreshes the table (:func:`refresh_rows`): the drifted points become measured rows with the
   values the window saw, the re-probes replace theirs, and the deviation is carried over the
   rest of the table by ``deviation.carry_deviation`` (paper §4.1: interpolate the deviations
   across operating points); every row it moved says ``source=predicted``,
3. asks :func:`choice_changes` whether the selection moves, and
4. writes the refreshed profile atomically (:func:`write_refreshed`, a ``#`` note says when and
   why).

Pure apart from the file write; Python 3.6, stdlib + numpy (through ``deviation``). See
docs/architecture.md (closed loop, drift).
"""

import datetime
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from fleet.agent.measure.deviation import carry_deviation
from fleet.method.profile_io import MEASURED, VIRTUAL, cell_number, read_rows, write_rows

Row = Dict[str, Any]
Key = Tuple[int, float]

DEFAULT_TIME_TOL = 0.10
DEFAULT_POWER_TOL = 0.08
DEFAULT_WINDOW_STEPS = 5
#: A deviation is judged beyond the larger of the tolerance and this many times the spread the
#: profile measured at the point (``time_cv`` of its steps, ``peak_spread_w`` of its peak): what
#: the point itself showed as noise is not drift.
NOISE_Z = 3.0
KIND_TIME = "time"
KIND_POWER = "power"
KIND_BOTH = "both"


def _key(batch_size: Any, knob: Any) -> Key:
    return int(float(batch_size)), float(knob)


def _ok(row: Row) -> bool:
    return str(row.get("status") or "ok").strip().lower() == "ok"


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def _clean(f: float) -> Any:
    return int(f) if f == int(f) else f


def noise_from_rows(rows: Sequence[Row]) -> Dict[Key, Tuple[float, float]]:
    """{(batch, knob): (relative step-time spread, relative peak spread)} the profile measured
    (its ``time_cv`` and ``peak_spread_w`` / ``peak_power_w`` columns; 0 where absent)."""
    out = {}  # type: Dict[Key, Tuple[float, float]]
    for r in rows:
        cv = cell_number(r.get("time_cv"))
        spread, peak = cell_number(r.get("peak_spread_w")), cell_number(r.get("peak_power_w"))
        rel = spread / peak if spread is not None and peak else None
        if (cv is not None and cv > 0) or (rel is not None and rel > 0):
            out[_key(r["batch_size"], r["freq_mhz"])] = (max(cv or 0.0, 0.0), max(rel or 0.0, 0.0))
    return out


def expected_from_rows(rows: Sequence[Row]) -> Dict[Key, Tuple[float, Optional[float]]]:
    """{(batch, knob): (time_per_batch_s, peak_power_w or None)} of the ok rows with a time."""
    out = {}  # type: Dict[Key, Tuple[float, Optional[float]]]
    for r in rows:
        if not _ok(r):
            continue
        t = cell_number(r.get("time_per_batch_s"))
        if t is None or t <= 0:
            continue
        peak = cell_number(r.get("peak_power_w"))
        out[_key(r["batch_size"], r["freq_mhz"])] = (t, peak if peak and peak > 0 else None)
    return out


class DriftDetector(object):
    """Compares each training step with the LUT; one event per persistent deviation at a point.

    ``window_steps``: the median is taken over the last N observations at the current point (no
    verdict before N). ``window_s``: if given, the window is instead the observations of the
    last T seconds, and a verdict needs the point to have run for T seconds and the window to
    hold at least ``min_steps`` training steps (an observation stands for ``steps`` of them: the
    closed loop feeds units of steps, ``driftwatch.py``) in at least 3 observations.
    ``skip_steps``: observations ignored after every change of point (the first step at a new
    batch size pays allocation and kernel selection). Changing point starts a new window.

    The verdict is against the noise the profile measured: a deviation counts beyond
    ``max(tolerance, NOISE_Z x the point's spread)`` (``noise_from_rows``); a slower step
    beyond that and ``slack_s`` seconds more: the per-step host work of a training loop
    (indexing the data, the loop's hooks) that a profile's fixed batch does not have, which
    matters only on millisecond steps.
    """

    def __init__(
        self,
        rows: Sequence[Row],
        time_tol: float = DEFAULT_TIME_TOL,
        power_tol: float = DEFAULT_POWER_TOL,
        window_steps: int = DEFAULT_WINDOW_STEPS,
        window_s: Optional[float] = None,
        min_steps: int = 3,
        skip_steps: int = 1,
        slack_s: float = 0.0,
    ) -> None:
        if not time_tol > 0 or not power_tol > 0:
            raise ValueError(
                "drift tolerances must be > 0, got {} / {}".format(time_tol, power_tol)
            )
        if int(window_steps) < 1 or int(min_steps) < 1:
            raise ValueError("drift window needs at least 1 step")
        if window_s is not None and not float(window_s) > 0:
            raise ValueError("drift window_s must be > 0 s, got {}".format(window_s))
        self.time_tol = float(time_tol)
        self.power_tol = float(power_tol)
        self.window_steps = int(window_steps)
        self.window_s = None if window_s is None else float(window_s)
        self.min_steps = int(min_steps)
        self.skip_steps = max(0, int(skip_steps))
        self.slack_s = max(0.0, float(slack_s))
        self.expected = expected_from_rows(rows)
        self.noise = noise_from_rows(rows)
        self.events = []  # type: List[Dict[str, Any]]
        self._fired = {}  # type: Dict[Key, str]  # point -> kinds of its open episode
        self._point = None  # type: Optional[Key]
        self._seen = 0  # steps at the current point, skipped ones included
        self._since = 0.0  # t_s of the first counted step at the current point
        self._window = []  # type: List[Tuple[float, float, Optional[float], Optional[float], int]]

    # -- the LUT changes ---------------------------------------------------------------------
    def set_expected(
        self, batch_size: int, knob: float, time_s: float, peak_w: Optional[float] = None
    ) -> None:
        """The point was corrected (refresh): compare against the new values, re-arm it."""
        key = _key(batch_size, knob)
        self.expected[key] = (float(time_s), peak_w)
        self._fired.pop(key, None)

    def set_rows(self, rows: Sequence[Row]) -> None:
        """A refreshed table: new expectations everywhere; points whose values changed re-arm."""
        new = expected_from_rows(rows)
        for key in list(self._fired):
            if new.get(key) != self.expected.get(key):
                del self._fired[key]
        self.expected = new
        self.noise.update(noise_from_rows(rows))

    # -- every step --------------------------------------------------------------------------
    def observe(
        self,
        t_s: float,
        batch_size: int,
        knob: float,
        step_time_s: float,
        peak_w: Optional[float] = None,
        mean_w: Optional[float] = None,
        steps: int = 1,
    ) -> Optional[Dict[str, Any]]:
        """Feed one observation; returns the drift event when it completes a persistent episode.

        ``step_time_s``: its (mean) step time; ``peak_w``: the highest power (the budget
        statistic) seen during it (None: no reading, time only); ``mean_w``: its mean power, if
        known (only carried into the event); ``steps``: the training steps it stands for.
        """
        key = _key(batch_size, knob)
        if key != self._point:
            self._point, self._seen, self._window = key, 0, []
        self._seen += 1
        if self._seen <= self.skip_steps:
            return None
        t = cell_number(step_time_s)
        if t is None or t <= 0:
            return None
        if not self._window:
            self._since = float(t_s)
        self._window.append(
            (float(t_s), t, cell_number(peak_w), cell_number(mean_w), max(1, int(steps)))
        )
        if not self._full(float(t_s)):
            return None
        exp = self.expected.get(key)
        if exp is None:
            return None
        times = [w[1] for w in self._window]
        peaks = [w[2] for w in self._window if w[2] is not None]
        means = [w[3] for w in self._window if w[3] is not None]
        m_time = _median(times)
        m_peak = _median(peaks) if len(peaks) * 2 > len(self._window) else None
        kinds = []
        cv, spread = self.noise.get(key, (0.0, 0.0))
        time_tol = max(self.time_tol, NOISE_Z * cv)
        slower = m_time - exp[0] > time_tol * exp[0] + self.slack_s
        if slower or m_time - exp[0] < -time_tol * exp[0]:
            kinds.append(KIND_TIME)
        power_tol = max(self.power_tol, NOISE_Z * spread)
        if m_peak is not None and exp[1] is not None and abs(m_peak / exp[1] - 1) > power_tol:
            kinds.append(KIND_POWER)
        if not kinds:
            self._fired.pop(key, None)  # the episode (if any) is over: re-arm
            return None
        if key in self._fired:
            return None
        kind = KIND_BOTH if len(kinds) == 2 else kinds[0]
        self._fired[key] = kind
        event = {
            "t_s": float(t_s),
            "batch_size": key[0],
            "freq_mhz": _clean(key[1]),
            "expected_time_s": exp[0],
            "measured_time_s": m_time,
            "expected_peak_w": exp[1],
            "measured_peak_w": m_peak,
            "measured_mean_w": _median(means) if means else None,
            "kind": kind,
            "steps": sum(w[4] for w in self._window),
        }  # type: Dict[str, Any]
        self.events.append(event)
        return event

    def _full(self, now: float) -> bool:
        if self.window_s is None:
            if len(self._window) > self.window_steps:
                del self._window[: len(self._window) - self.window_steps]
            return len(self._window) >= self.window_steps

        def steps(window: Any) -> int:
            return sum(w[4] for w in window)

        while (
            len(self._window) > 3
            and self._window[0][0] < now - self.window_s
            and steps(self._window[1:]) >= self.min_steps
        ):
            del self._window[0]
        return (
            now - self._since >= self.window_s
            and steps(self._window) >= self.min_steps
            and len(self._window) >= min(3, self.min_steps)
        )


# --------------------------------------------------------------------------------------------
# The refresh at the next segment boundary


def corrected_row(old: Optional[Row], event: Dict[str, Any]) -> Row:
    """The measured row a drift event stands for (other columns kept from the old row).

    Mean power: the window's measured mean if the loop fed one, else the old mean scaled by the
    peak's measured/expected ratio (both move with the same voltage and temperature).
    """
    row = dict(old or {})
    row["batch_size"] = int(event["batch_size"])
    row["freq_mhz"] = event["freq_mhz"]
    row["time_per_batch_s"] = float(event["measured_time_s"])
    peak, peak_exp = (
        cell_number(event.get("measured_peak_w")),
        cell_number(event.get("expected_peak_w")),
    )
    if peak is not None:
        row["peak_power_w"] = peak
    mean = cell_number(event.get("measured_mean_w"))
    old_mean = cell_number(row.get("mean_power_w"))
    if mean is not None:
        row["mean_power_w"] = mean
    elif old_mean is not None and peak is not None and peak_exp:
        row["mean_power_w"] = old_mean * peak / peak_exp
    row["status"] = "ok"
    row["source"] = MEASURED
    return row


def pick_reprobes(
    rows: Sequence[Row],
    events: Sequence[Dict[str, Any]],
    k: int = 4,
    budget_w: Optional[float] = None,
    margin: float = 0.03,
) -> List[Key]:
    """Which neighbours of the drifted points to re-measure, at most ``k``, in priority order.

    For each drifted point, round-robin over events: the same batch size at the next lower
    knob, at the next higher knob, then the next smaller and the next larger batch size at the
    same knob. Only ok rows of the table; never a drifted point itself; with ``budget_w``, never
    a point whose LUT peak scaled by that event's power drift, plus ``margin`` (the drift is a
    median of noisy steps), would exceed the budget: a probe must not break the budget the run
    is under.
    """
    table = {}  # type: Dict[Key, Row]
    for r in rows:
        if _ok(r):
            table[_key(r["batch_size"], r["freq_mhz"])] = r
    drifted = set(_key(e["batch_size"], e["freq_mhz"]) for e in events)
    lists = []  # type: List[List[Key]]
    for e in events:
        b, f = _key(e["batch_size"], e["freq_mhz"])
        knobs = sorted(set(kk for (bb, kk) in table if bb == b) | {f})
        batches = sorted(set(bb for (bb, kk) in table if kk == f) | {b})
        i, j = knobs.index(f), batches.index(b)
        cand = []
        if i > 0:
            cand.append((b, knobs[i - 1]))
        if i + 1 < len(knobs):
            cand.append((b, knobs[i + 1]))
        if j > 0:
            cand.append((batches[j - 1], f))
        if j + 1 < len(batches):
            cand.append((batches[j + 1], f))
        ratio = 1.0
        p_m, p_e = cell_number(e.get("measured_peak_w")), cell_number(e.get("expected_peak_w"))
        if p_m is not None and p_e:
            ratio = max(1.0, p_m / p_e)
        safe = []
        for key in cand:
            peak = cell_number(table[key].get("peak_power_w"))
            if budget_w is not None and (peak is None or peak * ratio * (1 + margin) > budget_w):
                continue
            safe.append(key)
        lists.append(safe)
    out = []  # type: List[Key]
    depth = 0
    while len(out) < k and any(depth < len(c) for c in lists):
        for c in lists:
            if depth < len(c) and c[depth] not in drifted and c[depth] not in out:
                out.append(c[depth])
                if len(out) >= k:
                    break
        depth += 1
    return out


def refresh_rows(
    rows: Sequence[Row],
    events: Sequence[Dict[str, Any]],
    probes: Sequence[Row] = (),
    power: float = 2.0,
) -> List[Row]:
    """The table after drift: corrected points and re-probes measured, the rest carried.

    ``events``: drift events (the last one per point wins); ``probes``: measured rows of
    re-probed neighbours. The deviation (measured/old, per column) is spread over every other
    row by ``carry_deviation`` with inverse-distance weights of power ``power`` on (batch rank,
    knob rank); rows it moved become ``source=predicted``.
    """
    table = {}  # type: Dict[Key, Row]
    for r in rows:
        table[_key(r["batch_size"], r["freq_mhz"])] = r
    updates = {}  # type: Dict[Key, Row]
    for e in events:
        key = _key(e["batch_size"], e["freq_mhz"])
        updates[key] = corrected_row(table.get(key), e)
    for p in probes:
        key = _key(p["batch_size"], p["freq_mhz"])
        row = dict(table.get(key) or {})
        row.update(p)
        row["source"] = VIRTUAL if p.get("source") == VIRTUAL else MEASURED
        updates[key] = row
    if any(r.get("source") == VIRTUAL for r in rows):
        for row in updates.values():  # a virtual board re-measured it: still the host's times
            row["source"] = VIRTUAL
    if not updates:
        return [dict(r) for r in rows]
    out = carry_deviation(rows, [updates[k] for k in sorted(updates)], power, True)
    return [_mean_under_peak(r) for r in out]


def _mean_under_peak(row: Row) -> Row:
    """A row whose mean power is not above its peak.

    A peak is the highest sample and a mean the mean of the same samples, so a measured row has
    mean <= peak; but the refresh takes medians of each column over a window and carries each
    column's deviation separately, and the two can cross by noise (1.92208 vs 1.92206 W was
    seen). The profile contract refuses such a row, so the refreshed file would not load.
    """
    peak, mean = cell_number(row.get("peak_power_w")), cell_number(row.get("mean_power_w"))
    if peak is not None and mean is not None and mean > peak:
        row = dict(row)
        row["mean_power_w"] = row["peak_power_w"]
    return row


def _as_key(choice: Any) -> Optional[Key]:
    if choice is None:
        return None
    if isinstance(choice, dict):
        return _key(choice["batch_size"], choice["freq_mhz"])
    if hasattr(choice, "batch_size"):
        return _key(choice.batch_size, choice.freq_mhz)
    return _key(choice[0], choice[1])


def choice_changes(
    before: Sequence[Row], after: Sequence[Row], choose: Callable[[Sequence[Row]], Any]
) -> Tuple[bool, Optional[Key], Optional[Key]]:
    """(changed, old, new): run ``choose`` (rows -> a point or None) on both tables.

    ``choose`` is the selection the loop uses (e.g. eq. 4 on the LUT at the current budget);
    it may return a (batch, knob) pair, a dict or an object with ``batch_size``/``freq_mhz``,
    or None when nothing fits.
    """
    old, new = _as_key(choose(before)), _as_key(choose(after))
    return old != new, old, new


def refresh_comments(
    comments: Sequence[str],
    events: Sequence[Dict[str, Any]],
    probes: Sequence[Row] = (),
    when: Optional[str] = None,
) -> List[str]:
    """Header lines of a refreshed profile: the old ones (``source=`` becomes ``refreshed``;
    ``source=virtual`` stays: a virtual board's refresh is still the host's times) plus one line
    saying when and why, and one per drift event."""
    if when is None:
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        when = now.isoformat().replace("+00:00", "Z")
    out = []
    for line in comments:
        keep = line.strip() == "source=virtual" or not line.strip().startswith("source=")
        out.append(line if keep else "source=refreshed")
    if not any(line.startswith("source=") for line in out):
        out.append("source=refreshed")
    out.append(
        "refreshed={} reason=drift events={} reprobed={} (drifted and re-probed rows are "
        "source=measured; rows moved by carry_deviation are source=predicted)".format(
            when,
            len(events),
            ",".join(
                "{}@{:g}".format(int(float(p["batch_size"])), float(p["freq_mhz"])) for p in probes
            )
            or "none",
        )
    )
    for e in events:
        out.append(
            "drift {}@{:g} t_s={:.1f} kind={} time_s {:.6g}->{:.6g} peak_w {}->{}".format(
                int(e["batch_size"]),
                float(e["freq_mhz"]),
                float(e["t_s"]),
                e["kind"],
                float(e["expected_time_s"]),
                float(e["measured_time_s"]),
                _fmt_w(e.get("expected_peak_w")),
                _fmt_w(e.get("measured_peak_w")),
            )
        )
    return out


def _fmt_w(value: Any) -> str:
    v = cell_number(value)
    return "n/a" if v is None else "{:.4g}".format(v)


def write_refreshed(
    path: str,
    rows: Sequence[Row],
    comments: Sequence[str],
    events: Sequence[Dict[str, Any]],
    probes: Sequence[Row] = (),
    when: Optional[str] = None,
) -> List[str]:
    """Write the refreshed profile atomically (``profile_io.write_rows``); returns its header."""
    header = refresh_comments(comments, events, probes, when)
    write_rows(path, rows, header)
    return header


def read_profile(path: str) -> Tuple[List[Row], List[str]]:
    """(rows, comment lines) of a profile CSV, for refreshing it in place."""
    _header, numbered, comments = read_rows(path)
    return [row for _lineno, row in numbered], comments
