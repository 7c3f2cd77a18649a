"""The wire of a segmented round: segment requests, progress replies, identities.

Why its own module beside ``records.py``: a round that lasts hours is driven in bounded segments
(docs/architecture.md, "Segmented rounds"), which adds three small exchanges to the one-shot
instruction/reply of ``records.py`` and nothing else changes; both sides (the ClientApp and the
coordinator's driver) import the key names from here so they cannot drift apart.

Segment request, message type ``train.segment``: the round's instruction ConfigRecord
(``records.encode_instruction``) plus
    ``segment-s``  float > 0: device-clock seconds of training in this segment;
    ``resume``     JSON of ``fleet.rounds.progress.Progress``: where the coordinator last saw
                   the device (the device resumes from the later of this and its checkpoint).
Segment reply: the usual row (``records.reply_content``), cumulative since the round began,
status ``running`` until the device reaches the target, plus ConfigRecord ``progress`` with
key ``progress`` (JSON of ``Progress``).
Where it ran: every train reply (one-shot or segment) carries ConfigRecord ``ran-on`` with key
``node``: the Ray node of a simulation (its IP and node id: two nodes of one host differ), the
host's name in deployment; the coordinator's report lists them per device (``ran_on``).
Identity, message type ``query.identify``: the device behind a node (a restarted SuperNode may
come back under a new node id), ConfigRecord ``identity``: ``device``, ``device-type``,
``client``; or ``error``.
"""

from __future__ import annotations

import json
import math

from flwr.app import ConfigRecord, RecordDict

from clients import content as rc
from fleet.common.errors import InputError
from fleet.common.names import check_name
from fleet.rounds.progress import MAX_SECONDS, Progress, RecordError

SEGMENT = "segment"  # the train action: message type "train.segment"
IDENTIFY = "identify"  # the query action: message type "query.identify"
SEGMENT_S = "segment-s"
RESUME = "resume"
PROGRESS = "progress"
IDENTITY = "identity"
RUN_TOKEN = "run-token"  # instruction: the run's own id (a checkpoint of another run is not ours)
RUNNING = "running"  # a segment reply's status while the device has not reached its target
MAX_PROGRESS_CHARS = 64 * 1024  # a learning device's state rides along (a few KB)
RAN_ON = "ran-on"
MAX_NODE_CHARS = 200
PACE_RANGE = (1e-3, 1e9)  # device seconds per wall second, when pacing at all


def segment_config(base: ConfigRecord, segment_s: float, resume: Progress) -> ConfigRecord:
    """A copy of the round's instruction for one segment (never mutates ``base``)."""
    cfg = ConfigRecord(dict(base))
    cfg[SEGMENT_S] = float(segment_s)
    cfg[RESUME] = json.dumps(resume.to_dict())
    return cfg


def read_segment(cfg: ConfigRecord) -> tuple[float, Progress]:
    """(segment seconds, resume progress) of a segment request; one line naming a bad key;
    an absent ``resume`` is the round's start."""
    where = "segment request"
    if SEGMENT_S not in cfg:
        raise InputError(f"{where}: missing key '{SEGMENT_S}'")
    raw = cfg.get(SEGMENT_S)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise InputError(f"{where}: '{SEGMENT_S}' must be a number of seconds")
    if not math.isfinite(raw) or not 0 < raw <= MAX_SECONDS:
        raise InputError(f"{where}: '{SEGMENT_S}' must be in (0, {MAX_SECONDS:g}], got {raw!r}")
    if cfg.get(RESUME, "") in ("", "{}"):
        return float(raw), Progress()
    return float(raw), parse_progress(cfg.get(RESUME), f"{where}: '{RESUME}'")


def parse_progress(text: object, where: str) -> Progress:
    if not isinstance(text, str) or len(text) > MAX_PROGRESS_CHARS:
        raise InputError(f"{where}: expected JSON text of at most {MAX_PROGRESS_CHARS} chars")
    try:
        return Progress.from_json(text, where)
    except RecordError as exc:  # a refused field, named
        raise InputError(str(exc)) from None
    except (ValueError, RecursionError):
        raise InputError(f"{where}: not valid JSON") from None


def attach_progress(content: RecordDict, progress: Progress | None) -> RecordDict:
    """Put the device's progress into a segment reply (nothing when it is unknown)."""
    if progress is not None:
        content[PROGRESS] = ConfigRecord({PROGRESS: json.dumps(progress.to_dict())})
    return content


def decode_progress(content: RecordDict) -> Progress | None:
    """The progress a segment reply carries, checked; None when it carries none."""
    cfg = rc.config(content, PROGRESS)
    if cfg is None or PROGRESS not in cfg:
        return None
    return parse_progress(cfg[PROGRESS], f"segment reply: '{PROGRESS}'")


def progress_of(content: RecordDict, device: str) -> Progress:
    """The progress a segment reply carries, checked; one line naming the device and field."""
    cfg = rc.config(content, PROGRESS)
    if cfg is None:
        raise InputError(f"device {device}: segment reply without a '{PROGRESS}' record")
    return parse_progress(cfg.get(PROGRESS), f"device {device}: reply '{PROGRESS}'")


def identity_content(device: str, device_type: str, client: str, error: str = "") -> RecordDict:
    cfg = ConfigRecord({"device": device, "device-type": device_type, "client": client})
    if error:
        cfg["error"] = error
    return RecordDict({IDENTITY: cfg})


def decode_identity(content: RecordDict) -> dict[str, str]:
    """The identity reply as a plain dict of strings (empty when the reply has none)."""
    cfg = rc.config(content, IDENTITY)
    return {str(k): str(v) for k, v in cfg.items()} if cfg is not None else {}


def spare_of(content: RecordDict) -> int | None:
    """The fleet's device count when the node is a spare simulated SuperNode (its partition-id
    is past the fleet's last device), else None."""
    cfg = rc.config(content, IDENTITY)
    spare = cfg.get("spare") if cfg is not None else None
    return spare if isinstance(spare, int) and not isinstance(spare, bool) else None


def pace_of(content: RecordDict) -> float | None:
    """The device seconds per wall second a paced simulated node says it lives (its segments
    take at least ``segment_s / pace`` of wall time); None when it says none or nonsense."""
    cfg = rc.config(content, IDENTITY)
    pace = cfg.get("pace") if cfg is not None else None
    if isinstance(pace, bool) or not isinstance(pace, (int, float)):
        return None
    lo, hi = PACE_RANGE
    return float(pace) if lo <= pace <= hi else None


def identity_of(content: RecordDict) -> str:
    """The device name a node says it runs; InputError when it says none or an invalid one."""
    cfg = rc.config(content, IDENTITY)
    if cfg is None:
        raise InputError(f"identify reply without an '{IDENTITY}' record")
    if cfg.get("error"):
        raise InputError(f"identify: {str(cfg['error'])[:300]}")
    return check_name("identify reply", "device", cfg.get("device", ""))


def attach_node(content: RecordDict, node: str) -> RecordDict:
    """Say in a reply where it was computed (``ran-on``)."""
    content[RAN_ON] = ConfigRecord({"node": str(node)[:MAX_NODE_CHARS]})
    return content


def node_of(content: RecordDict) -> str | None:
    """Where a reply says it was computed; None when it says nothing readable (a reply from
    another machine: printable text of at most ``MAX_NODE_CHARS``, else ignored)."""
    cfg = rc.config(content, RAN_ON)
    node = cfg.get("node") if cfg is not None else None
    if not isinstance(node, str) or not 0 < len(node) <= MAX_NODE_CHARS:
        return None
    return node if node.isprintable() else None
