"""The wire format between the coordinator and the devices, as plain functions.

Why one module for both directions: the coordinator builds what the devices parse and parses
what they build, and the two sides drift apart the moment the key names live in two places. It
sits under ``clients/`` because a device must be able to decode its instruction without the
coordinator's code; ``strategies/coordinator.py`` imports it from here.

Instruction (server -> device), a ``RecordDict``:
    ``arrays``  ArrayRecord: the model weights, or empty when the run ships no weights
                (1,000 devices on the virtual clock need none).
    ``config``  ConfigRecord: the efficiency vector (``batch-sizes`` list[int] and
                ``samples-to-accuracy`` list[float], -1.0 = never reached the target),
                ``efficiency-source``, and the fleet's run settings (``RunSettings``, one
                key per field: ``run-name``, ``model``, ``efficiency`` (the fleet's path),
                ``target-accuracy``, ``mode``, ``objective``, ``rounds``, ``optimizer``,
                ``lr-ref-batch``, ``lr-ref``, ``seed``, and ``run-settings``: the other
                ``[run]`` keys that are set, as a JSON object by their fleet-file names,
                read back through the same schema, ``RunSettings.more``), ``fleet-path``
                (simulation: where the device finds its fleet entry) and ``server-round``.

Reply (device -> server), a ``RecordDict``:
    ``metrics`` MetricRecord: every numeric column of the report row (``batch-size``,
                ``freq-mhz``, ``time-s``, ``energy-j``, ...); a value the device does not have
                is left out (a device without a power limit has no ``budget-w``).
                ``num-examples`` is the samples trained (FedAvg's weight).
    ``report``  ConfigRecord: the text columns (``device``, ``device-type``, ``status``,
                ``message``, ``profile``, ``efficiency``, ``learning``, ``trace``...) and
                ``segments`` and ``guard_events`` (lists, as JSON).
    ``arrays``  ArrayRecord, only in federated mode and only from a device that trained.

Planning (deadline objective without ``[run] deadline_s``, before each round's train message):
    query   ``config``: the round's instruction, as above (no weights); the device trains nothing.
    reply   ``plan`` ConfigRecord: ``device``, ``fastest-finish-s`` (absent when the device
            cannot finish), ``energy-j`` (that fastest plan's predicted energy), ``message``.
    The coordinator sets the deadline (``fleet.planning.deadline_plan.plan_deadline``) and puts it
    in the train instruction's run settings (``run-settings`` -> ``deadline_s``), where the device
    round reads the objective's context.

Decoding a reply gives a dict with exactly the keys of ``fleet.rounds.device_round.row_fields()``,
so rows from Flower and from the direct engine are interchangeable in ``fleet.reports.report``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from clients import content as rc
from clients.efficiency_wire import decode_efficiencies, learned_efficiency
from fleet.common.errors import InputError
from fleet.common.names import check_name
from fleet.config.fields import (
    MAX_TEXT,
    text_field,
)
from fleet.config.fleetfile import (
    DEVICE_TYPES,
    LEARNING,
    DeviceSpec,
    Fleet,
    RunSettings,
    load_fleet,
    read_more,
)
from fleet.config.schema import RUN_KEYS, read_table
from fleet.core.efficiency import Efficiency
from fleet.method.budget import read_budget
from fleet.rounds.device_round import LIST_FIELDS, TRAINED, DeviceResult, row_fields

# RecordDict keys
ARRAYS = "arrays"
CONFIG = "config"
MAX_PROFILES_TEXT = 16 * 1024 * 1024  # profile CSVs the coordinator ships back
PROFILES = "profiles"  # instruction: the store's profiles shipped back (JSON)
EFFICIENCIES = "efficiencies"  # instruction: each device's learnt efficiency (JSON)
PROFILE_CSV = "profile-csv"  # reply: the profile a board made or changed this round
PROFILE_INFO = "profile-info"  # reply: its provenance (JSON)
METRICS = "metrics"
REPORT = "report"
PLAN = "plan"

UNREACHED = -1.0  # samples-to-accuracy of a batch size that never reached the target

# Row columns travel by their value: numbers in the MetricRecord, text in the ConfigRecord, None
# by its absence (so a column added to DeviceResult travels without touching this module).


def wire_key(field_name: str) -> str:
    """Flower record keys use dashes, report columns use underscores."""
    return field_name.replace("_", "-")


# --------------------------------------------------------------------------- instruction


@dataclass(frozen=True)
class TrainInstruction:
    """What the coordinator tells every device at the start of a round: the fleet's run
    settings as they are (one settings object, encoded and decoded here), the shipped
    efficiency, and where the round stands."""

    efficiency: Efficiency
    run: RunSettings
    fleet_path: str = ""
    server_round: int = 0
    # the coordinator's profile store, shipped back: {device: {"origin": "stored"|"sibling",
    # "csv": text}} for boards met before (or whose type was); see strategies/profiles.py
    profiles: dict[str, dict[str, str]] = field(default_factory=dict)
    # what the fleet learnt of each device's samples-to-target (fleet/trust/efficiency_store):
    # {device: {"batch_sizes", "samples_to_accuracy", "std", "learned_from"}}
    efficiencies: dict[str, dict[str, Any]] = field(default_factory=dict)

    def efficiency_for(self, device: str) -> Efficiency:
        """The efficiency this device trains with: its own learnt one when the coordinator
        sent it, else the fleet's shipped vector."""
        own = self.efficiencies.get(device)
        if own is None:
            return self.efficiency
        return learned_efficiency(own, f"{self.efficiency.source} (learned for {device})")


