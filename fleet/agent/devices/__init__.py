"""Device backends: one small interface over Jetson sysfs, NVML, the CPU and a replayed profile.

Why a registry of module names: each backend module declares itself in a ``SPEC``
(``base.BackendSpec``: its constructor, its options, its capabilities), and every surface that
names a backend is generated from these declarations: the ``powerfleet profile`` flags, the
agent's argv (parsed here and built by the hardware client), the node-config keys and the
``powerfleet device`` flags. So adding a backend is one module plus one line in ``BACKENDS``
(docs/architecture.md, "Adding a device backend"). Modules are imported only when asked for,
so the NVML module (pynvml is optional) costs nothing to a Jetson.

``DEVICE_TYPES`` maps the fleet's device types to the backend that drives them; the Jetson
types are generated from the board table (``boards.py``), so a new row is a new type everywhere.

Python 3.6 compatible, stdlib only.
"""

import argparse
import importlib
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, DeviceError, Option
from fleet.agent.devices.board_identity import LEGACY_ORIN
from fleet.agent.devices.boards import ROWS

# name -> module whose ``SPEC`` describes the backend. One line per backend.
BACKENDS = {
    "jetson": "fleet.agent.devices.jetson",
    "nvml": "fleet.agent.devices.nvml",
    "cpu": "fleet.agent.devices.cpu",
    "replay": "fleet.agent.devices.replay",
}  # type: Dict[str, str]

# Fleet device type (fleet TOML ``type``) -> the backend that drives such a board: one type per
# row of the board table (``boards.ROWS``), the legacy Orin family type that fleet files and
# profiles written before the table still name, and the non-Jetson devices.
DEVICE_TYPES = dict(
    [(b.key, "jetson") for b in ROWS]
    + [(LEGACY_ORIN, "jetson"), ("nvml-gpu", "nvml"), ("cpu", "cpu")]
)  # type: Dict[str, str]

# Where parsed flag values live on an argparse namespace (prefixed: no clash with a command's own).
_DEST = "backend_opt_"


def register_backend(name: str, module: str) -> None:
    """Add (or replace) a backend at run time: the same as one more line in ``BACKENDS``."""
    BACKENDS[str(name).strip().lower()] = module


def backend_names() -> List[str]:
    return sorted(BACKENDS)


def _key(kind: str) -> str:
    key = str(kind).strip().lower()
    if key not in BACKENDS:
        raise DeviceError(
            "unknown device backend {!r}; valid kinds: {}".format(kind, ", ".join(backend_names()))
        )
    return key


def backend_spec(kind: str) -> BackendSpec:
    """The declaration of backend ``kind`` (imports its module)."""
    key = _key(kind)
    module = importlib.import_module(BACKENDS[key])
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, BackendSpec):
        raise DeviceError("backend module {} declares no SPEC".format(BACKENDS[key]))
    return spec


def capabilities(kind: str) -> Capabilities:
    return backend_spec(kind).capabilities


def backend_for_device_type(device_type: str) -> str:
    """The backend for a fleet device type, e.g. jetson-nano -> jetson."""
    key = str(device_type).strip().lower()
    if key not in DEVICE_TYPES:
        raise DeviceError(
            "unknown device type {!r}; known types: {}".format(
                device_type, ", ".join(sorted(DEVICE_TYPES))
            )
        )
    return DEVICE_TYPES[key]


def all_options() -> List[Tuple[Option, List[str]]]:
    """Every backend option once (by public name), with the backends that take it."""
    merged = {}  # type: Dict[str, Tuple[Option, List[str]]]
    for name in backend_names():
        for opt in backend_spec(name).options:
            if opt.public in merged:
                first, kinds = merged[opt.public]
                if first.type is not opt.type or first.name != opt.name:
                    raise DeviceError(
                        "backends {} and {} both declare {} differently".format(
                            kinds[0], name, opt.flag
                        )
                    )
                kinds.append(name)
            else:
                merged[opt.public] = (opt, [name])
    return [merged[k] for k in sorted(merged)]


def open_backend(kind: str, **options: object) -> Backend:
    """Construct the backend named ``kind`` with keyword ``options`` (its declared options)."""
    spec = backend_spec(kind)
    accepted = [o.name for o in spec.options]
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise DeviceError(
            "backend {!r} does not take option(s) {}; valid options: {}".format(
                spec.name, ", ".join(unknown), ", ".join(accepted) or "none"
            )
        )
    return spec.factory(**options)


# ----------------------------------------------------------------------------- generated surfaces


