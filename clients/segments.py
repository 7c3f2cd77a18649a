"""The segmented round on a node: who am I, one bounded segment, its checkpoint and its pace.

Why segments: a round that lasts hours cannot be one request that either returns or is lost
(docs/architecture.md, "Segmented rounds"). The coordinator sends ``train.segment`` messages,
each carrying the round's instruction plus ``segment-s`` (device seconds to train now) and
``resume`` (JSON of ``fleet.rounds.progress.Progress``: where it last saw the device). The
device resumes from the later of that and its own checkpoint, runs one segment, and replies the
usual row (cumulative since the round began, ``running`` until the target) plus a ``progress``
record. Counters are cumulative, so a segment replayed after a lost reply replaces, never adds.

Identity: a restarted SuperNode may get a new node id, so the coordinator asks every node
``query.identify`` and maps node ids to device names from the ``identity`` reply.

This module holds the simulated side (the virtual clock, ``simulate_segment``) and what every
node shares (identity, the progress record); a board's segment is
``clients.hardware_client.hardware_segment``. The wire (record names, requests, progress) is
``clients/segment_wire.py``, shared with the coordinator.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from clients import content as rc
from clients import records
from clients.segment_wire import (  # noqa: F401 - decode_* are this module's API too
    IDENTITY,
    PACE_RANGE,
    RESUME,
    RUN_TOKEN,
    SEGMENT_S,
    attach_progress,
    decode_identity,
    decode_progress,
    read_segment,
)
from fleet.agent.protocol.confine import ConfineError, owned_dir
from fleet.common.errors import InputError
from fleet.common.names import check_name
from fleet.config.fields import MAX_TEXT
from fleet.config.fleetfile import DEVICE_TYPES, DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.planning.segmented_round import renamed
from fleet.rounds.device_round import TRAINED
from fleet.rounds.progress import MAX_SECONDS, Progress, later, read_progress
from fleet.rounds.virtual_clock import simulate_segment

MAX_CHECKPOINT_BYTES = 64 * 1024
KIND_SEGMENTS = 256  # segments kept per process (kind_segment): many kinds, several steps deep
CHECKPOINT_FORMAT = "powerfleet-segment-progress"

Sleep = Callable[[float], None]
WholeRound = Callable[[dict, RecordDict], RecordDict]
_KIND_SEGMENTS: OrderedDict[str, tuple[dict[str, object], Progress]] = OrderedDict()


# --------------------------------------------------------------------------- identity


def identify(node_config: dict, content: RecordDict) -> RecordDict:
    """The ``identity`` record: this node's device name, type and kind of client, and a paced
    simulated node's ``pace`` (device seconds per wall second).

    Deployment: from the node config (``device-name``, ``device-type``, ``client``).
    Simulation: ``partition-id`` indexes the fleet file the message's config names
    (``fleet-path``). Never raises: a problem is the record's ``error`` (and the device is the
    node's label), so the coordinator can say which node is misconfigured.
    """
    label = records.node_label(node_config)
    client = "hardware" if str(node_config.get("client", "")) == "hardware" else "simulated"
    out = ConfigRecord({"device": label, "device-type": "", "client": client})
    try:
        if node_config.get("device-name"):
            name = check_name("node config", "device-name", node_config["device-name"])
            dtype = node_config.get("device-type")
            if not isinstance(dtype, str) or dtype not in DEVICE_TYPES:
                raise InputError(
                    f"node config of {name}: device-type must be one of "
                    f"{', '.join(DEVICE_TYPES)}, got {dtype!r:.80}"
                )
            out["device"], out["device-type"] = name, dtype
            pace = NodeSettings.from_node_config(node_config).pace
            if pace > 0:  # a paced simulated device: the coordinator's wait before its 1st reply
                out["pace"] = pace
        else:
            cfg = rc.config(content, records.CONFIG) or ConfigRecord()
            fleet_path = cfg.get("fleet-path", "")
            if not isinstance(fleet_path, str) or len(fleet_path) > MAX_TEXT:
                raise InputError(f"identify: 'fleet-path' must be a path of <= {MAX_TEXT} chars")
            spec = records.device_spec_for(node_config, fleet_path)
            out["device"], out["device-type"] = spec.name, spec.device_type
    except (InputError, ValueError, TypeError) as exc:
        out["error"] = " ".join(str(exc).split())[:MAX_TEXT]
        if isinstance(exc, records.SpareNode):  # a larger federation than fleet: idle, not wrong
            out["spare"] = exc.devices
    return RecordDict({IDENTITY: out})


# --------------------------------------------------------------------------- node settings


@dataclass(frozen=True)
class NodeSettings:
    """What a simulated node's config says about segments: ``pace`` (device seconds per wall
    second; 0: no wait) and ``work-dir`` (where the device checkpoints; absent: simulation,
    where only the message's resume counts)."""

    pace: float = 0.0
    work_dir: str | None = None

    @classmethod
    def from_node_config(cls, nc: dict) -> NodeSettings:
        raw = nc.get("pace", 0.0)
        if raw in (None, ""):
            raw = 0.0
        try:
            pace = float(raw) if isinstance(raw, str) else raw
        except ValueError:
            pace = math.nan
        lo, hi = PACE_RANGE
        if (
            isinstance(pace, bool)
            or not isinstance(pace, (int, float))
            or not (pace == 0 or lo <= pace <= hi)
        ):
            raise InputError(
                f"node config 'pace': expected 0 (no wait) or device seconds per wall second "
                f"in [{lo:g}, {hi:g}], got {raw!r:.80}"
            )
        work = nc.get("work-dir")
        if work in (None, ""):
            return cls(float(pace), None)
        if not isinstance(work, str) or len(work) > MAX_TEXT:
            raise InputError(f"node config 'work-dir': expected a path of <= {MAX_TEXT} chars")
        if any(ord(c) < 32 or ord(c) == 127 for c in work):
            raise InputError("node config 'work-dir': control characters in the path")
        return cls(float(pace), work)

    def wait_s(self, device_s: float) -> float:
        """Wall seconds to wait after ``device_s`` device seconds of training (0: none)."""
        if self.pace <= 0 or not math.isfinite(device_s) or device_s <= 0:
            return 0.0
        return device_s / self.pace


# --------------------------------------------------------------------------- checkpoint


def instruction_key(cfg: ConfigRecord) -> str:
    """What makes two segment messages the same round of the same run (a checkpoint of another
    run or round is not ours): the run's id, the round and the work. Not the whole instruction:
    the coordinator re-plans the deadline (``run-settings``) and refreshes shipped profiles
    mid-round, and neither makes the samples already trained any less this round's."""
    keep: tuple[str, ...] = (RUN_TOKEN, "run-name", "server-round", "fleet-path", "model")
    keep += ("target-accuracy", "batch-sizes", "samples-to-accuracy", "efficiency-source")
    items = {k: cfg.get(k) for k in keep}
    text = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """The device's own record of its progress through one round, in its work directory:
    ``<work-dir>/<device>_<run>_r<round>.progress.json``, written atomically after every
    segment so a node restarted mid-round resumes where it was even when the coordinator's
    last word about it is older."""

    path: Path
    key: str

    @classmethod
    def at(cls, work_dir: str, device: str, run: str, server_round: int, key: str) -> Checkpoint:
        try:
            base = Path(owned_dir(work_dir))
        except ConfineError as exc:
            raise InputError(f"node config 'work-dir': {exc}") from None
        return cls(base / f"{device}_{run or 'run'}_r{server_round}.progress.json", key)

    def read(self) -> tuple[Progress | None, str]:
        """(progress, note): None and why when there is none or it is not this round's."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(MAX_CHECKPOINT_BYTES + 1)
        except FileNotFoundError:
            return None, ""
        except OSError as exc:
            return None, f"checkpoint {self.path} unreadable ({exc.strerror}); ignored"
        try:
            if len(raw) > MAX_CHECKPOINT_BYTES:
                raise InputError(f"{self.path}: larger than {MAX_CHECKPOINT_BYTES} bytes")
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
                raise InputError(f"{self.path}: not a {CHECKPOINT_FORMAT} file")
            if data.get("key") != self.key:
                return None, ""  # another run's (or instruction's) round: not ours
            return read_progress(data.get("progress"), str(self.path)), ""
        except (InputError, ValueError, RecursionError) as exc:
            return None, f"checkpoint ignored: {' '.join(str(exc).split())[:200]}"

    def write(self, progress: Progress) -> None:
        """Atomically: a reader sees the old checkpoint or the new one, never half of one."""
        doc = {"format": CHECKPOINT_FORMAT, "key": self.key, "progress": progress.to_dict()}
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


# --------------------------------------------------------------------------- one segment


def simulated_segment(
    node_config: dict,
    content: RecordDict,
    *,
    sleep: Sleep = time.sleep,
    whole_round: WholeRound | None = None,
) -> RecordDict:
    """One segment of a simulated device, as a plain function: the reply's content.

    Never raises for a problem of this device or of the message: the reply is then an
    ``error`` row naming the device and the field. A device whose learning is not a trace
    (host training) cannot stop mid-round: it runs its whole round in this segment through
    ``whole_round`` (the ClientApp's default round) and reports it final.
    """
    label = records.node_label(node_config)
    try:
        settings = NodeSettings.from_node_config(node_config)
        cfg = rc.need(content, records.CONFIG, ConfigRecord)
        ins = records.decode_instruction(cfg)
        spec = records.device_spec_for(node_config, ins.fleet_path)
        label = spec.name
        seconds, resume = read_segment(cfg)
    except KeyError:
        return records.reply_content(records.error_row(label, "no train instruction"))
    except InputError as exc:
        return records.reply_content(records.error_row(label, str(exc)))
    if spec.learning != "trace" and whole_round is not None:
        return _whole_round(node_config, content, resume, whole_round)
    try:
        checkpoint = None
        note = ""
        start = resume
        if settings.work_dir is not None:
            checkpoint = Checkpoint.at(
                settings.work_dir, spec.name, ins.run.name, ins.server_round, instruction_key(cfg)
            )
            own, note = checkpoint.read()
            start = later(resume, own) if own is not None else resume
        if checkpoint is None:  # a simulation: every device of a kind makes the same segment
            row, progress = kind_segment(
                spec, ins.efficiency_for(spec.name), ins.run, start, seconds
            )
        else:
            res, progress = simulate_segment(
                spec, ins.efficiency_for(spec.name), ins.run, start, seconds
            )
            if start.time_s > resume.time_s:
                res.segments = _unseen(spec, ins, resume, start) + res.segments
            row = res.to_dict()
    except InputError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
        return attach_progress(records.reply_content(row), resume)
    said = str(row.get("message") or "")
    if note:
        said = row["message"] = f"{note}; {said}" if said else note
    wait = settings.wait_s(progress.time_s - start.time_s)
    if wait > 0:
        sleep(wait)  # a paced device: the segment lasts its device time in wall time
    if checkpoint is not None:
        try:
            checkpoint.write(progress)
        except OSError as exc:
            row["message"] = f"checkpoint not written ({exc.strerror}); {said}".rstrip("; ")
    arrays = rc.arrays(content, records.ARRAYS) or ArrayRecord()
    send = ins.run.mode == "federated" and row["status"] in TRAINED
    reply = records.reply_content(row, arrays if send and records.has_weights(arrays) else None)
    return attach_progress(reply, progress)


def kind_segment(
    spec: DeviceSpec, shipped: Efficiency, run: RunSettings, start: Progress, seconds: float
) -> tuple[dict[str, object], Progress]:
    """``simulate_segment``'s row (a fresh dict) and progress for this device, computed once
    per process for all the devices of its kind.

    Why: a fleet of ``count`` identical devices (1,000 devices of six kinds in
    ``benchmarks/fleet_scale.py``) makes the same round on every device of a kind, and the
    replay is deterministic; a Ray actor playing hundreds of them computed each kind's segment
    hundreds of times, most of the ClientApp's work at 1,000 devices (docs/deploy-load.md). The
    key is everything the replay reads but the name: the device's spec without it, its shipped
    efficiency, the run settings, the resume point and the segment's length; the profile and
    trace files are parsed once per process by path already (``virtual_clock``). The row is
    the kind's under this device's name (``segmented_round.renamed``), as the direct engine
    copies its kinds' rows."""
    key = json.dumps(
        [repr(replace(spec, name="")), repr(shipped), repr(run), start.to_dict(), seconds],
        sort_keys=True,
        default=str,
    )
    hit = _KIND_SEGMENTS.get(key)
    if hit is None:
        res, progress = simulate_segment(spec, shipped, run, start, seconds)
        hit = _KIND_SEGMENTS[key] = (res.to_dict(), progress)
        if len(_KIND_SEGMENTS) > KIND_SEGMENTS:
            _KIND_SEGMENTS.popitem(last=False)
    else:
        _KIND_SEGMENTS.move_to_end(key)
    row, progress = hit
    return dict(renamed(row, spec.name)), progress


def _unseen(spec, ins: records.TrainInstruction, resume: Progress, start: Progress) -> list:
    """The stretches from the coordinator's ``resume`` to this device's checkpoint ``start``:
    work done in a segment whose reply never arrived (the coordinator restarted, the reply was
    lost). The counters are cumulative and already hold it, but the round's record of stretches
    (joined by the coordinator, ``fleet.planning.round_logic.join_segments``) would keep a hole
    there; the replay is deterministic, so the device replays that stretch without waiting."""
    gap, _ = simulate_segment(
        spec, ins.efficiency_for(spec.name), ins.run, resume, start.time_s - resume.time_s
    )
    return list(gap.segments)


def _whole_round(
    node_config: dict, content: RecordDict, resume: Progress, whole_round: WholeRound
) -> RecordDict:
    """Host training in one segment: the default round, with the progress its row implies."""
    reply = whole_round(node_config, content)
    row = records.decode_reply(
        rc.need(reply, records.METRICS, MetricRecord), rc.need(reply, records.REPORT, ConfigRecord)
    )

    def num(key: str, default: float) -> float:
        v = row.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else default

    trained = row.get("status") in TRAINED
    progress = resume.replace(
        time_s=min(num("time_s", resume.time_s), MAX_SECONDS),
        samples=num("samples", resume.samples),
        energy_j=num("energy_j", resume.energy_j),
        accuracy=row["accuracy"] if trained else resume.accuracy,
        end_batch_size=row.get("end_batch_size"),
        end_freq_mhz=row.get("end_freq_mhz"),
        budget_w=row.get("budget_w"),
        power_w=row.get("mean_power_w"),
        done=1.0 if trained else resume.done,
        eta_s=0.0 if trained else None,
        segments=resume.segments + 1,
    )
    try:
        checked = read_progress(progress.to_dict(), "host training row")
    except InputError:  # a row out of bounds: the row says what happened, the progress stays
        checked = resume.replace(segments=resume.segments + 1)
    return attach_progress(reply, checked)
