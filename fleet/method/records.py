"""Typed, versioned records for what crosses a process boundary, written once for both sides.

Why: the host (Python 3.11) and the board (Python 3.6) exchanged plain dicts whose key names
lived in several places: the agent's argument list, the host's request builder, a lenient
reply reader and a separate row check. A key one side renamed was silently ignored by the
other, and ``batch_size`` came to mean three things. Here every record is a small class with a
``version``, ``to_dict()`` and ``from_dict(d, where)``; ``from_dict`` refuses, in one line
naming the record, the field and what was expected, a field it does not know (with the closest
known name), a missing required field, a wrong type or an implausible number.

The records:

- ``TrainRequest``: the agent's ``train`` arguments (host -> board);
- ``TrainReply``: the agent's ``train`` reply (board -> host), with the point chosen at the
  start (``start_batch_size``/``start_freq_mhz``), the point running at the end
  (``end_batch_size``/``end_freq_mhz``) and the ``segments`` in between;
- ``Segment``: one stretch at one batch size, clock and budget (inside a reply or a row);
- ``Progress``: where a device is in its round (a segment reply, a resume request,
  ``state.json``): cumulative counters and the point running now (``end_*``).

Field names mean one thing everywhere: ``batch_size``/``freq_mhz`` alone name a single point
(a fixed-point run, a segment, a profile row, the report row's *chosen start point*);
``end_batch_size``/``end_freq_mhz`` the point running at the end (or now); the learning-rate
reference pair is ``lr_ref_batch``/``lr_ref``. Python 3.6, standard library only.
"""

import json
import math
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 - used in type comments

from fleet.method.record_base import Field, Record, RecordError, closest  # noqa: F401

MAX_SECONDS = 10 * 365 * 86400.0  # ten years of device time: anything longer is nonsense
MAX_SAMPLES = 1e15
MAX_ENERGY_J = 1e12
MAX_POWER_W = 1e5
MAX_FREQ = 1e6  # MHz, or watts on a power-limited GPU
MAX_BATCH = 1 << 20
MAX_LEARNING_BYTES = 200000  # a learner's state: a few hundred evaluations


def _num(name: str, lo: float, hi: float, default: Any = None, null: bool = True) -> Field:
    return Field(name, "float", default=default, null=null, lo=lo, hi=hi)


def _int(name: str, lo: float, hi: float, default: Any = None, null: bool = True) -> Field:
    return Field(name, "int", default=default, null=null, lo=lo, hi=hi)


# ------------------------------------------------------------------------------- segment


class Segment(Record):
    """One stretch of training at one batch size, clock and budget: ``start_s``/``end_s`` on the
    device's clock since the round began, the point (None: paused, nothing fits), the budget in
    force, why it began (``reason``: start, budget-change, guard, learned, ...), and what was
    measured over it (``energy_j``, ``peak_power_w``; None or NaN when unknown); ``samples`` is
    NaN where the board does not count them; ``done`` the target fraction when it began."""

    NAME = "segment"
    TOP = False
    FIELDS = (
        _num("start_s", 0.0, MAX_SECONDS, 0.0, null=False),
        _num("end_s", 0.0, MAX_SECONDS, 0.0, null=False),
        _num("budget_w", 0.0, MAX_POWER_W),
        _int("batch_size", 1, MAX_BATCH),
        _num("freq_mhz", 0.0, MAX_FREQ),
        Field("samples", "any", default=math.nan),
        Field("energy_j", "any", default=math.nan),
        _num("peak_power_w", 0.0, MAX_POWER_W),
        Field("reason", "str", default="", null=False),
        _num("done", 0.0, 1.0),
    )
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    start_s: float
    end_s: float
    budget_w: Optional[float]
    batch_size: Optional[int]
    freq_mhz: Optional[float]
    samples: Any
    energy_j: Any
    peak_power_w: Optional[float]
    reason: str
    done: Optional[float]

    def to_dict(self) -> Dict[str, Any]:
        """``done`` only when the segment has one (a deadline run's)."""
        out = Record.to_dict(self)
        if out.get("done") is None:
            out.pop("done", None)
        return out

    @classmethod
    def _checked(cls, f: Field, value: Any) -> Any:
        if f.name in ("samples", "energy_j"):  # NaN: not counted; else a plausible number
            if value is None:
                return math.nan
            bound = MAX_SAMPLES if f.name == "samples" else MAX_ENERGY_J
            return _num(f.name, 0.0, bound).check(value, cls.NAME)
        return f.check(value, cls.NAME)


