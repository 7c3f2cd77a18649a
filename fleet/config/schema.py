"""Every key a fleet file, a node config and a run config may hold: one declaration each.

Why one place: a key the reader does not know used to be kept silently (``objectve =
"deadline"`` ran the time objective and exited 0), and its type, default and range lived in the
reader of each layer. Here each key is declared once, with its type, default, bounds and a
line of help; the readers (``fleet.config.fleetfile``, the train instruction's run settings,
the ClientApp's node config, the ServerApp's run config) refuse any other key, naming the file,
the line, the key and the closest known one, and ``fleet.config.reference`` writes the tables
of ``docs/fleet-file.md`` from the same declarations.

TOML parsers give no line numbers: :func:`key_line` finds ``key =`` inside its table by
scanning the text, which is good enough to point at a misspelling.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleet.agent.learning.efficiency_learner import MODES as LEARN_MODES
from fleet.budgets.trace import DEFAULT_DWELL_S
from fleet.common.errors import InputError
from fleet.config.fields import (
    MAX_BATCH,
    MAX_ROUNDS,
    MAX_SEED,
    MAX_TEXT,
    OPTIMIZERS,
    show_value,
)
from fleet.core.objectives import OBJECTIVES
from fleet.method.record_base import closest as nearest
from fleet.method.selection import MAX_LR

MODES = ("local", "federated")
LEARNING = ("trace", "train")
CLIENTS = ("replay", "hardware")  # a device entry's ``client``: hardware may lack a profile

_TYPE_NAMES = {str: "text", int: "integer", float: "number", bool: "true/false"}


@dataclass(frozen=True)
class Key:
    """One key of a table: its type, its default (None: absent unless given), what a value
    must be (``expect``, the words of the error line and of the docs) and one line of help."""

    name: str
    type: type
    default: object
    help: str
    expect: str = ""
    ok: Callable[[object], bool] | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()  # a callable: a live registry
    required: bool = False
    # its own key in a train instruction (``clients/records.py``); "" = it travels inside the
    # instruction's run-settings JSON (``RunSettings.more``)
    wire: str = ""

    def allowed(self) -> tuple[str, ...]:
        """The values a choice takes now (a registry's entries are read when a file is)."""
        return self.choices() if callable(self.choices) else self.choices

    def expectation(self) -> str:
        if self.expect:
            return self.expect
        if self.allowed():
            return "one of " + ", ".join(self.allowed())
        return {
            bool: "true or false",
            int: "an integer",
            float: "a finite number",
            str: f"1-{MAX_TEXT} printable characters",
        }[self.type]

    def type_name(self) -> str:
        return "choice" if self.allowed() else _TYPE_NAMES[self.type]


def in_range(lo: float, hi: float) -> Callable[[object], bool]:
    return lambda v: lo <= v <= hi  # type: ignore[operator]


def positive(v: object) -> bool:
    return v > 0  # type: ignore[operator]


# [run]: the settings of the whole run. RunSettings (fleet.config.fleetfile) has exactly these
# fields, in this order (a test keeps them equal).
RUN_KEYS: tuple[Key, ...] = (
    Key(
        "name",
        str,
        None,
        "the run's name (default: the file's stem); safe-name alphabet",
        wire="run-name",
    ),
    Key(
        "model",
        str,
        None,
        "the model every device fine-tunes (resnet18, small_cnn...)",
        required=True,
        wire="model",
    ),
    Key(
        "efficiency",
        str,
        None,
        "the proxy's efficiency CSV the coordinator ships (relative to the file)",
        required=True,
        wire="efficiency",
    ),
    Key(
        "target_accuracy",
        float,
        None,
        "the accuracy a device trains to",
        expect="an accuracy in (0, 1]",
        ok=lambda v: isinstance(v, (int, float)) and 0 < v <= 1,
        required=True,
        wire="target-accuracy",
    ),
    Key(
        "mode",
        str,
        "local",
        "local: devices keep their weights; federated: FedAvg",
        choices=MODES,
        wire="mode",
    ),
    Key(
        "objective",
        str,
        "time",
        "what a device minimises (deadline: energy within the round's deadline)",
        choices=lambda: tuple(OBJECTIVES),  # the registry: a registered objective is known
        wire="objective",
    ),
    Key(
        "rounds",
        int,
        1,
        "rounds of the run",
        expect=f"an integer in [1, {MAX_ROUNDS}]",
        ok=in_range(1, MAX_ROUNDS),
        wire="rounds",
    ),
    Key(
        "optimizer",
        str,
        "adam",
        "the optimizer (it picks the learning-rate rule)",
        choices=OPTIMIZERS,
        wire="optimizer",
    ),
    Key(
        "lr_ref_batch",
        int,
        128,
        "the batch size of the reference learning rate",
        expect=f"an integer in [1, {MAX_BATCH}]",
        ok=in_range(1, MAX_BATCH),
        wire="lr-ref-batch",
    ),
    Key(
        "lr_ref",
        float,
        5e-4,
        "the learning rate at lr_ref_batch (scaled to the chosen batch)",
        expect=f"a learning rate > 0 and <= {MAX_LR:g}",
        ok=lambda v: 0 < v <= MAX_LR,  # type: ignore[operator]
        wire="lr-ref",
    ),
    Key(
        "seed",
        int,
        0,
        "the seed of models and data order",
        expect=f"an integer in [0, {MAX_SEED}]",
        ok=in_range(0, MAX_SEED),
        wire="seed",
    ),
    Key(
        "deadline_s",
        float,
        None,
        "the round's deadline on the device clock (objective "
        "deadline); absent: planned from the devices' fastest finishes",
        expect="a finite number > 0 (a positive number of seconds)",
        ok=positive,
    ),
    Key("ship_weights", bool, True, "whether round 1's model travels to the devices"),
    Key(
        "weights",
        str,
        None,
        "the starting weights (powerfleet pretrain's output), relative "
        "to the file; absent: a seeded fresh model",
    ),
    Key("data_dir", str, None, "where prepared datasets are looked up (default: the data cache)"),
    Key(
        "learn_efficiency",
        str,
        "online",
        "how a device learns its samples-to-target: none "
        "(the shipped vector), online (its curve), device (noise scale), all",
        choices=LEARN_MODES,
    ),
    Key(
        "eval_every_samples",
        int,
        None,
        "host training: evaluate every this many samples",
        expect="an integer in [1, 2**40]",
        ok=in_range(1, 2**40),
    ),
    Key(
        "max_samples",
        int,
        None,
        "training stops after this many samples, target or not",
        expect="an integer in [1, 2**40]",
        ok=in_range(1, 2**40),
    ),
    Key(
        "guard_window_s",
        float,
        None,
        "a board's power guard window (seconds; the agent's default 0.2)",
        expect="a finite number > 0",
        ok=positive,
    ),
    Key(
        "efficiency_store",
        str,
        None,
        "the efficiency store's folder, relative to the file (default: the run directory's)",
    ),
    Key(
        "profile_store",
        str,
        None,
        "the profile store's folder, relative to the file "
        "(default: the run directory's profile-store)",
    ),
    Key(
        "input_shape",
        str,
        None,
        "the input shape the profiles are keyed by (3x32x32...; default: the model's)",
    ),
    Key(
        "ray_address",
        str,
        None,
        "Flower engine: a running Ray cluster to simulate on (its head's host:port, or auto); "
        "absent: a private Ray instance on this machine",
        expect="host:port (port 1-65535) or auto",
        ok=lambda v: ray_address_ok(str(v)),
    ),
    Key(
        "ray_device_cpus",
        int,
        None,
        "Flower engine: the Ray CPUs each simulated device holds (default 1; a node runs "
        "its CPUs / this many devices at once)",
        expect="an integer in [1, 1024]",
        ok=in_range(1, 1024),
    ),
    Key(
        "ray_device_gpus",
        float,
        None,
        "Flower engine: the share of a GPU each simulated device holds (default 0; 0.25: four "
        "devices per GPU)",
        expect="a number in [0, 64]",
        ok=in_range(0, 64),
    ),
)


def ray_address_ok(text: str) -> bool:
    """A Ray cluster's address as ``ray start --address`` takes it: ``auto`` (the cluster
    this machine last joined) or ``host:port``."""
    if text == "auto":
        return True
    host, sep, port = text.rpartition(":")
    ok_host = bool(host) and all(c.isalnum() or c in ".-_[]:" for c in host)
    return bool(sep) and ok_host and port.isdigit() and 1 <= int(port) <= 65535


# [[devices]]: one entry (``count = N``: N identical devices). The budget keys are read by the
# budget grammar (fleet.method.budget.read_budget) and the path keys resolved by the loader; this
# declaration is what an entry may hold and what the docs say of it.
DEVICE_KEYS: tuple[Key, ...] = (
    Key("name", str, None, "the device's name (name-0001... with count)", required=True),
    Key("type", str, None, "the device type (fleet.config.device_types)", required=True),
    Key(
        "budget_w",
        float,
        None,
        'the power budget: watts, or "none" for no limit',
        expect='watts > 0, or "none"',
    ),
    Key(
        "budget_schedule",
        str,
        None,
        '[[seconds, watts], ...] or "0:7,600:4.5": the budget changing during training',
        expect="a budget schedule",
    ),
    Key(
        "budget_trace", str, None, "a power trace CSV (time_s, available_w) played as the schedule"
    ),
    Key(
        "budget_dwell_s",
        float,
        DEFAULT_DWELL_S,
        "budget_trace: the least time between rises (seconds)",
        expect="a finite number >= 0 (seconds)",
        ok=lambda v: v >= 0,  # type: ignore[operator]
    ),
    Key(
        "budget_trace_start_s",
        float,
        None,
        "budget_trace: the trace second training starts (default: its first reading)",
        expect="a finite number >= 0 (a second of the trace)",
        ok=lambda v: v >= 0,  # type: ignore[operator]
    ),
    Key("profile", str, None, "the device's profile CSV (a hardware device may lack it)"),
    Key(
        "data",
        str,
        None,
        "the convergence trace CSV (learning trace), or the dataset to train on (learning train)",
    ),
    Key(
        "learning",
        str,
        "trace",
        "trace: replay the recorded curve; train: train on the host",
        choices=LEARNING,
    ),
    Key(
        "client",
        str,
        "replay",
        "replay: the virtual clock; hardware: a real board",
        choices=CLIENTS,
    ),
    Key(
        "count",
        int,
        1,
        "this many identical devices",
        expect="a positive integer",
        ok=positive,
    ),
)

FLEET_TABLES = ("run", "devices")


def closest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known key, or nothing when none is close
    (the kernel's one matcher, ``fleet.method.record_base.closest``)."""
    match = nearest(name, known, 0.6)
    return f" (did you mean '{match}'?)" if match else ""


def unknown_key(where: str, name: object, known: Iterable[str], what: str = "key") -> str:
    shown = name if isinstance(name, str) and len(name) <= 80 else show_value(name)
    return f"{where}: unknown {what} '{shown}'" + closest(str(name), known)


def check_keys(table: Mapping, known: Iterable[str], locate: Callable[[str], str]) -> None:
    """Refuse the first key of ``table`` not in ``known``, naming its place and the closest."""
    names = list(known)
    for name in table:
        if name not in names:
            raise InputError(unknown_key(locate(str(name)), name, names))


def check_value(key: Key, value: object, where: str | Callable[[], str]) -> object:
    """``value`` as ``key`` declares it (a float key takes an integer too), else one line
    naming ``where`` (a function is called only then: finding a line scans the file)."""
    t = key.type
    if t is bool:
        typed = isinstance(value, bool)
    elif t is int:
        typed = isinstance(value, int) and not isinstance(value, bool)
    elif t is float:
        typed = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        typed = isinstance(value, str)
    good = typed
    if good and t is float:
        good = math.isfinite(value)  # type: ignore[arg-type]
    if good and t is str:
        text = str(value)
        good = 0 < len(text) <= MAX_TEXT and not any(ord(c) < 32 or ord(c) == 127 for c in text)
    if good and key.allowed():
        good = value in key.allowed()
    if good and key.ok is not None:
        good = bool(key.ok(value))
    if not good:
        where = where if isinstance(where, str) else where()
        raise InputError(
            f"{where}: field '{key.name}' must be {key.expectation()}, got {show_value(value)}"
            + ("" if typed else " (wrong type)")
        )
    return float(value) if t is float else value  # type: ignore[arg-type]


def read_table(
    table: Mapping, keys: Sequence[Key], locate: Callable[[str], str]
) -> dict[str, object]:
    """Every declared key's value (its default when absent); an unknown key, a missing
    required one, a wrong type or an out-of-range value is one ``InputError``."""
    check_keys(table, (k.name for k in keys), locate)
    out: dict[str, object] = {}
    for key in keys:
        if key.name in table:
            name = key.name
            out[name] = check_value(key, table[name], functools.partial(locate, name))
        elif key.required:
            raise InputError(f"{locate(key.name)}: missing field '{key.name}' "
                             f"({key.expectation()})")  # fmt: skip
        else:
            out[key.name] = key.default
    return out
