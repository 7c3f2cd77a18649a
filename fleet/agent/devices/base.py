"""The one interface every device backend offers.

Why so small: the profiler and trainer only need to enumerate frequencies, lock one, read the
power rail and give the device back as they found it. Everything board-specific (sysfs layouts,
NVML calls, RAPL counters, a replayed CSV) hides behind these five methods. Python 3.6
compatible: this runs on JetPack 4.6.
"""

import abc
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple  # noqa: F401


class DeviceError(RuntimeError):
    """A device problem a user can act on (missing node, no permission...); one clear line."""


class Backend(abc.ABC):
    """A device whose GPU frequency may be locked and whose power may be read.

    Use as a context manager so the original frequency settings come back on every exit path.
    """

    name = "backend"
    #: The budget statistic (``fleet/method/power_window.py``): readings are averaged over the
    #: trailing ``power_average_s`` seconds (0: each reading already is the window's average, as
    #: the INA3221's conversions and RAPL's differences are); ``power_window_s`` is the window
    #: the budget is stated over (None: one reading's own period, whatever the sensor's is).
    power_average_s = 0.0  # type: float
    power_window_s = None  # type: Optional[float]

    @abc.abstractmethod
    def frequencies(self) -> List[float]:
        """The lockable frequencies (MHz, or watts for power-limit knobs), ascending.

        Empty when the device offers no control (CPU): profiles then have one 'current' point.
        """

    @abc.abstractmethod
    def lock(self, freq_mhz: float) -> Optional[bool]:
        """Pin the GPU at exactly this frequency; raise DeviceError if not allowed/available.
        A backend that can wait for the clock to settle returns whether it did (Jetson)."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Put back the settings found at start (frequency bounds, governor). Idempotent."""

    @abc.abstractmethod
    def read_power_w(self) -> Optional[float]:
        """Instantaneous power of the configured rail in watts, or None if not measurable."""

    def describe(self) -> Dict[str, object]:
        """Metadata recorded into profiles (device name, rail, backend...)."""
        return {"backend": self.name}

    def synchronize(self) -> None:
        """Wait for queued device work (CUDA sync on GPUs); a no-op where work is synchronous."""
        return None

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


class Option(object):
    """One constructor option a backend takes, as every surface should offer it.

    ``name`` is the constructor's keyword; ``public`` (default: ``name`` with dashes) is the
    spelling of the command-line flag (``--public``), of the agent's argv and of the node-config
    key, so one declaration feeds all of them. ``aliases`` are extra flag spellings kept for
    old command lines. ``type`` is str, int, float or bool (a bool is a switch on the CLI).
    """

    __slots__ = ("name", "type", "help", "default", "required", "public", "aliases")

    def __init__(
        self,
        name,  # type: str
        type,  # type: type
        help,  # type: str
        default=None,  # type: object
        required=False,  # type: bool
        public=None,  # type: Optional[str]
        aliases=(),  # type: Tuple[str, ...]
    ):
        # type: (...) -> None
        self.name = name
        self.type = type
        self.help = help
        self.default = default
        self.required = required
        self.public = public or name.replace("_", "-")
        self.aliases = tuple(aliases)

    @property
    def flag(self):
        # type: () -> str
        return "--" + self.public

    def __repr__(self):
        # type: () -> str
        return "Option({!r}, {})".format(self.name, self.type.__name__)


Capabilities = NamedTuple(
    "Capabilities",
    [
        ("measures_power", bool),  # reads a power rail / counter (profiles get power columns)
        ("locks_clocks", bool),  # can pin a GPU frequency (NVML: only with allow_clock_changes)
        ("torch_device", str),  # where training runs when torch sees it: "cuda" or "cpu"
    ],
)


class BackendSpec(object):
    """What a backend module declares about itself (its ``SPEC``): the registry reads only this."""

    __slots__ = ("name", "factory", "options", "capabilities", "summary")

    def __init__(
        self,
        name,  # type: str
        factory,  # type: Callable[..., Backend]
        options,  # type: Sequence[Option]
        capabilities,  # type: Capabilities
        summary,  # type: str
    ):
        # type: (...) -> None
        self.name = name
        self.factory = factory
        self.options = tuple(options)
        self.capabilities = capabilities
        self.summary = summary
