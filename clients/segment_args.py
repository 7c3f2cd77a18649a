"""A segment of a round on a board: what the instruction asks, and the progress the reply carries.

Why separate: a round that lasts hours runs in bounded segments (docs/architecture.md,
"Segmented rounds"). The wire's names and parsers are ``segment_wire.py``; the board only
needs to read two keys of the instruction's ConfigRecord and to say where it stands, and both
are small enough to keep apart from the round itself (``hardware_client.py``):

- ``segment-s`` (float): device-clock seconds of training in this call; absent or 0: the whole
  run in one call, as before. The agent trains at least that long and pauses at its next
  evaluation (``fleet/agent/training/trainer.py``, "Segments").
- ``resume`` (JSON of ``fleet.rounds.progress.Progress``): where the coordinator last saw this
  device. On a board only the trainer's checkpoint can be resumed (it holds the weights and the
  optimizer); ``resume`` ahead of it means the board lost work, which the reply says.

The reply carries a ConfigRecord ``progress`` whose ``progress`` key is the JSON of the
device's ``Progress`` (cumulative since the round began), read back with ``read_progress``
so a broken agent cannot hand the coordinator an unbounded number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flwr.app import ConfigRecord

from clients.segment_wire import (  # noqa: F401 - attach_progress is this module's API too
    PROGRESS,
    RESUME,
    SEGMENT_S,
    attach_progress,
    parse_progress,
)
from fleet.common.errors import InputError
from fleet.rounds.progress import MAX_SECONDS, Progress, read_progress


@dataclass(frozen=True)
class SegmentRequest:
    """``segment_s``: seconds of training this call (None: the whole run); ``resume``: the
    coordinator's last view of this device (None: none sent)."""

    segment_s: float | None = None
    resume: Progress | None = None


def read_segment(cfg: ConfigRecord) -> SegmentRequest:
    """The segment keys of an instruction's ConfigRecord, checked (one line naming the key)."""
    raw = cfg.get(SEGMENT_S)
    segment_s = None
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise InputError(f"instruction {SEGMENT_S}: expected seconds, got {raw!r}")
        if not math.isfinite(raw) or not 0 <= raw <= MAX_SECONDS:
            raise InputError(f"instruction {SEGMENT_S}: {raw!r} is outside [0, {MAX_SECONDS:g}]")
        segment_s = float(raw) if raw > 0 else None
    text = cfg.get(RESUME)
    resume = None
    if text not in (None, "", "{}"):
        resume = parse_progress(text, f"instruction {RESUME}")
    return SegmentRequest(segment_s, resume)


def progress_of(reply: dict | None, row: dict) -> Progress:
    """Where the device stands: the agent's own ``progress`` (checked), else the row's counters
    (a board that did not train this call: an error, or a lock-only agent)."""
    got = (reply or {}).get(PROGRESS)
    if isinstance(got, dict):  # the board built it as the kernel's record: read it as one
        try:
            return read_progress(got, "the agent's progress")
        except InputError:
            pass  # fall back on the row, which fill_from_train checked
    out = Progress()
    for name in ("time_s", "samples", "energy_j", "accuracy", "end_freq_mhz", "budget_w"):
        value = row.get(name)
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
            setattr(out, name, float(value))
    batch = row.get("end_batch_size")
    if isinstance(batch, (int, float)) and math.isfinite(batch) and batch >= 1:
        out.end_batch_size = int(batch)
    if row.get("status") in ("ok", "late"):
        out.done, out.eta_s = 1.0, 0.0
    return read_progress(out.to_dict(), "the row's progress")  # bounded like the agent's


def behind_note(resume: Progress | None, reply: dict | None) -> str:
    """'' or a clause saying the board resumed behind where the coordinator had seen it (its
    checkpoint was lost or replaced: the work since is done again, never counted twice).
    ``reply``: the agent's train reply, whose ``resumed_from_samples`` is where it started."""
    if resume is None or not isinstance(reply, dict):
        return ""
    start = reply.get("resumed_from_samples")
    start = start if isinstance(start, (int, float)) else 0
    if start >= resume.samples:
        return ""
    return (
        f"the board resumed at {start:g} samples, behind the {resume.samples:g} last "
        "reported (its checkpoint was lost or replaced): that work is done again"
    )