#: The report row's numbers as a device's reply carries them (``clients/reply_check.py``
#: checks a row with these): the start point (``batch_size``/``freq_mhz``, with the
#: ``predicted_time_s`` it was chosen on), the end point (``end_*``) and the measured totals,
#: each within what no real board exceeds.
ROW_NUMBERS = (
    _num("budget_w", 0.0, MAX_POWER_W),
    _int("batch_size", 1, MAX_BATCH),
    _num("freq_mhz", 0.0, MAX_FREQ),
    _num("predicted_time_s", 0.0, MAX_SECONDS),
    _int("end_batch_size", 1, MAX_BATCH),
    _num("end_freq_mhz", 0.0, MAX_FREQ),
    _num("time_s", 0.0, MAX_SECONDS),
    _num("energy_j", 0.0, MAX_ENERGY_J),
    _num("peak_power_w", 0.0, MAX_POWER_W),
    _num("mean_power_w", 0.0, MAX_POWER_W),
    _num("accuracy", 0.0, 1.0),
    _num("samples", 0.0, MAX_SAMPLES),
    _num("idle_power_w", 0.0, MAX_POWER_W),
    _int("learned_batch_size", 1, MAX_BATCH),
    _num("learned_samples", 0.0, MAX_SAMPLES),
    _num("learned_log_sd", 0.0, 100.0),
)


def segments_from(items: Any, where: str) -> list:
    """A list of segment dicts as ``Segment`` records (one line naming the bad one)."""
    if not isinstance(items, (list, tuple)):
        raise RecordError("{}: segments must be a list".format(where))
    return [Segment.from_dict(s, "{}[{}]".format(where, i)) for i, s in enumerate(items)]


# ------------------------------------------------------------------------------- progress


class Progress(Record):
    """Where one device is in its round (cumulative since the round began, device clock).

    ``time_s`` training time so far; ``samples`` trained so far; ``energy_j`` measured (board)
    or profiled (replay) energy so far; ``accuracy`` the last evaluation (None before the first);
    ``end_batch_size``/``end_freq_mhz`` the point it runs now (the end point so far, the name
    the report row uses); ``budget_w`` the budget in force now; ``power_w`` the power it draws
    now; ``done`` the fraction of the target's samples reached (0..1); ``eta_s`` predicted device
    seconds still needed at the running point (None when unknown); ``segments`` how many
    segments the device has run; ``deadline_s`` the deadline its running point was chosen for;
    ``samples_to_target`` (and the sd of its log) the device's own estimate for its running
    batch size; ``fastest_finish_s`` the earliest device-clock finish from here; ``learning`` a
    learning replay device's learner state (resumed with it).
    """

    NAME = "progress"
    VERSION = 2  # 2: the running point is ``end_batch_size``/``end_freq_mhz`` (was batch_size)
    FIELDS = (
        _num("time_s", 0.0, MAX_SECONDS, 0.0, null=False),
        _num("samples", 0.0, MAX_SAMPLES, 0.0, null=False),
        _num("energy_j", 0.0, MAX_ENERGY_J, 0.0, null=False),
        _num("accuracy", 0.0, 1.0),
        _int("end_batch_size", 1, MAX_BATCH),
        _num("end_freq_mhz", 0.0, MAX_FREQ),
        _num("budget_w", 0.0, MAX_POWER_W),
        _num("power_w", 0.0, MAX_POWER_W),
        _num("done", 0.0, 1.0, 0.0, null=False),
        _num("eta_s", 0.0, MAX_SECONDS),
        _int("segments", 0, 1 << 31, 0, null=False),
        _num("deadline_s", 0.0, MAX_SECONDS),
        _num("samples_to_target", 0.0, MAX_SAMPLES),
        _num("samples_to_target_sd", 0.0, 100.0),
        _num("fastest_finish_s", 0.0, MAX_SECONDS),
        Field("learning", "dict"),
    )
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    time_s: float
    samples: float
    energy_j: float
    accuracy: Optional[float]
    end_batch_size: Optional[int]
    end_freq_mhz: Optional[float]
    budget_w: Optional[float]
    power_w: Optional[float]
    done: float
    eta_s: Optional[float]
    segments: int
    deadline_s: Optional[float]
    samples_to_target: Optional[float]
    samples_to_target_sd: Optional[float]
    fastest_finish_s: Optional[float]
    learning: Optional[Dict[str, Any]]

    @classmethod
    def _checked(cls, f: Field, value: Any) -> Any:
        value = f.check(value, cls.NAME)
        if f.name == "learning" and value is not None:  # the learner checks its shape itself
            try:
                text = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise RecordError(
                    "{} field 'learning' must hold finite numbers in lists".format(cls.NAME)
                ) from None
            if len(text) > MAX_LEARNING_BYTES:
                raise RecordError(
                    "{} field 'learning' is {} bytes, at most {}".format(
                        cls.NAME, len(text), MAX_LEARNING_BYTES
                    )
                )
            value = json.loads(text)
        return value


