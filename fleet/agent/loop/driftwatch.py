"""Drift during training: what the closed loop feeds the drift detector, and the refresh it runs.

Why a module of its own: ``closedloop.py`` follows the budget and guards the rail; this part
compares what the board does at the locked point with what the LUT says (``drift.py``) and
keeps the LUT true while training goes on (issue 11, docs/architecture.md: profile lifecycle).

- **Observation units.** A training step can be far shorter than the power sampling period
  (a small CNN on a CPU: milliseconds; the sampler: 50 ms), so the detector is fed *units*:
  consecutive steps at one point until at least one power sample arrived during them (without
  power readings: until one sampling period passed). A unit's step time is its mean step time,
  its peak the highest sample seen during its steps, its mean the mean of those samples. Units
  that start before the clock settled after a lock are dropped; evaluations between training
  stretches never count (only the time between a step's start and its end does).
- **Refresh at the next segment boundary.** A drift event schedules a refresh; when the loop
  next opens a segment (a budget change, a batch switch, a guard step-down) the watch picks the
  drifted points' neighbours (``drift.pick_reprobes``, never one the drift says may now be over
  the running budget, nor one the guard ruled out), runs each for a few units of real training
  (no step is wasted: the samples count toward the target), refreshes the table
  (``drift.refresh_rows``), writes the refreshed profile (``drift.write_refreshed``) and the
  loop re-selects on it. A run that ends with a refresh still due refreshes from the events
  alone (no probes), so the profile the device hands back is never the stale one.

Python 3.6 compatible, stdlib only.
"""

import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fleet.agent.measure.drift import DriftDetector, pick_reprobes, refresh_comments, refresh_rows

Row = Dict[str, Any]
Key = Tuple[int, float]

#: The loop judges drift over the trailing second and at least 20 steps, whichever is longer:
#: on millisecond steps a 5-unit window was 0.25 s and fired on noise (H100, small_cnn b=64:
#: 2 events in a 15 s run of 2-3 ms steps); a second holds 20 power samples at 20 Hz.
DEFAULT_WINDOW_S = 1.0
DEFAULT_MIN_STEPS = 20
#: Per-step host work of the training loop that a profile's fixed dummy batch does not do
#: (indexing the data, the loop's hooks): on the H100 the loop's b=64 steps took 2.74-2.84 ms
#: against the profile's 2.24 ms, +0.50-0.60 ms, with no change of the board. A slower step
#: must exceed the tolerance by this much more to be drift; on a Jetson step of tens of
#: milliseconds it is a few per cent of the tolerance.
LOOP_SLACK_S = 0.001
DEFAULT_REPROBES = 4
DEFAULT_PROBE_UNITS = 3
DEFAULT_MAX_REFRESHES = 3


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def rows_from_points(points: Sequence[Any]) -> List[Row]:
    """Profile rows of LUT points (the loop was given points, not rows)."""
    out = []
    for p in points:
        out.append(
            {
                "batch_size": int(p.batch_size),
                "freq_mhz": float(p.freq_mhz),
                "time_per_batch_s": float(p.time_per_batch_s),
                # a predicted point is held to its bound, as the budget holds it
                "peak_power_w": float(p.guard_peak_w),
                "mean_power_w": float(p.mean_power_w),
                "status": "ok",
            }
        )
    return out


def _watts(w: Optional[float]) -> str:
    return "n/a" if w is None else "{:.3g} W".format(w)


def drift_text(event: Dict[str, Any]) -> str:
    """The loop's note for a drift event."""
    return "drift at {}@{:g} MHz: step {:.4g} s (LUT {:.4g} s), peak {} (LUT {})".format(
        event["batch_size"], event["freq_mhz"], event["measured_time_s"],
        event["expected_time_s"], _watts(event["measured_peak_w"]),
        _watts(event["expected_peak_w"]),
    )  # fmt: skip