def encode_efficiency(eff: Efficiency) -> tuple[list[int], list[float]]:
    """Two homogeneous lists (a ConfigRecord rejects None and mixed lists): NaN -> -1.0."""
    bs = [int(b) for b in eff.batch_sizes]
    samples = [UNREACHED if math.isnan(eff.samples[b]) else float(eff.samples[b]) for b in bs]
    return bs, samples


def decode_efficiency(
    batch_sizes: Sequence[int | float | str | bytes],
    samples: Sequence[int | float | str | bytes],
    source: str,
) -> Efficiency:
    """A ConfigRecord's lists may hold any scalar: int()/float() refuse the wrong ones with the
    TypeError or ValueError that ``decode_instruction`` turns into one InputError."""
    values: list[float | None] = [None if float(n) < 0 else float(n) for n in samples]
    return Efficiency.from_vector([int(b) for b in batch_sizes], values, source=source)


def encode_instruction(ins: TrainInstruction) -> ConfigRecord:
    bs, samples = encode_efficiency(ins.efficiency)
    run = ins.run
    return ConfigRecord(
        {
            "batch-sizes": bs,
            "samples-to-accuracy": samples,
            # the seed spread per batch size (0: unknown): how far a learning device trusts it
            "efficiency-std": [float(ins.efficiency.std.get(b, 0.0)) for b in bs],
            "efficiency-source": ins.efficiency.source,
            # the [run] keys with a wire key of their own (the schema's ``Key.wire``), typed
            **{k.wire: k.type(getattr(run, k.name)) for k in RUN_KEYS if k.wire},
            RUN_SETTINGS: json.dumps(run.more()),
            "fleet-path": ins.fleet_path,
            "server-round": int(ins.server_round),
            PROFILES: json.dumps(ins.profiles),
            EFFICIENCIES: json.dumps(ins.efficiencies),
        }
    )


MAX_RUN_SETTINGS_CHARS = 64 * 1024
RUN_SETTINGS = "run-settings"  # the [run] keys without a wire key, as JSON (RunSettings.more)
MAX_BATCH_SIZES = 4096
# wire key -> the fleet file's [run] field, as the schema names them (``Key.wire``)
_RUN_KEYS = {k.wire: k.name for k in RUN_KEYS if k.wire}


def _wire_text(t: dict, key: str, where: str, default: str) -> str:
    """A text field that may be empty on the wire ("" = not given), else as the fleet file's."""
    return default if t.get(key, "") == "" else text_field(t, key, where)


_RUNS: dict[str, RunSettings] = {}
MAX_RUNS_KEPT = 64  # distinct [run] settings a process keeps decoded (runs, rounds, objectives)