# ------------------------------------------------------------------------------- train request


def _text(name: str, required: bool = False) -> Field:
    return Field(name, "str", required=required)


class TrainRequest(Record):
    """The agent's ``train`` arguments (``fleet/agent/protocol/train_command.py`` says what
    each does). A fixed-point run gives ``batch_size``/``lr`` (and ``freq_mhz`` to lock); a
    closed-loop run gives a budget (``budget_w``, ``budget_schedule`` or ``budget_file``, read
    by ``fleet/method/budget.py``), ``profile`` and ``efficiency``, and the learning-rate
    reference pair ``lr_ref_batch``/``lr_ref`` that the chosen batch size scales from."""

    NAME = "train request"
    FIELDS = (
        _text("model", required=True),
        Field("input_shape", "any"),  # [3, 32, 32] or "3x32x32"
        _int("num_classes", 1, 1 << 24),
        _int("vocab_size", 1, 1 << 24),
        Field("model_options", "dict"),
        _text("weights"),
        _text("data", required=True),
        _int("batch_size", 1, MAX_BATCH),
        _num("lr", 0.0, 1e6),
        _int("lr_ref_batch", 1, MAX_BATCH),
        _num("lr_ref", 0.0, 1e6),
        _text("optimizer"),
        _num("target_accuracy", 0.0, 1.0),
        Field("eval_every_samples", "int"),
        Field("max_samples", "int"),
        Field("seed", "int"),
        _text("checkpoint"),
        Field("segment_s", "float"),
        _text("out_weights"),
        Field("freq_mhz", "float"),
        _text("device"),
        _text("task"),
        Field("eval_batch_size", "int"),
        Field("eval_at_start", "bool"),
        Field("sampler_hz", "float"),
        Field("budget_w", "any"),  # watts or "none": the budget grammar's, checked there
        Field("budget_schedule", "any"),
        _text("budget_file"),
        Field("profile", "any"),  # rows, or a CSV path on the board
        Field("efficiency", "any"),  # {batch: samples}, two lists, or a CSV path
        _text("objective"),
        Field("deadline_s", "any"),  # checked by fleet/method/deadline.py
        Field("guard_window_s", "float"),
        Field("drift", "bool"),
        Field("drift_time_tol", "float"),
        Field("drift_power_tol", "float"),
        _text("refreshed_profile"),
        Field("pace", "bool"),
        _text("learn_efficiency"),
        Field("efficiency_std", "dict"),
        Field("efficiency_source", "any"),
        Field("efficiency_law_err", "any"),
    )
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    model: Optional[str]
    input_shape: Any
    num_classes: Optional[int]
    vocab_size: Optional[int]
    model_options: Optional[Dict[str, Any]]
    weights: Optional[str]
    data: Optional[str]
    batch_size: Optional[int]
    lr: Optional[float]
    lr_ref_batch: Optional[int]
    lr_ref: Optional[float]
    optimizer: Optional[str]
    target_accuracy: Optional[float]
    eval_every_samples: Optional[int]
    max_samples: Optional[int]
    seed: Optional[int]
    checkpoint: Optional[str]
    segment_s: Optional[float]
    out_weights: Optional[str]
    freq_mhz: Optional[float]
    device: Optional[str]
    task: Optional[str]
    eval_batch_size: Optional[int]
    eval_at_start: Optional[bool]
    sampler_hz: Optional[float]
    budget_w: Any
    budget_schedule: Any
    budget_file: Optional[str]
    profile: Any
    efficiency: Any
    objective: Optional[str]
    deadline_s: Any
    guard_window_s: Optional[float]
    drift: Optional[bool]
    drift_time_tol: Optional[float]
    drift_power_tol: Optional[float]
    refreshed_profile: Optional[str]
    pace: Optional[bool]
    learn_efficiency: Optional[str]
    efficiency_std: Optional[Dict[str, Any]]
    efficiency_source: Any
    efficiency_law_err: Any

    def budgeted(self) -> bool:
        """Whether it asks for the closed loop (any budget argument turns it on)."""
        return any(
            getattr(self, k) is not None for k in ("budget_w", "budget_schedule", "budget_file")
        )

    def args(self) -> Dict[str, Any]:
        """The request's arguments without the nulls (what goes on the line after ``cmd``)."""
        return dict((k, v) for k, v in self.to_dict().items() if v is not None)


