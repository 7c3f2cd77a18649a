"""One device round, whatever runs it: align, check the type, select, hand over to a runner.

Every device of a fleet does the same thing in a round (docs/architecture.md): restrict its
profile and the shipped efficiency to their common batch sizes, check that the profile was
recorded on its device type, pick (b, f) under the first budget of its schedule with the
fleet's objective, and then *run*. Only the run differs:

- ``fleet.rounds.virtual_clock.VirtualClock``: the device's convergence trace says how many samples
  it needs; time advances by the profiled step time (thousands of devices, no training);
- ``fleet.rounds.host_training.HostTraining``: fine-tune on this host's CPU, charge the virtual
clock;
- ``clients.hardware_client.AgentRunner``: lock the board's clock and train through the agent.

A runner is any object with a ``learning`` label (or None to keep the fleet entry's) and a
``run(rnd, res)`` method that fills the row's time/energy/accuracy columns; it may re-select at
each budget step with ``rnd.choose_step(k, clock_s, done)`` (the objective's per-step chooser
when it has one, e.g. the deadline's, else ``rnd.choose(budget)``), or
``rnd.choose(budget, batch_size=b)`` when the batch size is fixed by training that already
started. An objective's chooser may give the row a status of its own after the run (``late``).
A runner that knows the device's true samples-to-accuracy (``truth``) also gets the baselines
costed on it. Adding a runner is one
class; nothing here changes.

``DeviceResult`` is the row: its fields define the report's columns (``row_columns``), with
the baseline registry's ``<name>_time_s`` / ``speedup_vs_<name>`` in place of
``baseline_time_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from fleet.agent.models.names import model_mismatch
from fleet.common.errors import InfeasibleError, InputError
from fleet.config.device_types import type_mismatch
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.baselines import BASELINES, run_baseline, speedup_column, time_column
from fleet.core.choice import Choice, align, evaluate
from fleet.core.efficiency import Efficiency
from fleet.core.objectives import OBJECTIVES, StepChooser
from fleet.core.profile import Profile
from fleet.core.selection import SelectionIndex
from fleet.method.budget import BudgetStep
from fleet.method.records import Segment

# Statuses of a device that trained to its target: their time and energy count toward the
# round, and in federated mode their weights go back (``late``: trained, after the deadline).
TRAINED = ("ok", "late")


@dataclass
class DeviceResult:
    """What a device reports back after a round: one row of the round report.

    The field order is the report's column order; ``baseline_time_s`` expands into the baseline
    registry's columns and ``segments`` travels in report.json only (not in devices.csv).

    One meaning per field (``fleet/method/records.py``): ``batch_size``/``freq_mhz`` are the
    point chosen at the round's start and ``predicted_time_s`` (with the row's profiled
    ``peak_power_w``/``mean_power_w`` until measured ones replace them) is that start point's
    prediction; ``end_batch_size``/``end_freq_mhz`` the point running at the end (the last
    segment's; the start point when it never moved); ``segments`` the stretches in between
    (``fleet.method.records.Segment``).
    """

    device: str
    device_type: str
    budget_w: float | None = None
    status: str = "error"  # ok | late | selected | infeasible | not reached | error
    batch_size: int | None = None
    freq_mhz: float | None = None
    predicted_time_s: float | None = None  # the start point's (batch_size, freq_mhz)
    end_batch_size: int | None = None
    end_freq_mhz: float | None = None
    time_s: float | None = None
    energy_j: float | None = None
    peak_power_w: float | None = None
    mean_power_w: float | None = None
    accuracy: float | None = None
    # where ``accuracy`` comes from: "measured" (evaluated on held-out data after real training,
    # on a board or the host) or "trace" (a replayed device stops where its recorded trace
    # reached the target: the trace's accuracy, not one this run measured); None: no accuracy
    accuracy_source: str | None = None
    samples: float | None = None
    baseline_time_s: dict[str, float] = field(default_factory=dict)
    profile: str = ""
    efficiency: str = ""
    learning: str = "trace"
    message: str = ""
    trace: str | None = None  # the convergence trace (true samples-to-accuracy) it ran on
    segments: list[Segment] = field(default_factory=list)
    # the board's runtime guard stepping the clock down: {t_s, from_mhz, to_mhz, measured_w,
    # budget_w} each (the agent's closed loop; empty in simulation)
    guard_events: list[dict[str, Any]] = field(default_factory=list)
    # a board's time and energy with its budget statistic (the power averaged over the
    # backend's stated window, fleet/method/power_window.py) above the budget; any: status
    # over-budget (None: not measured, a simulated device)
    over_budget_s: float | None = None
    over_budget_j: float | None = None
    # what the device learnt of its samples-to-target (``[run] learn_efficiency``): the batch
    # size it speaks of, the count there and the sd of its log; the coordinator's evidence
    learned_batch_size: int | None = None
    learned_samples: float | None = None
    learned_log_sd: float | None = None
    # every refit of its learning curve: {t_s, samples, batch_size, fit_samples, fit_log_sd,
    # estimate, before} (report.json only)
    efficiency_fits: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def for_device(cls, spec: DeviceSpec, efficiency: str, **values: Any) -> DeviceResult:
        """A row that names the device (status ``error`` until something better is known)."""
        values.setdefault("learning", spec.learning)
        values.setdefault("profile", spec.profile)
        return cls(spec.name, spec.device_type, spec.budget_w, efficiency=efficiency, **values)

    def take(self, choice: Choice) -> None:
        """The chosen point's columns (what the device runs and what it is predicted to cost)."""
        self.batch_size, self.freq_mhz = choice.batch_size, choice.freq_mhz
        self.predicted_time_s = choice.predicted_time_s
        self.peak_power_w, self.mean_power_w = choice.peak_power_w, choice.mean_power_w

    def to_dict(self) -> dict[str, object]:
        """The row with exactly ``row_fields()`` keys; non-finite numbers become None."""
        d: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "baseline_time_s":
                d.update(self._baseline_columns())
            elif f.name == "segments":
                d[f.name] = [{k: _finite_or_none(v) for k, v in s.to_dict().items()} for s in value]
            elif f.name in ("end_batch_size", "end_freq_mhz"):
                d[f.name] = self.end_point()[0 if f.name == "end_batch_size" else 1]
            elif f.name in LIST_FIELDS:
                d[f.name] = [dict(e) for e in value]
            else:
                d[f.name] = value
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in d.items()
        }

    def end_point(self) -> tuple[int | None, float | None]:
        """The point running at the end: as the runner set it, else the last segment's that
        ran one, else the start point (a run that never moved, or never ran)."""
        if self.end_batch_size is not None:
            return self.end_batch_size, self.end_freq_mhz
        ran = [s for s in self.segments if s.batch_size is not None]
        if ran:
            return ran[-1].batch_size, ran[-1].freq_mhz
        return self.batch_size, self.freq_mhz

    def _baseline_columns(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        times = {n: self.baseline_time_s.get(n) for n in BASELINES}
        for n, t in times.items():
            out[time_column(n)] = t
        for n, t in times.items():
            ok = self.status in TRAINED
            out[speedup_column(n)] = t / self.time_s if ok and t and self.time_s else None
        return out


def _finite_or_none(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def row_fields() -> list[str]:
    """Every key of a row (``DeviceResult.to_dict()``), in order, for today's baselines."""
    names: list[str] = []
    for f in fields(DeviceResult):
        if f.name == "baseline_time_s":
            names += baseline_columns()
        else:
            names.append(f.name)
    return names


def baseline_columns() -> list[str]:
    """The row's baseline columns for today's registry: each baseline's time and speedup."""
    return [time_column(n) for n in BASELINES] + [speedup_column(n) for n in BASELINES]


# Row fields holding lists (of dicts): report.json and the wire carry them as JSON, not columns.
LIST_FIELDS = ("segments", "guard_events", "efficiency_fits")


def row_columns() -> list[str]:
    """The report's table columns (devices.csv): every row field that is a single value."""
    return [n for n in row_fields() if n not in LIST_FIELDS]


# ------------------------------------------------------------------------------ the round


@dataclass
class Round:
    """What a runner gets: the device, the run settings, the aligned inputs and the choice."""

    spec: DeviceSpec
    run: RunSettings
    profile: Profile  # aligned with the shipped efficiency
    shipped: Efficiency
    index: SelectionIndex
    schedule: tuple[BudgetStep, ...]
    first: Choice  # the choice under the schedule's first budget
    context: dict[str, Any] = field(default_factory=dict)
    chooser: StepChooser | None = None  # the objective's per-step chooser, if it has one

    def choose_step(
        self, k: int, clock_s: float, done: float, batch_size: int | None = None
    ) -> Choice | None:
        """The choice for budget step k, with the clock at ``clock_s`` and ``done`` of the
        target reached: the objective's own chooser when it has one (and the batch is free)."""
        if self.chooser is not None and batch_size is None:
            return self.chooser(k, clock_s, done)
        return self.choose(self.schedule[k].budget_w, batch_size)

    def choose(self, budget_w: float | None, batch_size: int | None = None) -> Choice | None:
        """Re-select at a budget step (optionally for a fixed batch size); None if nothing fits."""
        eff = self.shipped if batch_size is None else self.shipped.restrict([batch_size])
        try:
            return self.index.select(eff, budget_w, self.run.objective, **self.context)
        except InfeasibleError:
            return None


class Runner(Protocol):
    learning: str | None  # the row's ``learning`` label; None keeps the fleet entry's

    @property
    def truth(self) -> Efficiency | None:
        """The device's true samples-to-accuracy, when the runner knows it (read only)."""

    def run(self, rnd: Round, res: DeviceResult) -> None: ...


def check_device_type(spec: DeviceSpec, profile: Profile) -> None:
    """A profile recorded on another device type is refused: its times and powers are not ours."""
    why = type_mismatch(profile.metadata.get("device", ""), profile.freqs_mhz, spec.device_type)
    if why:
        raise InputError(
            f"device {spec.name}: type {spec.device_type!r} but its profile {profile.source} {why}"
        )


def model_note(source: str, metadata: dict[str, str], model: str, what: str = "profile") -> str:
    """What is said when a file (a device's profile; the run's efficiency) was recorded for
    another model than the run trains (empty when they agree or the file names none). Said,
    not refused: a round may replay one model's profile while it trains a small one on purpose
    (a rehearsal of the hardware path on a CPU); a reader of the report must see whose numbers
    are whose. A row says it of its profile only: the shipped efficiency crosses the wire
    without its columns, and the fleet's is one file (``whatif`` says it once)."""
    recorded = metadata.get("model", "")
    if not model_mismatch(recorded, model):
        return ""
    return f"the run trains {model!r} but its {what} {source} was recorded for {recorded!r}"


def run_device(
    spec: DeviceSpec,
    profile: Profile,
    shipped: Efficiency,
    run: RunSettings,
    runner: Runner,
    *,
    index: SelectionIndex | None = None,
    context: dict[str, Any] | None = None,
) -> DeviceResult:
    """One device's round on any runner; problems of this device become its row's status.

    ``index`` may be a prebuilt ``SelectionIndex`` of ``profile`` (thousands of simulated
    devices share a reference profile); ``context`` is the objective's extra keywords (e.g. a
    deadline); by default each keyword the objective names (``Objective.context``) is taken
    from the fleet's ``[run]`` table (``RunSettings``). Never raises ``InputError``: an
    ``error`` / ``infeasible`` row says what went wrong, so one device cannot stop the round.
    """
    res = DeviceResult.for_device(spec, shipped.source)
    if context is None:
        wanted = OBJECTIVES[run.objective].context if run.objective in OBJECTIVES else ()
        context = {k: getattr(run, k) for k in wanted if getattr(run, k, None) is not None}
    if runner.learning is not None:
        res.learning = runner.learning
    try:
        check_device_type(spec, profile)
        other_model = model_note(profile.source, profile.metadata, run.model)
        aligned, shipped_a, _ = align(profile, shipped)
        if index is None or aligned.points != profile.points:
            index = SelectionIndex(aligned)
        schedule = spec.schedule or (BudgetStep(0.0, spec.budget_w),)
        chooser, first = None, None
        obj = OBJECTIVES.get_entry(run.objective)
        if obj.steps is not None and all(k in context for k in obj.context):
            # the objective plans per step (fleet.core.objectives); its step 0 is the first choice
            chooser = obj.steps(aligned.points, shipped_a, schedule, context, aligned.source)
            first = chooser(0, 0.0, 0.0)
        why = ""
        if first is None:  # selection proper (or, when the chooser found nothing, its reason)
            first, why = _first_choice(index, shipped_a, schedule[0].budget_w, run, context)
        checked = None
        if (
            chooser is None
        ):  # coverage / verify-before-trust (fleet/trust/gate.py) for plain selection
            checked = _trusted(
                aligned, shipped_a, index, first, schedule[0].budget_w, run, runner, context
            )
        if checked is not None:
            aligned, index, first = checked.profile, checked.index, checked.first
            if first is None:
                why = f"{checked.note}; nothing fits the budget after checking"
        if first is None:
            res.status, res.message = "infeasible", "; ".join(m for m in (other_model, why) if m)
            return res
        res.take(first)
        res.status = "ok"
        rnd = Round(spec, run, aligned, shipped_a, index, schedule, first, dict(context), chooser)
        runner.run(rnd, res)
        if chooser is not None and res.status == "ok":
            status, note = chooser.verdict(res.time_s)
            res.status = status or res.status
            res.message = "; ".join(m for m in (note, res.message) if m)
        if checked is not None and checked.note:
            res.message = f"{checked.note}; {res.message}" if res.message else checked.note
        if runner.truth is not None:
            res.baseline_time_s = baseline_times(rnd, runner.truth)
        res.message = "; ".join(m for m in (other_model, res.message) if m)
    except InputError as exc:
        res.status, res.message = "error", str(exc)
    return res


def _first_choice(
    index: SelectionIndex,
    shipped: Efficiency,
    budget_w: float | None,
    run: RunSettings,
    context: dict[str, Any] | None,
) -> tuple[Choice | None, str]:
    try:
        return index.select(shipped, budget_w, run.objective, **(context or {})), ""
    except InfeasibleError as exc:
        return None, str(exc)


def _trusted(
    aligned: Profile,
    shipped: Efficiency,
    index: SelectionIndex,
    first: Choice | None,
    budget_w: float | None,
    run: RunSettings,
    runner: Runner,
    context: dict[str, Any] | None,
) -> Any:
    """Coverage and verify-before-trust (``fleet.trust.gate``): a runner with ``probe(run, b, f)``
    measures missing and predicted points; others get a coverage error. None: nothing done."""
    from fleet.trust.gate import trust

    probe = getattr(runner, "probe", None)
    measure = (lambda b, f: probe(run, b, f)) if callable(probe) else None
    got = trust(aligned, shipped, index, first, budget_w, run.objective, measure, context)
    return None if got.profile is aligned and not got.note else got


def baseline_times(rnd: Round, truth: Efficiency) -> dict[str, float]:
    """Each registered baseline's time on the device's truth, under the device's budget.

    One budget: its (b, cap) choice costed on the truth. A schedule: the baseline runs the same
    schedule (``scheduled_baseline_time``), so "ours" and the baselines face the same budgets.
    """
    if len(rnd.schedule) > 1:
        out = {n: scheduled_baseline_time(rnd, truth, n) for n in BASELINES}
        return {n: t for n, t in out.items() if math.isfinite(t)}
    budget = rnd.schedule[0].budget_w
    try:
        cap = rnd.index.safe_cap(budget)
    except InfeasibleError:
        return {}
    out = {}
    for name in BASELINES:
        try:
            c = evaluate(run_baseline(name, rnd.profile, rnd.shipped, budget, cap), truth)
        except InfeasibleError:
            continue
        if math.isfinite(c.predicted_time_s):
            out[name] = c.predicted_time_s
    return out


def scheduled_baseline_time(rnd: Round, truth: Efficiency, name: str) -> float:
    """A baseline replayed on the virtual clock, segment by segment: at each budget step it
    takes its own fixed choice (its batch rule's b at that step's safe clock cap) and progress
    carries over as the fraction of the target reached, as the device's own run does
    (``fleet.rounds.virtual_clock``); a step where it cannot run is a pause. inf: never finishes."""
    clock = done = 0.0
    for k, step in enumerate(rnd.schedule):
        end = rnd.schedule[k + 1].at_s if k + 1 < len(rnd.schedule) else math.inf
        clock = max(clock, step.at_s)
        try:
            cap = rnd.index.safe_cap(step.budget_w)
            c = run_baseline(name, rnd.profile, rnd.shipped, step.budget_w, cap)
        except InfeasibleError:
            clock = end
            continue
        n = truth.samples.get(c.batch_size, math.nan)
        if not math.isfinite(n) or n <= 0:
            return math.inf
        per_sample = c.time_per_batch_s / c.batch_size
        run = min((1.0 - done) * n * per_sample, end - clock)
        clock += run
        done += run / (n * per_sample)
        if done >= 1.0 - 1e-12:
            return clock
    return math.inf