def convert(opt: Option, value: object, where: str) -> object:
    """A flag or node-config value as the option's type; a clear DeviceError otherwise."""
    if opt.type is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise DeviceError("{}: {}={!r}, expected true or false".format(where, opt.public, value))
    try:
        out = opt.type(value)
    except (TypeError, ValueError):
        raise DeviceError(
            "{}: {}={!r}, expected {}".format(where, opt.public, value, opt.type.__name__)
        ) from None
    # Every number a backend takes is a count (>= 0) or a positive amount: seconds, watts. A
    # NaN wait never elapses (``elapsed >= nan`` is never true): a lock that hangs forever.
    if opt.type is float and not (math.isfinite(out) and out > 0):
        raise DeviceError(
            "{}: {}={!r}, expected a finite number > 0".format(where, opt.public, value)
        )
    if opt.type is int and out < 0:
        raise DeviceError("{}: {}={!r}, expected an integer >= 0".format(where, opt.public, value))
    return out


def add_backend_arguments(parser: Any, with_backend: bool = True, default: str = "") -> None:
    """Add ``--backend`` and one flag per backend option to an argparse parser or group.

    Flags default to None (not given), so only what the user typed reaches the backend, and a
    flag that the chosen backend does not take can be refused by name.
    """
    if with_backend:
        kwargs = {"choices": backend_names(), "help": "device backend"}  # type: Dict[str, Any]
        if default:
            kwargs["default"] = default
        else:
            kwargs["required"] = True
        parser.add_argument("--backend", **kwargs)
    for opt, kinds in all_options():
        flags = [opt.flag] + ["--" + a for a in opt.aliases]
        text = "{} ({})".format(opt.help, "/".join(kinds))
        if opt.type is bool:
            parser.add_argument(
                *flags, dest=_DEST + opt.public, action="store_const", const=True, default=None,
                help=text
            )  # fmt: skip
        else:
            parser.add_argument(
                *flags, dest=_DEST + opt.public, metavar=opt.public.upper().replace("-", "_"),
                type=opt.type, default=None, help=text
            )  # fmt: skip


def given_options(args: argparse.Namespace) -> Dict[str, object]:
    """{public name: value} of the backend flags the user typed."""
    out = {}  # type: Dict[str, object]
    for key, value in sorted(vars(args).items()):
        if key.startswith(_DEST) and value is not None:
            out[key[len(_DEST) :]] = value
    return out


def options_for(kind: str, given: Mapping[str, object], where: str = "") -> Dict[str, object]:
    """Map {public name: value} (flags or node config) to ``kind``'s constructor options.

    A name that belongs to another backend is refused with the backends it applies to; a
    required option that is missing is named. ``where`` prefixes messages (e.g. "node config").
    """
    spec = backend_spec(kind)
    mine = dict((o.public, o) for o in spec.options)
    others = dict((o.public, ks) for o, ks in all_options())
    prefix = where + ": " if where else ""
    options = {}  # type: Dict[str, object]
    for public, value in given.items():
        opt = mine.get(public)
        if opt is None:
            if public in others:
                raise DeviceError(
                    "{}--{} applies to --backend {}, not {}".format(
                        prefix, public, "/".join(others[public]), spec.name
                    )
                )
            raise DeviceError("{}unknown backend option {!r}".format(prefix, public))
        options[opt.name] = convert(opt, value, where or "option")
    for opt in spec.options:
        if opt.required and opt.name not in options:
            also = "".join(" (or --{})".format(a) for a in opt.aliases)
            raise DeviceError(
                "{}--backend {} needs {} {}{}".format(
                    prefix, spec.name, opt.flag, opt.public.upper().replace("-", "_"), also
                )
            )
    return options


def backend_argv(kind: str, options: Mapping[str, object]) -> List[str]:
    """The agent's argv for ``kind`` with constructor ``options`` (only those given)."""
    spec = backend_spec(kind)
    by_name = dict((o.name, o) for o in spec.options)
    argv = ["--backend", spec.name]
    for name in sorted(options):
        opt = by_name.get(name)
        if opt is None:
            raise DeviceError(
                "backend {!r} does not take option {}; valid options: {}".format(
                    spec.name, name, ", ".join(sorted(by_name)) or "none"
                )
            )
        value = options[name]
        if value is None or value == "":
            continue
        if opt.type is bool:
            if convert(opt, value, "option"):
                argv.append(opt.flag)
        else:
            argv += [opt.flag, str(value)]
    return argv


def preferred_torch_device(kind: str, cuda_available: Optional[bool] = None) -> str:
    """Where training runs by default: the backend's torch device if torch sees it, else cpu."""
    wanted = capabilities(kind).torch_device
    if wanted == "cpu":
        return "cpu"
    if cuda_available is None:
        try:
            import torch

            cuda_available = bool(torch.cuda.is_available())
        except ImportError:
            cuda_available = False
    return wanted if cuda_available else "cpu"


__all__ = [
    "BACKENDS",
    "DEVICE_TYPES",
    "Backend",
    "BackendSpec",
    "Capabilities",
    "DeviceError",
    "Option",
    "add_backend_arguments",
    "all_options",
    "backend_argv",
    "backend_for_device_type",
    "backend_names",
    "backend_spec",
    "capabilities",
    "given_options",
    "open_backend",
    "options_for",
    "preferred_torch_device",
    "register_backend",
]