# ------------------------------------------------------------------------------- other requests


class ProfileRequest(Record):
    """The agent's ``profile`` arguments (``fleet/agent/protocol/device_commands.py``)."""

    NAME = "profile request"
    FIELDS = (
        _text("model", required=True),
        Field("input_shape", "any"),  # [3, 32, 32] or "3x32x32"
        Field("batch_sizes", "any"),  # a list, or "8,16,32"
        Field("freqs", "any"),
        Field("budget_w", "any"),
        Field("steps", "int"),
        Field("warmup", "int"),
        Field("sampler_hz", "float"),
        Field("num_classes", "int"),
        _text("device"),
        _text("out"),
        Field("rows", "bool"),
        Field("predict", "bool"),
        Field("max_probes", "int"),
        Field("adapt_budgets", "list"),
        Field("adapt_efficiency", "any"),
        Field("adapt_probes", "int"),
    )
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    model: Optional[str]
    input_shape: Any
    batch_sizes: Any
    freqs: Any
    budget_w: Any
    steps: Optional[int]
    warmup: Optional[int]
    sampler_hz: Optional[float]
    num_classes: Optional[int]
    device: Optional[str]
    out: Optional[str]
    rows: Optional[bool]
    predict: Optional[bool]
    max_probes: Optional[int]
    adapt_budgets: Optional[List[Any]]
    adapt_efficiency: Any
    adapt_probes: Optional[int]


class LockRequest(Record):
    """The agent's ``lock``: the clock to pin (one of the backend's frequencies)."""

    NAME = "lock request"
    FIELDS = (Field("freq_mhz", "float", required=True, null=False),)
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    freq_mhz: float


class BareRequest(Record):
    """A command that takes no argument (``restore``, ``power``, ``shutdown``)."""

    NAME = "bare request"
    FIELDS = ()
    __slots__ = ()


# ------------------------------------------------------------------------------- train reply