def _decode_run(cfg: ConfigRecord, source: str, where: str) -> RunSettings:
    """The [run] settings from the wire through the fleet file's own schema
    (``fleet.config.schema.RUN_KEYS``), decoded once per distinct wire text.

    Why the memo: every segment message of a round carries the same settings, and checking
    them through the schema was a sixth of the ClientApp's work per segment at 1,000 devices.
    The key is the exact wire values (``repr``: ``1``, ``1.0`` and ``True`` differ) and the
    source; only settings that passed every check are kept, and ``RunSettings`` is frozen."""
    key = repr((source, [(k, cfg[k]) for k in _RUN_KEYS if k in cfg], cfg.get(RUN_SETTINGS, "{}")))
    got = _RUNS.get(key)
    if got is None:
        got = _check_run(cfg, source, where)
        if len(_RUNS) >= MAX_RUNS_KEPT:
            _RUNS.clear()
        _RUNS[key] = got
    return got


def _check_run(cfg: ConfigRecord, source: str, where: str) -> RunSettings:
    if "target-accuracy" not in cfg:
        raise InputError(f"{where}: missing key 'target-accuracy'")
    t = {field: cfg[key] for key, field in _RUN_KEYS.items() if key in cfg}
    texts = ("name", "model", "efficiency")  # "" on the wire: not given
    scalars = [k for k in RUN_KEYS if k.name in _RUN_KEYS.values() and k.name not in texts]
    typed = read_table({k: v for k, v in t.items() if k not in texts}, scalars, lambda _: where)
    raw_more = cfg.get(RUN_SETTINGS, "{}")
    if not isinstance(raw_more, str) or len(raw_more) > MAX_RUN_SETTINGS_CHARS:
        raise InputError(
            f"{where}: '{RUN_SETTINGS}' must be JSON of at most {MAX_RUN_SETTINGS_CHARS} chars"
        )
    try:
        more = read_more(json.loads(raw_more), f"{where}: '{RUN_SETTINGS}'")
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(
            f"{where}: '{RUN_SETTINGS}' is not valid JSON (or nested too deeply)"
        ) from None
    name = t.get("name", "")
    return RunSettings(
        name=check_name(where, "run name", name) if name != "" else "",
        model=_wire_text(t, "model", where, ""),
        efficiency=_wire_text(t, "efficiency", where, source) or source,
        **typed,  # type: ignore[arg-type]
        **more,  # type: ignore[arg-type]
    )


def decode_instruction(cfg: ConfigRecord) -> TrainInstruction:
    """Parse and validate; a missing or bad key is one InputError naming it."""
    where = "train instruction"
    try:
        source = str(cfg.get("efficiency-source", "<coordinator>"))[:MAX_TEXT]
        bs, samples = cfg["batch-sizes"], cfg["samples-to-accuracy"]
        if not isinstance(bs, list) or not isinstance(samples, list):
            raise InputError(f"{where}: 'batch-sizes' and 'samples-to-accuracy' must be lists")
        if max(len(bs), len(samples)) > MAX_BATCH_SIZES:
            raise InputError(f"{where}: more than {MAX_BATCH_SIZES} batch sizes")
        if any(isinstance(v, float) and not math.isfinite(v) for v in samples):
            raise InputError(f"{where}: 'samples-to-accuracy' holds a non-finite number")
        eff = decode_efficiency(list(bs), list(samples), source)
        std = cfg.get("efficiency-std", [])
        if not isinstance(std, list) or len(std) not in (0, len(bs)):
            raise InputError(f"{where}: 'efficiency-std' must be a list as long as 'batch-sizes'")
        for i, v in enumerate(std):  # as long as bs (checked above); bs[i] keeps its type
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e15:
                raise InputError(f"{where}: 'efficiency-std' holds {v!r}; expected numbers >= 0")
            if v > 0:
                eff.std[int(bs[i])] = float(v)
        run = _decode_run(cfg, source, where)
        server_round = cfg.get("server-round", 0)
        if isinstance(server_round, bool) or not isinstance(server_round, int) or server_round < 0:
            raise InputError(f"{where}: 'server-round' must be an integer >= 0")
        fleet_path = cfg.get("fleet-path", "")
        if not isinstance(fleet_path, str) or len(fleet_path) > MAX_TEXT:
            raise InputError(f"{where}: 'fleet-path' must be a path of at most {MAX_TEXT} chars")
        raw_profiles = cfg.get(PROFILES, "{}")
        if not isinstance(raw_profiles, str) or len(raw_profiles) > MAX_PROFILES_TEXT:
            raise InputError(
                f"{where}: '{PROFILES}' must be JSON text of at most {MAX_PROFILES_TEXT} chars"
            )
        profiles = json.loads(raw_profiles)
        if not isinstance(profiles, dict):
            raise InputError(f"{where}: '{PROFILES}' is not a JSON object")
        efficiencies = decode_efficiencies(cfg.get(EFFICIENCIES, "{}"), where, EFFICIENCIES)
        ins = TrainInstruction(
            eff, run, fleet_path=fleet_path, server_round=server_round, profiles=profiles,
            efficiencies=efficiencies,
        )  # fmt: skip
    except KeyError as exc:
        raise InputError(f"{where}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{where}: bad value: {' '.join(str(exc).split())}") from None
    return ins


