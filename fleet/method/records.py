"""Typed, versioned records for what crosses a process boundary, written once for both sides.

Why: the host (Python 3.11) and the board (Python 3.6) exchanged plain dicts whose key names
lived in several places: the agent's argument list, the host's request builder, a lenient
reply reader and a separate row check. A key one side renamed was silently ignored by the
other, and ``batch_size`` came to mean three things. Here every record is a small class with a
``version``, ``to_dict()`` and ``from_dict(d, where)``; ``from_dict`` refuses, in one line
naming the record, the field and what was expected, a field it does not know (with the closest
known name), a missing required field, a wrong type or an implausible number.

The records here are the round's; the agent's requests and replies (``TrainRequest``,
``TrainReply``, ...) are in ``agent_records``:

- ``Segment``: one stretch at one batch size, clock and budget (inside a reply or a row);
- ``Progress``: where a device is in its round (a segment reply, a resume request,
  ``state.json``): cumulative counters and the point running now (``end_*``);
- ``ReportRow``: one device's row of the round report, the one list of its fields.

Field names mean one thing everywhere: ``batch_size``/``freq_mhz`` alone name a single point
(a fixed-point run, a segment, a profile row, the report row's *chosen start point*);
``end_batch_size``/``end_freq_mhz`` the point running at the end (or now); the learning-rate
reference pair is ``lr_ref_batch``/``lr_ref``. Python 3.6, standard library only.
"""

import json
import math
import re
from typing import Any, Dict, List, Optional, Tuple  # noqa: F401 - used in type comments

from fleet.method.budget import MAX_STEP_S, MAX_WATTS
from fleet.method.record_base import Field, Record, RecordError, closest  # noqa: F401

MAX_SECONDS = MAX_STEP_S  # ten years of device time: anything longer is nonsense
MAX_SAMPLES = 1e15
MAX_ENERGY_J = 1e12
MAX_POWER_W = MAX_WATTS  # a budget's own bound (fleet/method/budget.py)
MAX_FREQ = 1e6  # MHz, or watts on a power-limited GPU
MAX_BATCH = 1 << 20
MAX_LEARNING_BYTES = 200000  # a learner's state: a few hundred evaluations
# what a JSON text needs to hold a number that is not finite once read (NaN, Infinity, an
# exponent of three digits, a mantissa of hundreds) or to grow more than _REWRITE_GROWTH
# times when json.dumps writes it out again (a character beyond ASCII, escaped in 6 or 12)
_TAKE_THE_LONG_WAY = re.compile(r"NaN|Infinity|[eE]\+?[0-9]{3}|[0-9]{300}|[^\x00-\x7f]")
# an ASCII JSON text written out again grows at most this much ("9E15," is
# "9000000000000000.0, "), so a text this short holds a learning state within the bound
_REWRITE_GROWTH = 5


def number(name: str, lo: float, hi: float, default: Any = None, null: bool = True) -> Field:
    return Field(name, "float", default=default, null=null, lo=lo, hi=hi)


def integer(name: str, lo: float, hi: float, default: Any = None, null: bool = True) -> Field:
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
        number("start_s", 0.0, MAX_SECONDS, 0.0, null=False),
        number("end_s", 0.0, MAX_SECONDS, 0.0, null=False),
        number("budget_w", 0.0, MAX_POWER_W),
        integer("batch_size", 1, MAX_BATCH),
        number("freq_mhz", 0.0, MAX_FREQ),
        Field("samples", "any", default=math.nan),
        Field("energy_j", "any", default=math.nan),
        number("peak_power_w", 0.0, MAX_POWER_W),
        Field("reason", "str", default="", null=False),
        number("done", 0.0, 1.0),
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
            return number(f.name, 0.0, bound).check(value, cls.NAME)
        return f.check(value, cls.NAME)


# ------------------------------------------------------------------------------- report row