class TrainReply(Record):
    """The agent's ``train`` reply, without the line's ``id`` and ``ok``.

        A fixed-point run names its one point ``batch_size``/``freq_mhz``. A closed-loop run names
        the point it chose at the start (``start_batch_size``/``start_freq_mhz``), the point
        running at the end (``end_batch_size``/``end_freq_mhz``), the ``segments`` in between and
        the reference pair its learning rate scaled from (``lr_ref_batch``, ``lr_ref``; its
    ``batch_size``/``lr`` are absent); its
        ``predicted_finish_s``/``predicted_energy_j`` are the deadline plan's for the end point.
        Counters are the run's, cumulative across the calls of a segmented run; ``progress`` is a
        ``Progress``.
    """

    NAME = "train reply"
    FIELDS = (
        # the trainer's result (fleet/agent/training/train_state.TrainResult)
        Field("status", "str", required=True),
        Field("samples_to_accuracy", "int"),
        _num("samples", 0.0, MAX_SAMPLES, 0.0, null=False),
        Field("steps", "int"),
        Field("epochs", "int"),
        _num("final_accuracy", 0.0, 1.0),
        _num("best_accuracy", 0.0, 1.0),
        _num("target_accuracy", 0.0, 1.0),
        Field("curve", "list", default=[]),
        Field("loss_curve", "list", default=[]),
        _num("train_time_s", 0.0, MAX_SECONDS),
        _num("eval_time_s", 0.0, MAX_SECONDS),
        _num("checkpoint_time_s", 0.0, MAX_SECONDS),
        _num("wall_time_s", 0.0, MAX_SECONDS),
        _num("energy_j", 0.0, MAX_ENERGY_J),
        _num("peak_power_w", 0.0, MAX_POWER_W),
        _num("mean_power_w", 0.0, MAX_POWER_W),
        Field("power_samples", "int"),
        _int("batch_size", 1, MAX_BATCH),
        Field("lr", "float"),
        Field("optimizer", "str"),
        Field("seed", "int"),
        Field("eval_every_samples", "int"),
        Field("max_samples", "int"),
        Field("sessions", "int"),
        Field("resumed_from_samples", "int"),
        Field("reached", "bool"),
        Field("samples_per_s", "float"),
        # the command's own
        _num("time_s", 0.0, MAX_SECONDS),
        _num("accuracy", 0.0, 1.0),
        Field("model", "str"),
        Field("task", "str"),
        Field("device", "str"),
        Field("freq_mhz", "float"),
        Field("restored", "bool"),
        Field("power_measured", "bool"),
        Field("checkpoint", "str"),
        Field("out_weights", "str"),
        Field("notes", "list", default=[]),
        Field("segment_s", "float"),
        Field("progress", "dict"),
        # the closed loop's (fleet/agent/loop/segments.loop_summary)
        _int("lr_ref_batch", 1, MAX_BATCH),
        Field("lr_ref", "float"),
        _int("start_batch_size", 1, MAX_BATCH),
        _num("start_freq_mhz", 0.0, MAX_FREQ),
        _int("end_batch_size", 1, MAX_BATCH),
        _num("end_freq_mhz", 0.0, MAX_FREQ),
        Field("segments", "list", default=[]),
        Field("guard_events", "list", default=[]),
        Field("drift_events", "list", default=[]),
        Field("refreshes", "list"),
        Field("refreshed_profile", "str"),
        Field("refreshed_profile_csv", "str"),
        _num("loop_time_s", 0.0, MAX_SECONDS),
        _num("call_time_s", 0.0, MAX_SECONDS),
        _num("loop_energy_j", 0.0, MAX_ENERGY_J),
        _num("loop_peak_power_w", 0.0, MAX_POWER_W),
        Field("stop_reason", "str"),
        Field("learning", "dict"),
        Field("objective", "str"),
        Field("deadline_s", "float"),
        Field("predicted_finish_s", "float"),
        Field("predicted_energy_j", "float"),
        Field("late", "bool"),
        Field("behind_at_s", "float"),
        Field("done_fraction", "float"),
    )
    __slots__ = tuple(f.name for f in FIELDS)
    # the fields as a type checker sees them (set from FIELDS by Record.__init__)
    status: Optional[str]
    samples_to_accuracy: Optional[int]
    samples: float
    steps: Optional[int]
    epochs: Optional[int]
    final_accuracy: Optional[float]
    best_accuracy: Optional[float]
    target_accuracy: Optional[float]
    curve: Optional[List[Any]]
    loss_curve: Optional[List[Any]]
    train_time_s: Optional[float]
    eval_time_s: Optional[float]
    checkpoint_time_s: Optional[float]
    wall_time_s: Optional[float]
    energy_j: Optional[float]
    peak_power_w: Optional[float]
    mean_power_w: Optional[float]
    power_samples: Optional[int]
    batch_size: Optional[int]
    lr: Optional[float]
    optimizer: Optional[str]
    seed: Optional[int]
    eval_every_samples: Optional[int]
    max_samples: Optional[int]
    sessions: Optional[int]
    resumed_from_samples: Optional[int]
    reached: Optional[bool]
    samples_per_s: Optional[float]
    time_s: Optional[float]
    accuracy: Optional[float]
    model: Optional[str]
    task: Optional[str]
    device: Optional[str]
    freq_mhz: Optional[float]
    restored: Optional[bool]
    power_measured: Optional[bool]
    checkpoint: Optional[str]
    out_weights: Optional[str]
    notes: Optional[List[Any]]
    segment_s: Optional[float]
    progress: Optional[Dict[str, Any]]
    lr_ref_batch: Optional[int]
    lr_ref: Optional[float]
    start_batch_size: Optional[int]
    start_freq_mhz: Optional[float]
    end_batch_size: Optional[int]
    end_freq_mhz: Optional[float]
    segments: Optional[List[Any]]
    guard_events: Optional[List[Any]]
    drift_events: Optional[List[Any]]
    refreshes: Optional[List[Any]]
    refreshed_profile: Optional[str]
    refreshed_profile_csv: Optional[str]
    loop_time_s: Optional[float]
    call_time_s: Optional[float]
    loop_energy_j: Optional[float]
    loop_peak_power_w: Optional[float]
    stop_reason: Optional[str]
    learning: Optional[Dict[str, Any]]
    objective: Optional[str]
    deadline_s: Optional[float]
    predicted_finish_s: Optional[float]
    predicted_energy_j: Optional[float]
    late: Optional[bool]
    behind_at_s: Optional[float]
    done_fraction: Optional[float]

    @classmethod
    def _checked(cls, f: Field, value: Any) -> Any:
        if f.name == "segments":
            return segments_from(f.check(value, cls.NAME), "{} field 'segments'".format(cls.NAME))
        if f.name == "progress" and value is not None:
            return Progress.from_dict(value, "{} field 'progress'".format(cls.NAME))
        return f.check(value, cls.NAME)


RECORDS = (Segment, Progress, TrainRequest, ProfileRequest, LockRequest, BareRequest, TrainReply)
#: Each agent command's request record (``hello`` is the one lenient command: none).
REQUESTS = {
    "train": TrainRequest,
    "profile": ProfileRequest,
    "lock": LockRequest,
    "restore": BareRequest,
    "power": BareRequest,
    "shutdown": BareRequest,
}
