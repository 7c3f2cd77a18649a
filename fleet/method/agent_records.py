"""The agent's requests and replies as typed, versioned records (host -> board -> host).

- ``TrainRequest``: the agent's ``train`` arguments (host -> board);
- ``ProfileRequest``, ``LockRequest``, ``BareRequest``: the other commands' arguments;
- ``TrainReply``: the agent's ``train`` reply (board -> host), with the point chosen at the
  start (``start_batch_size``/``start_freq_mhz``), the point running at the end
  (``end_batch_size``/``end_freq_mhz``) and the ``segments`` in between.

Apart from ``records`` (the round's segment and progress) because they belong to one boundary,
the agent's JSON lines; the field machinery and the refusals are ``record_base``'s. Python 3.6,
standard library only.
"""

import json  # noqa: F401
import math  # noqa: F401
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 - used in annotations

from fleet.method.record_base import Field, Record, RecordError  # noqa: F401
from fleet.method.records import (  # noqa: F401
    MAX_BATCH,
    MAX_ENERGY_J,
    MAX_FREQ,
    MAX_LEARNING_BYTES,
    MAX_POWER_W,
    MAX_SAMPLES,
    MAX_SECONDS,
    Progress,
    Segment,
    integer,
    number,
    segments_from,
)

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
        integer("num_classes", 1, 1 << 24),
        integer("vocab_size", 1, 1 << 24),
        Field("model_options", "dict"),
        _text("weights"),
        _text("data", required=True),
        integer("batch_size", 1, MAX_BATCH),
        number("lr", 0.0, 1e6),
        integer("lr_ref_batch", 1, MAX_BATCH),
        number("lr_ref", 0.0, 1e6),
        _text("optimizer"),
        number("target_accuracy", 0.0, 1.0),
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
# What a train reply's ``status`` says: the board's trainer and closed loop write it, the host's
# train exchange maps it to the round's device status (``fleet/rounds/statuses.py``).
STATUS_REACHED = "reached"
STATUS_NOT_REACHED = "not reached"
# the closed loop stopped (even the lowest clock was over) or the run spent time above the budget
STATUS_OVER_BUDGET = "over-budget"
# a segmented run stopped at the evaluation that ended its segment; its checkpoint resumes it
STATUS_PAUSED = "paused"
# the closed loop stopped because the device refused a setting (``stop_reason`` names it)
STATUS_ERROR = "error"
TRAIN_STATUSES = (
    STATUS_REACHED, STATUS_NOT_REACHED, STATUS_OVER_BUDGET, STATUS_PAUSED, STATUS_ERROR,
)  # fmt: skip
# the statuses of a run the closed loop stopped mid-training (the trainer's, its checkpoint's)
LOOP_STOPS = (STATUS_OVER_BUDGET, STATUS_ERROR)


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
        # the trainer's result (fleet/agent/training/train_state.TrainResult); its status is
        # the closed loop's where the loop stopped the run: one of TRAIN_STATUSES
        Field("status", "str", required=True),
        Field("samples_to_accuracy", "int"),
        number("samples", 0.0, MAX_SAMPLES, 0.0, null=False),
        Field("steps", "int"),
        Field("epochs", "int"),
        number("final_accuracy", 0.0, 1.0),
        number("best_accuracy", 0.0, 1.0),
        number("target_accuracy", 0.0, 1.0),
        Field("curve", "list", default=[]),
        Field("loss_curve", "list", default=[]),
        number("train_time_s", 0.0, MAX_SECONDS),
        number("eval_time_s", 0.0, MAX_SECONDS),
        number("checkpoint_time_s", 0.0, MAX_SECONDS),
        number("wall_time_s", 0.0, MAX_SECONDS),
        number("energy_j", 0.0, MAX_ENERGY_J),
        number("peak_power_w", 0.0, MAX_POWER_W),
        number("mean_power_w", 0.0, MAX_POWER_W),
        Field("power_samples", "int"),
        integer("batch_size", 1, MAX_BATCH),
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
        number("time_s", 0.0, MAX_SECONDS),
        number("accuracy", 0.0, 1.0),
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
        integer("lr_ref_batch", 1, MAX_BATCH),
        Field("lr_ref", "float"),
        integer("start_batch_size", 1, MAX_BATCH),
        number("start_freq_mhz", 0.0, MAX_FREQ),
        integer("end_batch_size", 1, MAX_BATCH),
        number("end_freq_mhz", 0.0, MAX_FREQ),
        Field("segments", "list", default=[]),
        Field("guard_events", "list", default=[]),
        Field("drift_events", "list", default=[]),
        Field("refreshes", "list"),
        Field("refreshed_profile", "str"),
        Field("refreshed_profile_csv", "str"),
        number("loop_time_s", 0.0, MAX_SECONDS),
        number("call_time_s", 0.0, MAX_SECONDS),
        number("loop_energy_j", 0.0, MAX_ENERGY_J),
        number("loop_peak_power_w", 0.0, MAX_POWER_W),
        # the budget statistic's window and the run's time and energy above the budget
        number("power_window_s", 0.0, MAX_SECONDS),
        number("over_budget_s", 0.0, MAX_SECONDS),
        number("over_budget_j", 0.0, MAX_ENERGY_J),
        integer("over_budget_excursions", 0, MAX_SAMPLES),
        number("longest_over_budget_s", 0.0, MAX_SECONDS),
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
    power_window_s: Optional[float]
    over_budget_s: Optional[float]
    over_budget_j: Optional[float]
    over_budget_excursions: Optional[int]
    longest_over_budget_s: Optional[float]
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