# --------------------------------------------------------------------------- reply


def encode_reply(row: dict[str, object]) -> tuple[MetricRecord, ConfigRecord]:
    """A report row (DeviceResult.to_dict()) -> (MetricRecord, ConfigRecord)."""
    metrics = MetricRecord()
    report = ConfigRecord()
    for name in row_fields():
        key, value = wire_key(name), row.get(name)
        if name in LIST_FIELDS:
            report[key] = json.dumps(value or [])
        elif value is None:
            continue
        elif isinstance(value, bool) or isinstance(value, str):
            report[key] = value
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                metrics[key] = value
    samples = row.get("samples")
    samples = samples if isinstance(samples, (int, float)) and samples > 0 else 0
    metrics["num-examples"] = int(round(float(samples))) if row.get("status") in TRAINED else 0
    return metrics, report


def decode_reply(metrics: MetricRecord, report: ConfigRecord) -> dict[str, object]:
    """(MetricRecord, ConfigRecord) -> a row with DeviceResult's keys, in its order."""
    row: dict[str, object] = {}
    for name in row_fields():
        key = wire_key(name)
        if name in LIST_FIELDS:
            try:
                row[name] = json.loads(str(report.get(key, "[]")))
            except ValueError:
                row[name] = []
        elif key in metrics:
            row[name] = metrics[key]
        else:
            row[name] = report.get(key)
    return row


def reply_content(row: dict[str, object], arrays: ArrayRecord | None = None) -> RecordDict:
    """The reply's RecordDict: the row's records, plus weights when the device sends them."""
    metrics, report = encode_reply(row)
    content = RecordDict({METRICS: metrics, REPORT: report})
    if arrays is not None:
        content[ARRAYS] = arrays
    return content


def plan_content(
    device: str, fastest_s: float | None, energy_j: float | None = None, message: str = ""
) -> RecordDict:
    """A device's planning reply (see the module docstring); None values are left out."""
    cfg = ConfigRecord({"device": device, "message": message})
    for key, value in (("fastest-finish-s", fastest_s), ("energy-j", energy_j)):
        if value is not None and math.isfinite(value):
            cfg[key] = float(value)
    return RecordDict({PLAN: cfg})