def drift_fields(watch: Optional["DriftWatch"], events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The summary's drift keys: ``events`` (the run's drift events, earlier calls' first), the
    refreshes and the refreshed profile (empty without a drift watch)."""
    return {
        "drift_events": events,
        "refreshes": [dict(r) for r in watch.refreshes] if watch else [],
        "refreshed_profile": watch.out_path if watch and watch.refreshes else None,
        "refreshed_profile_csv": watch.refreshed_csv if watch else None,
    }


def render_profile(rows: Sequence[Row], comments: Sequence[str]) -> str:
    """The CSV text ``profile_io.write_rows`` writes for these rows (through a private temp dir,
    so the exact on-disk format is reused rather than re-implemented)."""
    from fleet.method.profile_io import write_rows

    tmp = tempfile.mkdtemp(prefix="powerfleet-refresh-")
    path = os.path.join(tmp, "profile.csv")
    try:
        write_rows(path, rows, comments)
        with open(path) as fh:
            return fh.read()
    finally:
        if os.path.exists(path):
            os.remove(path)
        os.rmdir(tmp)


class _Unit(object):
    """Steps at one point since the last observation, and the power samples seen during them."""

    def __init__(self, key: Key, start: float) -> None:
        self.key = key
        self.start = start
        self.steps = 0
        self.step_time = 0.0
        self.samples = []  # type: List[float]


class DriftWatch(object):
    """Feeds the detector from training steps and runs the refresh; the loop holds its lock.

    ``rows``/``comments``: the LUT as profile rows and its ``#`` header (kept in the refreshed
    file); ``out_path``: where the refreshed profile is written (None: only its text is kept,
    ``refreshed_csv``).
    """

    def __init__(
        self,
        rows: Sequence[Row],
        comments: Sequence[str] = (),
        out_path: Optional[str] = None,
        time_tol: float = 0.10,
        power_tol: float = 0.08,
        window_units: int = 5,
        hz: float = 20.0,
        window_s: Optional[float] = DEFAULT_WINDOW_S,
        min_steps: int = DEFAULT_MIN_STEPS,
        slack_s: float = LOOP_SLACK_S,
        reprobes: int = DEFAULT_REPROBES,
        probe_units: int = DEFAULT_PROBE_UNITS,
        max_refreshes: int = DEFAULT_MAX_REFRESHES,
    ) -> None:
        self.rows = [dict(r) for r in rows]
        self.comments = list(comments)
        self.out_path = out_path
        self.detector = DriftDetector(
            self.rows, time_tol=time_tol, power_tol=power_tol, window_steps=window_units,
            window_s=window_s, min_steps=min_steps, slack_s=slack_s,
        )  # fmt: skip
        self.period_s = 1.0 / float(hz)
        self.reprobes = int(reprobes)
        self.probe_units = int(probe_units)
        self.max_refreshes = int(max_refreshes)
        self.events = []  # type: List[Dict[str, Any]]  # every drift event of the run
        self.refreshes = []  # type: List[Dict[str, Any]]
        self.refreshed_csv = None  # type: Optional[str]
        self._pending = []  # type: List[Dict[str, Any]]  # events not yet refreshed
        self._due = False  # a refresh waits for the next segment boundary
        self._probes = None  # type: Optional[List[Key]]
        self._probe_rows = []  # type: List[Row]
        self._probe_seen = []  # type: List[Tuple[float, Optional[float], Optional[float]]]
        self._unit = None  # type: Optional[_Unit]
        self._step_t0 = None  # type: Optional[float]
        self._power = False

    # -- feeding --------------------------------------------------------------------------------
    def reset_unit(self) -> None:
        """The point or the clock changed: what was accumulated is not of one point."""
        self._unit = None

    def on_sample(self, watts: Optional[float]) -> None:
        if watts is None:
            return
        self._power = True
        if self._unit is not None and self._step_t0 is not None:
            self._unit.samples.append(float(watts))

    def step_started(self, t: float) -> None:
        self._step_t0 = t

    def step_done(self, t: float, key: Key, settle_until: float) -> Optional[Dict[str, Any]]:
        """One training step at ``key`` ended at ``t``; returns a new drift event, if any.

        A step that started before ``settle_until`` (the clock was still moving) is dropped."""
        t0, self._step_t0 = self._step_t0, None
        if t0 is None or t0 < settle_until:
            self._unit = None
            return None
        if self._unit is None or self._unit.key != key:
            self._unit = _Unit(key, t0)
        u = self._unit
        u.steps += 1
        u.step_time += max(0.0, t - t0)
        complete = bool(u.samples) if self._power else (t - u.start >= self.period_s)
        if not complete:
            return None
        self._unit = None
        step_s = u.step_time / u.steps
        peak = max(u.samples) if u.samples else None
        mean = sum(u.samples) / len(u.samples) if u.samples else None
        if self._probes:  # probing()
            if key == self._probes[0]:
                self._probe_seen.append((step_s, peak, mean))
            return None
        event = self.detector.observe(t, key[0], key[1], step_s, peak, mean, u.steps)
        if event is not None:
            self.events.append(event)
            if len(self.refreshes) < self.max_refreshes:
                self._pending.append(event)
                self._due = True
        return event

    # -- the refresh ----------------------------------------------------------------------------
    def due(self) -> bool:
        return self._due

    def probing(self) -> bool:
        return bool(self._probes)

    def active(self) -> bool:
        """A refresh has begun (its probes chosen): the loop hands it the next steps."""
        return self._probes is not None

    def begin(self, budget_w: Optional[float], excluded: Any, max_batch: Optional[int]) -> None:
        """At a segment boundary: choose the neighbours to re-probe under the running budget."""
        if not self._due or self._probes is not None:
            return
        picks = pick_reprobes(self.rows, self._pending, k=self.reprobes * 2, budget_w=budget_w)
        keep = [k for k in picks if k not in excluded and (max_batch is None or k[0] <= max_batch)]
        self._probes = keep[: self.reprobes]
        self._probe_rows, self._probe_seen = [], []

    def probe_point(self) -> Optional[Key]:
        """The point to run now for a re-probe (None: no probe running)."""
        while self._probes:
            if len(self._probe_seen) > self.probe_units:  # the first unit is the switch's
                seen = self._probe_seen[1:]
                b, f = self._probes.pop(0)
                peaks = [s[1] for s in seen if s[1] is not None]
                means = [s[2] for s in seen if s[2] is not None]
                row = {
                    "batch_size": b,
                    "freq_mhz": f,
                    "time_per_batch_s": _median([s[0] for s in seen]),
                    "status": "ok",
                }  # type: Row
                if peaks:
                    row["peak_power_w"] = _median(peaks)
                if means:
                    row["mean_power_w"] = _median(means)
                self._probe_rows.append(row)
                self._probe_seen = []
                continue
            return self._probes[0]
        return None

    def next_probe(self, table: Any, budget_w: Optional[float]) -> Optional[Any]:
        """The re-probe point to run now among ``table``'s (a ``table.Table``), or None (no probe
        left): probes the guard or a new budget ruled out since they were chosen are dropped."""
        key = self.probe_point()
        while key is not None:
            p = table.runnable(key, budget_w)
            if p is not None:
                return p
            self.skip_probe()
            key = self.probe_point()
        return None

    def ready(self) -> bool:
        """Probes (if any) are done: the table can be refreshed."""
        return self._due and self._probes is not None and not self._probes

    def skip_probe(self) -> None:
        """The running probe cannot run (the guard ruled it out): drop it unmeasured."""
        if self._probes:
            self._probes.pop(0)
            self._probe_seen = []

    def refresh(self, t: float) -> List[Row]:
        """Refresh the table from the pending events and the re-probes; write the profile."""
        events, probes = list(self._pending), list(self._probe_rows)
        self.rows = refresh_rows(self.rows, events, probes)
        self.detector.set_rows(self.rows)
        header = refresh_comments(self.comments, events, probes)
        self.refreshed_csv = render_profile(self.rows, header)
        if self.out_path:
            from fleet.method.profile_io import atomic_write_text

            atomic_write_text(self.out_path, self.refreshed_csv)
        self.refreshes.append(
            {
                "t_s": t,
                "events": len(events),
                "reprobed": [[int(r["batch_size"]), r["freq_mhz"]] for r in probes],
            }
        )
        self._pending, self._due, self._probes, self._probe_rows = [], False, None, []
        return self.rows

    def refreshed_text(self, batch: int, freq: float) -> str:
        """The loop's note after a refresh, running (``batch``, ``freq``) on the new table."""
        return "drift: profile refreshed ({} re-probe(s)); running {}@{:g} MHz".format(
            len(self.refreshes[-1]["reprobed"]), batch, freq
        )

    def finish(self, t: float) -> None:
        """End of the run: a refresh still due happens from what was measured so far."""
        if self._due:
            self._probes = []
            self.refresh(t)
