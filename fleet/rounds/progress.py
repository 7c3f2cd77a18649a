"""A device's progress through a round, as it travels in segment replies and resume requests.

Why a record of its own: a round that lasts hours runs in bounded segments
(docs/architecture.md, "Segmented rounds"). Every segment reply carries where the device is now,
every segment request carries where the coordinator last saw it (the device resumes from the
later of that and its own checkpoint), and the coordinator's persisted round state keeps it.
All counters are *cumulative since the round began* and in the device's own clock, so a
segment replayed after a lost reply or a coordinator restart replaces the previous value and
can never be counted twice.

Values come from another machine: ``Progress.from_dict`` refuses anything that is not a finite,
bounded number of the right kind, naming the field (a hostile or broken device must not corrupt
the fleet's aggregate).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from fleet.common.errors import InputError

MAX_SECONDS = 10 * 365 * 86400.0  # ten years of device time: anything longer is nonsense
MAX_SAMPLES = 1e15
MAX_ENERGY_J = 1e12
MAX_POWER_W = 1e5
MAX_FREQ = 1e6  # MHz, or watts on a power-limited GPU
MAX_BATCH = 1 << 20


@dataclass
class Progress:
    """Where one device is in its round (cumulative, device clock).

    ``time_s`` training time so far; ``samples`` trained so far; ``energy_j`` measured (board)
    or profiled (replay) energy so far; ``accuracy`` the last evaluation (None before the first);
    ``batch_size``/``freq_mhz`` the point it runs now; ``budget_w`` the budget in force now;
    ``power_w`` the power it draws now (measured on a board, profiled mean on a replay);
    ``done`` the fraction of the target's samples reached (0..1; its learning curve's view);
    ``eta_s`` predicted device seconds still needed to reach the target at the current point
    (None when unknown); ``segments`` how many segments the device has run; ``deadline_s`` the
    deadline its running point was chosen for (deadline objective): a segment sent with another
    (re-planned) deadline chooses again from where the device is.
    """

    time_s: float = 0.0
    samples: float = 0.0
    energy_j: float = 0.0
    accuracy: float | None = None
    batch_size: int | None = None
    freq_mhz: float | None = None
    budget_w: float | None = None
    power_w: float | None = None
    done: float = 0.0
    eta_s: float | None = None
    segments: int = 0
    deadline_s: float | None = None  # the deadline the running point was chosen for
    # the device's own estimate of the samples its running batch size needs for the target
    # (learnt from its curve), and the sd of its log; None when it learnt nothing
    samples_to_target: float | None = None
    samples_to_target_sd: float | None = None
    # the device-clock time it could reach the target at the earliest from here (its fastest
    # point under its budget, with what it learnt): what the coordinator re-plans with
    fastest_finish_s: float | None = None
    # a learning replay device's learner state (``fleet.rounds.learning``): resumed with it
    learning: dict | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "progress") -> Progress:
        """Checked: every field finite and within its bound, or one line naming it."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected an object of progress fields")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise InputError(f"{where}: unknown field {unknown[0]!r}")
        out = cls()
        learning = data.get("learning")
        if learning is not None:
            out.learning = _learning_state(learning, f"{where}.learning")
        for name, (lo, hi, optional, integral) in _BOUNDS.items():
            if name not in data:
                continue
            value = data[name]
            if value is None and optional:
                setattr(out, name, None)
                continue
            setattr(out, name, _number(value, f"{where}.{name}", lo, hi, integral))
        return out


# field -> (lowest, highest, may be None, integer)
_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {
    "time_s": (0.0, MAX_SECONDS, False, False),
    "samples": (0.0, MAX_SAMPLES, False, False),
    "energy_j": (0.0, MAX_ENERGY_J, False, False),
    "accuracy": (0.0, 1.0, True, False),
    "batch_size": (1, MAX_BATCH, True, True),
    "freq_mhz": (0.0, MAX_FREQ, True, False),
    "budget_w": (0.0, MAX_POWER_W, True, False),
    "power_w": (0.0, MAX_POWER_W, True, False),
    "done": (0.0, 1.0, False, False),
    "eta_s": (0.0, MAX_SECONDS, True, False),
    "segments": (0, 1 << 31, False, True),
    "deadline_s": (0.0, MAX_SECONDS, True, False),
    "samples_to_target": (0.0, MAX_SAMPLES, True, False),
    "samples_to_target_sd": (0.0, 100.0, True, False),
    "fastest_finish_s": (0.0, MAX_SECONDS, True, False),
}

MAX_LEARNING_BYTES = 200_000  # a learner's state: a few hundred evaluations


def _learning_state(value: object, where: str) -> dict:
    """A learner's state from another machine: an object of bounded size whose numbers are
    finite (the learner checks its shape when it resumes from it)."""
    import json

    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected finite numbers in lists") from None
    if len(text) > MAX_LEARNING_BYTES:
        raise InputError(f"{where}: {len(text)} bytes, at most {MAX_LEARNING_BYTES}")
    return json.loads(text)


def _number(value: object, where: str, lo: float, hi: float, integral: bool) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InputError(f"{where}: {value!r} is outside [{lo:g}, {hi:g}]")
    if integral:
        if float(value) != int(value):
            raise InputError(f"{where}: expected a whole number, got {value!r}")
        return int(value)
    return float(value)


def later(a: Progress, b: Progress) -> Progress:
    """The further of two views of the same device (more device time; then more samples):
    the coordinator's last persisted progress and the device's own checkpoint."""
    return a if (a.time_s, a.samples) >= (b.time_s, b.samples) else b
