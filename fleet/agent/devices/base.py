"""The one interface every device backend offers.

Why so small: the profiler and trainer only need to enumerate frequencies, lock one, read the
power rail and give the device back as they found it. Everything board-specific (sysfs layouts,
NVML calls, RAPL counters, a replayed CSV) hides behind these five methods. Python 3.6
compatible: this runs on JetPack 4.6.
"""

import abc
from typing import Dict, List, Optional


class DeviceError(RuntimeError):
    """A device problem a user can act on (missing node, no permission...); one clear line."""


class Backend(abc.ABC):
    """A device whose GPU frequency may be locked and whose power may be read.

    Use as a context manager so the original frequency settings come back on every exit path.
    """

    name = "backend"

    @abc.abstractmethod
    def frequencies(self) -> List[float]:
        """The lockable frequencies (MHz, or watts for power-limit knobs), ascending.

        Empty when the device offers no control (CPU): profiles then have one 'current' point.
        """

    @abc.abstractmethod
    def lock(self, freq_mhz: float) -> None:
        """Pin the GPU at exactly this frequency; raise DeviceError if not allowed/available."""

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