def decode_plan(content: RecordDict) -> tuple[str, float | None, str]:
    """(device, fastest finish or None, message) from a planning reply; malformed -> None."""
    cfg = rc.config(content, PLAN)
    if cfg is None:
        return "", None, "reply without a plan record"
    raw = cfg.get("fastest-finish-s")
    fastest = float(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else None
    return str(cfg.get("device", "")), fastest, str(cfg.get("message", ""))


def attach_profile(content: RecordDict, csv_text: str, info: dict[str, object]) -> RecordDict:
    """Put the profile this board made or changed this round (CSV text) and its provenance
    (origin, probes, board type, L4T, serial, ...) into the reply, for the coordinator's store."""
    report = rc.need(content, REPORT, ConfigRecord)
    report[PROFILE_CSV] = csv_text
    report[PROFILE_INFO] = json.dumps(info, default=str)
    return content


def reply_profile(report: ConfigRecord) -> tuple[str, dict[str, object]] | None:
    """(CSV text, provenance) a reply carries, or None (the board's profile did not change)."""
    text = report.get(PROFILE_CSV)
    if not isinstance(text, str) or not text:
        return None
    try:
        info = json.loads(str(report.get(PROFILE_INFO, "{}")))
    except ValueError:
        info = {}
    return text, info if isinstance(info, dict) else {}


def error_row(device: str, message: str, device_type: str = "", status: str = "error") -> dict:
    """A row for a device that could not report properly (it stays in the table)."""
    return DeviceResult(device, device_type, status=status, message=message).to_dict()


def has_weights(arrays: ArrayRecord | None) -> TypeGuard[ArrayRecord]:
    return arrays is not None and len(arrays) > 0


def state_dict_of(arrays: ArrayRecord) -> dict:
    """The weights as a torch state_dict. Flower's ``to_torch_state_dict`` looks for torch only
    among the modules already imported (else "PyTorch is required..."), so import it first."""
    import torch  # noqa: F401 - needed in sys.modules, see above

    return arrays.to_torch_state_dict()


# --------------------------------------------------------------------------- device identity


def _config_str(nc: dict, key: str, where: str, required: bool = True) -> str | None:
    value = nc.get(key)
    if value is None or value == "":
        if required:
            raise InputError(f"{where}: missing node config '{key}'")
        return None
    if not isinstance(value, str):
        raise InputError(f"{where}: node config '{key}' must be a string, got {value!r}")
    if len(value) > MAX_TEXT or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(
            f"{where}: node config '{key}' must be at most {MAX_TEXT} printable characters"
        )
    return value


def spec_from_node_config(nc: dict) -> DeviceSpec:
    """A SuperNode's --node-config (deployment) -> DeviceSpec, with the fleet file's validators.

    Keys: ``device-name``, ``device-type``, ``budget-w`` (watts or "none"), ``profile``, optional
    ``data``, ``budget-schedule`` ("0:7,600:4.5"), ``learning`` (trace | train).
    """
    name = check_name("node config", "device-name", _config_str(nc, "device-name", "node config"))
    where = f"node config of {name}"
    dtype = _config_str(nc, "device-type", where)
    if dtype not in DEVICE_TYPES:
        raise InputError(
            f"{where}: unknown device type {dtype!r:.80}; expected one of {', '.join(DEVICE_TYPES)}"
        )
    for key in ("budget-w", "budget-schedule"):  # bounded before the grammar reads them
        if isinstance(nc.get(key), str) and len(nc[key]) > MAX_TEXT:
            raise InputError(f"{where}: node config '{key}' longer than {MAX_TEXT} characters")
    budget, schedule = read_budget(
        where, nc.get("budget-w"), nc.get("budget-schedule"), ("budget-w", "budget-schedule")
    )
    learning = _config_str(nc, "learning", where, required=False) or "trace"
    if learning not in LEARNING:
        raise InputError(f"{where}: learning must be one of {', '.join(LEARNING)}")
    profile = _config_str(nc, "profile", where, required=False) or ""
    data = _config_str(nc, "data", where, required=False)
    return DeviceSpec(name, dtype, budget, profile, data, schedule, learning)


@functools.lru_cache(maxsize=16)
def _cached_fleet(path: str, mtime_ns: int) -> Fleet:
    return load_fleet(path)


def fleet_for(path: str) -> Fleet:
    """Load a fleet file once per process (every virtual device of a Ray actor shares it)."""
    if not path:
        raise InputError("no fleet file: the instruction has an empty 'fleet-path'")
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        raise InputError(f"{path}: fleet file not found") from None
    return _cached_fleet(path, mtime)


class SpareNode(InputError):
    """A simulated SuperNode whose partition-id is past the fleet's last device: the federation
    is larger than the fleet. It has nothing to run; the coordinator counts such nodes and says
    so once (``strategies/segmented.py``) instead of an error per node."""

    def __init__(self, partition_id: int, fleet_path: str, devices: int) -> None:
        super().__init__(
            f"partition-id {partition_id} has no device: {fleet_path} lists {devices} devices"
        )
        self.devices = devices


def device_spec_for(node_config: dict, fleet_path: str) -> DeviceSpec:
    """Which device am I? Deployment: my node config. Simulation: my partition's fleet entry."""
    if "device-name" in node_config:
        return spec_from_node_config(node_config)
    if "partition-id" in node_config:
        pid = int(node_config["partition-id"])
        devices = fleet_for(fleet_path).devices
        if not 0 <= pid < len(devices):
            raise SpareNode(pid, fleet_path, len(devices))
        return devices[pid]
    raise InputError(
        "node config names no device: give the SuperNode --node-config with device-name, "
        "device-type, budget-w and profile"
    )


def node_label(node_config: dict) -> str:
    """A name for a device whose spec could not be built (for its error row)."""
    if node_config.get("device-name"):
        return str(node_config["device-name"])
    if "partition-id" in node_config:
        return f"partition-{node_config['partition-id']}"
    return "unknown-device"