class ReportRow(Record):
    """One device's row of the round report (``report.json``, ``devices.csv``, a reply row):
    the one list of its fields, their meaning and their bounds.

    ``batch_size``/``freq_mhz`` are the point chosen at the round's start and
    ``predicted_time_s`` that start point's prediction; ``end_batch_size``/``end_freq_mhz`` the
    point running at the end; ``segments`` the stretches in between; ``time_s``/``energy_j``/
    ``samples``/``accuracy`` what the run measured (``peak_power_w``/``mean_power_w`` profiled
    until measured ones replace them). The baseline columns (``<name>_time_s``,
    ``speedup_vs_<name>``) depend on the host's baseline registry and are checked there; every
    other key is refused in one line naming the closest field. The host's builder of a row
    (``fleet/rounds/device_round.DeviceResult``) has exactly these fields, a test holds it so.
    """

    NAME = "report row"
    TOP = False
    FIELDS = (
        Field("device", "str", required=True, null=False),
        Field("device_type", "str", default=""),
        number("budget_w", 0.0, MAX_POWER_W),
        Field("status", "str", default="error", null=False),
        integer("batch_size", 1, MAX_BATCH),
        number("freq_mhz", 0.0, MAX_FREQ),
        number("predicted_time_s", 0.0, MAX_SECONDS),
        integer("end_batch_size", 1, MAX_BATCH),
        number("end_freq_mhz", 0.0, MAX_FREQ),
        number("time_s", 0.0, MAX_SECONDS),
        number("energy_j", 0.0, MAX_ENERGY_J),
        number("peak_power_w", 0.0, MAX_POWER_W),
        number("mean_power_w", 0.0, MAX_POWER_W),
        number("accuracy", 0.0, 1.0),
        Field("accuracy_source", "str"),  # measured (an evaluation) | trace (a replay's)
        number("samples", 0.0, MAX_SAMPLES),
        Field("profile", "str", default=""),
        Field("efficiency", "str", default=""),
        Field("learning", "str", default="trace"),
        Field("message", "str", default=""),
        Field("trace", "str"),
        Field("segments", "list", default=[]),
        Field("guard_events", "list", default=[]),
        number("over_budget_s", 0.0, MAX_SECONDS),  # the budget statistic above the budget
        number("over_budget_j", 0.0, MAX_ENERGY_J),
        integer("learned_batch_size", 1, MAX_BATCH),
        number("learned_samples", 0.0, MAX_SAMPLES),
        number("learned_log_sd", 0.0, 100.0),
        Field("efficiency_fits", "list", default=[]),
    )
    __slots__ = tuple(f.name for f in FIELDS)

    @classmethod
    def _checked(cls, f: Field, value: Any) -> Any:
        if f.name == "segments":  # the kernel's Segment record, one line naming the bad one
            return segments_from(value, cls.NAME + " field 'segments'")
        return f.check(value, cls.NAME)


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
        number("time_s", 0.0, MAX_SECONDS, 0.0, null=False),
        number("samples", 0.0, MAX_SAMPLES, 0.0, null=False),
        number("energy_j", 0.0, MAX_ENERGY_J, 0.0, null=False),
        number("accuracy", 0.0, 1.0),
        integer("end_batch_size", 1, MAX_BATCH),
        number("end_freq_mhz", 0.0, MAX_FREQ),
        number("budget_w", 0.0, MAX_POWER_W),
        number("power_w", 0.0, MAX_POWER_W),
        number("done", 0.0, 1.0, 0.0, null=False),
        number("eta_s", 0.0, MAX_SECONDS),
        integer("segments", 0, 1 << 31, 0, null=False),
        number("deadline_s", 0.0, MAX_SECONDS),
        number("samples_to_target", 0.0, MAX_SAMPLES),
        number("samples_to_target_sd", 0.0, 100.0),
        number("fastest_finish_s", 0.0, MAX_SECONDS),
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
    def from_json(cls, text: str, where: str = "") -> "Progress":
        """The record from the JSON text it travels in: the same record, or the same refusal,
        as ``from_dict(json.loads(text))``.

        Why: ``from_dict`` checks the learner's state by writing it out (finite numbers, its
        size) and reading it back (a copy of its own), a third of a progress's parse, which at
        1,000 devices is parsed twice a segment. A state just read from a short ASCII text
        with no non-finite number in it is already a fresh copy, finite and within the bound,
        so it is taken as read; any other text goes the long way."""
        data = json.loads(text)
        fast = (
            isinstance(data, dict)
            and isinstance(data.get("learning"), dict)
            and len(text) * _REWRITE_GROWTH <= MAX_LEARNING_BYTES
            and not _TAKE_THE_LONG_WAY.search(text)
        )
        if not fast:
            return cls.from_dict(data, where)
        learning = data.pop("learning")
        record = cls.from_dict(data, where)
        record.learning = learning
        return record

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
