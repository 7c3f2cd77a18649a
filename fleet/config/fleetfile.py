"""The fleet TOML: which devices, on which budgets, with which profiles and data.

One file drives both a simulation and a real deployment (docs/architecture.md), so it says
everything a device needs and nothing about how it is run. Paths are relative to the file. A
device entry with ``count = N`` stands for N identical devices (``name-0001`` ...), which is how
a 1,000-device what-if fleet stays a ten-line file. Every problem is one ``InputError`` naming
the file, the device and the field; nothing falls back to a silent default. Device and run
names use the one safe alphabet of ``fleet.common.names``; what is read is bounded (``MAX_*`` below:
file size, devices after ``count``, string lengths) and every number is finite and in range.

    [run]
    name = "mixed"
    model = "resnet18"
    efficiency = "../efficiency/resnet18_cifar10-proxy.csv"  # what the coordinator ships
    target_accuracy = 0.92
    mode = "local"            # local: devices keep their weights; federated: FedAvg
    objective = "time"        # or "energy"
    rounds = 1

    [[devices]]
    name = "nano-1"
    type = "jetson-nano"
    budget_w = 4.5            # watts ("4.5 W" too), "none", "unlimited" or "inf"
    budget_schedule = [[0, 7.0], [600, 4.5]]   # optional: (s into training, watts), in order
    profile = "../profiles/nano_resnet18.csv"
    data = "../efficiency/resnet18_svhn.csv"    # the device's convergence trace (virtual clock)

A real board met for the first time has no profile yet: an entry with ``client = "hardware"``
may omit ``profile`` or name a file that does not exist yet. The board profiles on first
contact and the coordinator keeps what it returns in its profile store (``[run] profile_store``,
default: the run directory's ``profile-store``; fleet/trust/store.py).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fleet.common.errors import InputError
from fleet.common.names import check_name, is_safe
from fleet.config.device_types import DEVICE_TYPES
from fleet.config.fields import (
    MAX_DEVICES,
    MAX_FLEET_BYTES,
    choice_field,
    require_field,
    show_value,
    text_field,
)
from fleet.config.locate import locator
from fleet.config.schema import (
    CLIENTS,
    DEVICE_KEYS,
    FLEET_TABLES,
    LEARNING,
    MODES,
    RUN_KEYS,
    check_keys,
    check_value,
    read_table,
)
from fleet.method.budget import BudgetStep, format_budget, format_schedule, read_budget

__all__ = ["CLIENTS", "LEARNING", "MODES", "DeviceSpec", "Fleet", "RunSettings", "load_fleet"]


@dataclass(frozen=True)
class DeviceSpec:
    """One device of the fleet, fully resolved (absolute paths, expanded counts)."""

    name: str
    device_type: str
    budget_w: float | None
    profile: str
    data: str | None
    schedule: tuple[BudgetStep, ...] = ()
    learning: str = "trace"
    client: str = "replay"  # replay: a profile replayed here; hardware: a board (its own files)

    def to_node_config(self) -> dict[str, str]:
        """The flat key/values a SuperNode's --node-config carries in deployment.

        Budgets travel as text in the budget grammar's exact form (``fleet.method.budget``:
        ``format_budget``, ``format_schedule``), so the device reads back the very number the
        fleet file holds.
        """
        cfg: dict[str, str] = {
            "device-name": self.name,
            "device-type": self.device_type,
            "budget-w": format_budget(self.budget_w),
            "profile": self.profile,
        }
        if self.data:
            cfg["data"] = self.data
        if self.schedule:
            cfg["budget-schedule"] = format_schedule(self.schedule)
        if self.learning != "trace":
            cfg["learning"] = self.learning
        return cfg


@dataclass(frozen=True)
class RunSettings:
    """The ``[run]`` table, typed: exactly the keys of ``fleet.config.schema.RUN_KEYS``, in
    their order, with their defaults (a test keeps the two equal)."""

    name: str
    model: str
    efficiency: str
    target_accuracy: float
    mode: str = "local"
    objective: str = "time"
    rounds: int = 1
    optimizer: str = "adam"
    lr_ref_batch: int = 128
    lr_ref: float = 5e-4
    seed: int = 0
    deadline_s: float | None = None
    ship_weights: bool = True
    weights: str | None = None
    data_dir: str | None = None
    learn_efficiency: str = "online"
    eval_every_samples: int | None = None
    max_samples: int | None = None
    guard_window_s: float | None = None
    efficiency_store: str | None = None
    profile_store: str | None = None
    input_shape: str | None = None
    ray_address: str | None = None
    ray_device_cpus: int | None = None
    ray_device_gpus: float | None = None

    def more(self) -> dict[str, object]:
        """The settings without a wire key of their own (``Key.wire``) that are set (not
        None), by their [run] names: what the train instruction carries as one JSON object
        (``clients/records.py``)."""
        return {k.name: getattr(self, k.name) for k in MORE_KEYS
                if getattr(self, k.name) is not None}  # fmt: skip


# The keys without a wire key of their own (``Key.wire``): they travel together in the train
# instruction (clients/records.py) as ``RunSettings.more()`` and come back through ``read_more``.
MORE_KEYS = tuple(k for k in RUN_KEYS if not k.wire)


def read_more(table: object, where: str) -> dict[str, object]:
    """``RunSettings.more()`` read back (a JSON object off the wire) through the schema: an
    unknown key, a wrong type or a value out of range is one ``InputError`` naming ``where``."""
    if not isinstance(table, dict):
        raise InputError(f"{where}: the run settings must be a JSON object")
    given = {k: v for k, v in table.items() if v is not None}
    values = read_table(given, MORE_KEYS, lambda key: where)
    return {k.name: values[k.name] for k in MORE_KEYS}


@dataclass(frozen=True)
class Fleet:
    path: str
    run: RunSettings
    devices: tuple[DeviceSpec, ...]


def _data_entry(base: Path, raw: str, where: str, learning: str) -> str:
    """A device's ``data``: a trace CSV (replay), else a dataset path or a prepared dataset's
    name (``mnist-5k``, ``fashion-mnist``...: ``powerfleet data prepare``), kept as the name
    when no file of that name sits beside the fleet file."""
    from fleet.agent.data.datasets import KNOWN_DATASETS

    if learning != "trace" and raw in KNOWN_DATASETS and not (base / raw).exists():
        return raw
    return _resolve(base, raw, where, must_exist=learning == "trace")


def _resolve(base: Path, raw: str, where: str, must_exist: bool = True) -> str:
    p = (base / raw).resolve() if not Path(raw).is_absolute() else Path(raw)
    if must_exist and not p.exists():
        raise InputError(f"{where}: file not found: {raw} (resolved to {p})")
    if must_exist and p.is_dir():  # said here, with the key; the reader would say only the path
        raise InputError(f"{where}: {raw} is a directory (resolved to {p}); expected a file")
    return str(p)


def run_path(raw: str, fleet_path: str | Path) -> Path:
    """A ``[run]`` path (weights, stores) as every reader of it resolves it: ``~`` expanded, a
    relative one against the folder the fleet file really lives in (a symlink followed)."""
    p = Path(raw).expanduser()
    return p if p.is_absolute() else Path(fleet_path).resolve().parent / p


def weights_file(raw: str | None, fleet_path: str | Path) -> str | None:
    """``[run] weights`` (``powerfleet pretrain``'s output), absolute; None when unset."""
    if not raw:
        return None
    path = run_path(raw, fleet_path)
    if not path.is_file():
        raise InputError(
            f"{fleet_path}: [run] weights: file not found: {raw} (resolved to {path}; "
            "make it with powerfleet pretrain)"
        )
    return str(path)


def _store_dir(fleet_path: Path, raw: str, where: str) -> None:
    """A store's folder (made on first use): refused now when it is a file or lies under one,
    not when the round first writes to it and names no key."""
    p = run_path(raw, fleet_path)
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is" if probe == p else f"lies under {probe}, which is"
        raise InputError(f"{where}: {raw} {what} not a directory (resolved to {p})")


def _trace_schedule(base: Path, d: dict, where: str) -> tuple[BudgetStep, ...]:
    """A device's ``budget_trace`` as schedule steps for ``read_budget`` (no text in between)."""
    from fleet.budgets.trace import DEFAULT_DWELL_S, schedule_from_trace

    trace = _resolve(base, text_field(d, "budget_trace", where), f"{where}: budget_trace")
    dwell = d.get("budget_dwell_s", DEFAULT_DWELL_S)
    start = d.get("budget_trace_start_s")  # trace second at which training starts
    return schedule_from_trace(trace, dwell, f"{where}: budget_trace", start)


def _read_toml(path: Path) -> tuple[dict, str]:
    """The parsed file and its text (where an error finds a key's line), bounded in size;
    every failure one line naming the file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FLEET_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: fleet file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the fleet file ({exc.strerror})") from None
    if len(raw) > MAX_FLEET_BYTES:
        raise InputError(f"{path}: fleet file larger than {MAX_FLEET_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None


def read_run(path: Path, data: dict, text: str) -> RunSettings:
    """The ``[run]`` table through its schema (``fleet.config.schema.RUN_KEYS``): every key
    declared, typed and bounded; the name defaults to the file's stem and ``efficiency`` is
    resolved against the file (it must exist)."""
    run_t = data.get("run")
    if not isinstance(run_t, dict):
        raise InputError(f"{path}: missing [run] table")
    where = locator(path, text, "run", 0, "[run]")
    check_keys(run_t, (k.name for k in RUN_KEYS), where)  # the name: the names' own check
    values = read_table({k: v for k, v in run_t.items() if k != "name"}, RUN_KEYS, where)
    w = f"{path}: [run]"
    values["name"] = check_name(
        w,
        "run name" if "name" in run_t else "run name (the file's)",
        run_t.get("name", path.stem),
    )
    values["efficiency"] = _resolve(path.parent, str(values["efficiency"]), f"{w} efficiency")
    _check_run(path, values, w)
    return RunSettings(**values)  # type: ignore[arg-type]


def _check_run(path: Path, values: dict, w: str) -> None:
    """What one key cannot say alone, said when the file is read, not when the round first
    needs it (the direct engine never did): a shape that is no shape, or one a model this host
    knows cannot take (a model only the boards know is theirs to check), a weights file or a
    store folder that is not there to be used."""
    from fleet.agent.models.inputs import input_spec, model_input, parse_shape

    if values.get("input_shape") is not None:
        try:
            parse_shape(str(values["input_shape"]))
            try:
                model_input(str(values["model"]))
            except (KeyError, ValueError):
                pass  # not a model of this host's registry: the shape's form is all we know
            else:
                input_spec(str(values["model"]), str(values["input_shape"]))
        except ValueError as exc:
            raise InputError(f"{w} input_shape: {exc}") from None
    weights_file(values.get("weights"), path)
    for key in ("efficiency_store", "profile_store"):
        if values.get(key):
            _store_dir(path, str(values[key]), f"{w} {key}")


def run_value(path: str | Path, key: str) -> object:
    """One ``[run]`` key of a fleet file, checked by its schema (None when absent): reads only
    that key, so a fleet whose devices are not ready yet (first contact) still names its
    stores."""
    path = Path(path)
    data, text = _read_toml(path)
    run_t = data.get("run")
    if not isinstance(run_t, dict) or run_t.get(key) is None:
        return None
    (decl,) = [k for k in RUN_KEYS if k.name == key]
    return check_value(decl, run_t[key], lambda: locator(path, text, "run", 0, "[run]")(key))


def load_fleet(path: str | Path) -> Fleet:
    path = Path(path)
    data, text = _read_toml(path)
    base = path.parent
    check_keys(data, FLEET_TABLES, locator(path, text, None, 0, ""))
    run = read_run(path, data, text)
    dev_list = data.get("devices")
    if not isinstance(dev_list, list) or not dev_list:
        raise InputError(f"{path}: no [[devices]] entries")
    if len(dev_list) > MAX_DEVICES:
        raise InputError(f"{path}: {len(dev_list)} [[devices]] entries; at most {MAX_DEVICES}")
    devices: list[DeviceSpec] = []
    seen: dict[str, str] = {}
    for i, d in enumerate(dev_list, start=1):
        name = d.get("name") if isinstance(d, dict) else None
        shown = name if isinstance(name, str) and is_safe(name) else None
        w = f"{path}: device #{i}" + (f" ({shown})" if shown else "")
        if not isinstance(d, dict):
            raise InputError(f"{w}: expected a table")
        locate = locator(path, text, "devices", i - 1, w[len(f"{path}: ") :])
        check_keys(d, (k.name for k in DEVICE_KEYS), locate)
        for key in DEVICE_KEYS:  # types, ranges; the budget grammar reads the budget itself
            if key.name in d and key.name not in ("name", "budget_w", "budget_schedule"):
                check_value(key, d[key.name], functools.partial(locate, key.name))
        name = check_name(w, "device name", require_field(d, "name", w, str))
        dtype = str(require_field(d, "type", w, str))
        if dtype not in DEVICE_TYPES:
            raise InputError(
                f"{w}: unknown device type {show_value(dtype)}; expected one of "
                f"{', '.join(DEVICE_TYPES)}"
            )
        if not {"budget_w", "budget_schedule", "budget_trace"} & set(d):
            raise InputError(
                f"{w}: no budget: expected 'budget_w' (watts, or \"none\" for no limit), "
                "'budget_schedule' or 'budget_trace'"
            )
        schedule_raw: object = d.get("budget_schedule")
        fields = ("budget_w", "budget_schedule")
        if "budget_trace" in d:  # a power trace becomes the schedule: fleet.budgets.trace
            if schedule_raw is not None:
                raise InputError(f"{w}: give budget_schedule or budget_trace, not both")
            schedule_raw, fields = _trace_schedule(base, d, w), ("budget_w", "budget_trace")
        else:
            for field in ("budget_dwell_s", "budget_trace_start_s"):
                if field in d:  # it would change nothing: said, not lost
                    raise InputError(f"{w}: {field} applies to budget_trace, which is not given")
        budget, schedule = read_budget(w, d.get("budget_w"), schedule_raw, fields)
        client = choice_field(d, "client", w, "replay", CLIENTS)
        if client == "hardware":  # first contact: the board profiles, the store keeps it
            raw = text_field(d, "profile", w, "")
            profile = _resolve(base, raw, f"{w} profile", must_exist=False) if raw else ""
        else:
            profile = _resolve(base, text_field(d, "profile", w), f"{w} profile")
        learning = choice_field(d, "learning", w, "trace", LEARNING)
        data_path = None
        on_board = client == "hardware"  # its data (if any) lives on the board
        if "data" in d:
            if on_board:  # a path on the board, not on this host
                data_path = _resolve(base, text_field(d, "data", w), f"{w} data", must_exist=False)
            else:
                data_path = _data_entry(base, text_field(d, "data", w), f"{w} data", learning)
        elif learning == "trace" and not on_board:
            raise InputError(f"{w}: missing field 'data' (the device's convergence trace CSV)")
        room = MAX_DEVICES - len(devices)
        count = d.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InputError(f"{w}: count must be a positive integer, got {show_value(count)}")
        if count > room:  # refused before a single name is built
            raise InputError(
                f"{w}: count {count} would make the fleet larger than {MAX_DEVICES} devices"
            )
        width = max(4, len(str(count)))
        if count > 1:
            check_name(w, "device name", f"{name}-{count:0{width}d}")
        names = [name] if count == 1 else [f"{name}-{k:0{width}d}" for k in range(1, count + 1)]
        for n in names:
            if n in seen:
                raise InputError(f"{w}: duplicate device name {n!r} (also {seen[n]})")
            seen[n] = f"device #{i}"
            devices.append(
                DeviceSpec(n, dtype, budget, profile, data_path, schedule, learning, client)
            )
    return Fleet(str(path), run, tuple(devices))
