"""Discrete NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``).

Why two modes: locking graphics clocks needs root (or an admin-enabled setting) and changes a
shared card for everyone on it, so it is opt-in (``allow_clock_changes=True``). By default the
backend is in "current" mode: the only frequency it offers is the clock the card runs at when the
backend opens, and locking that one is a no-op, so a profile at the card's own clock is always
possible without privileges.

Power: NVML's classic ``nvmlDeviceGetPowerUsage`` is a ~1 s moving average on recent GPUs, which
hides the peaks the budget is about; the instantaneous field (``NVML_FI_DEV_POWER_INSTANT``) is
used when the driver has it.

Python 3.6 compatible; pynvml and torch are optional imports.
"""

from typing import Any, Dict, List, Optional

from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, DeviceError, Option
from fleet.method.power_window import NVML_INSTANT_AVERAGE_S

_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def _import_pynvml() -> Any:  # the module: nvidia-ml-py ships no types
    try:
        import pynvml
    except ImportError:
        raise DeviceError(
            "NVML backend needs the nvidia-ml-py package (import pynvml failed); "
            "install it with: pip install nvidia-ml-py"
        ) from None
    return pynvml


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend(Backend):
    """One NVIDIA GPU by NVML index."""

    name = "nvml"

    def __init__(self, index: int = 0, allow_clock_changes: bool = False) -> None:
        nv = _import_pynvml()
        self._nv = nv
        self.index = int(index)
        self.allow_clock_changes = bool(allow_clock_changes)
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise DeviceError("cannot initialise NVML: {}".format(exc)) from exc
        try:
            self._handle = nv.nvmlDeviceGetHandleByIndex(self.index)
        except nv.NVMLError as exc:
            try:
                count = nv.nvmlDeviceGetCount()
            except nv.NVMLError:
                count = "?"
            raise DeviceError(
                "no NVML GPU at index {} ({} GPUs visible): {}".format(self.index, count, exc)
            ) from exc
        self._locked = False
        self._instant_ok = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None) is not None
        # The "current" clock is fixed at open so frequencies() and lock() agree with each other.
        try:
            clock = nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_GRAPHICS)
        except nv.NVMLError as exc:
            raise self._error("read the graphics clock", exc) from exc
        self._current_mhz = float(clock)
        self._supported = None  # type: Optional[List[float]]
        self._torch_cuda = None  # type: Any  # the module torch.cuda, False (none), None (not yet)

    def _error(self, what: str, exc: Exception) -> DeviceError:
        code = getattr(exc, "value", None)
        if code == getattr(self._nv, "NVML_ERROR_NO_PERMISSION", 4):
            return DeviceError(
                "cannot {} on GPU {}: permission denied; run as root or let users change clocks "
                "(nvidia-smi -acp UNRESTRICTED)".format(what, self.index)
            )
        return DeviceError("cannot {} on GPU {}: {}".format(what, self.index, exc))

    def _supported_clocks(self) -> List[float]:
        if self._supported is None:
            nv = self._nv
            try:
                mem = max(nv.nvmlDeviceGetSupportedMemoryClocks(self._handle))
                clocks = nv.nvmlDeviceGetSupportedGraphicsClocks(self._handle, mem)
            except nv.NVMLError as exc:
                raise self._error("list supported clocks", exc) from exc
            self._supported = sorted(set(float(c) for c in clocks))
        return self._supported

    def frequencies(self) -> List[float]:
        if not self.allow_clock_changes:
            return [self._current_mhz]
        return self._supported_clocks()

    def lock(self, freq_mhz: float) -> None:
        if not self.allow_clock_changes:
            if float(freq_mhz) == self._current_mhz:
                return
            raise DeviceError(
                "clock changes disabled; profile at current clocks ({:g} MHz) or enable "
                "allow_clock_changes".format(self._current_mhz)
            )
        valid = self._supported_clocks()
        if float(freq_mhz) not in valid:
            raise DeviceError(
                "{} MHz is not a supported graphics clock of GPU {}; valid MHz: {}".format(
                    freq_mhz, self.index, ", ".join("{:g}".format(f) for f in valid)
                )
            )
        mhz = int(round(float(freq_mhz)))
        try:
            self._nv.nvmlDeviceSetGpuLockedClocks(self._handle, mhz, mhz)
        except self._nv.NVMLError as exc:
            raise self._error("lock graphics clocks", exc) from exc
        self._locked = True

    def restore(self) -> None:
        if not self._locked:
            return
        try:
            self._nv.nvmlDeviceResetGpuLockedClocks(self._handle)
        except self._nv.NVMLError as exc:
            raise self._error("reset locked clocks", exc) from exc
        self._locked = False

    def _instant_power_w(self) -> Optional[float]:
        nv = self._nv
        try:
            values = nv.nvmlDeviceGetFieldValues(self._handle, [nv.NVML_FI_DEV_POWER_INSTANT])
        except nv.NVMLError:
            return None
        if not values:
            return None
        fv = values[0]
        if getattr(fv, "nvmlReturn", 0) != getattr(nv, "NVML_SUCCESS", 0):
            return None
        field = _VALUE_FIELDS.get(getattr(fv, "valueType", 1), "uiVal")
        return float(getattr(fv.value, field)) / 1000.0  # milliwatts

    def read_power_w(self) -> Optional[float]:
        if self._instant_ok:
            watts = self._instant_power_w()
            if watts is not None:
                return watts
            self._instant_ok = False  # not on this driver/GPU: do not ask 20 times a second
        nv = self._nv
        try:
            return nv.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3):
                return None
            raise self._error("read power", exc) from exc

    @property
    def power_average_s(self) -> float:  # type: ignore[override]  # a property here
        """The budget statistic's averaging (``fleet/method/power_window.py``): the instantaneous
        field over ``NVML_INSTANT_AVERAGE_S``; the 1 s API already is that average."""
        return NVML_INSTANT_AVERAGE_S if self._instant_ok else 0.0

    power_window_s = NVML_INSTANT_AVERAGE_S

    def synchronize(self) -> None:
        if self._torch_cuda is None:
            try:
                import torch

                self._torch_cuda = torch.cuda if torch.cuda.is_available() else False
            except ImportError:
                self._torch_cuda = False
        if self._torch_cuda:
            self._torch_cuda.synchronize()

    def describe(self) -> Dict[str, object]:
        nv = self._nv
        info = {
            "backend": self.name,
            "index": self.index,
            "mode": "locked" if self.allow_clock_changes else "current",
            "power": "instant" if self._instant_ok else "average",
        }  # type: Dict[str, object]
        try:
            info["gpu"] = _text(nv.nvmlDeviceGetName(self._handle))
        except nv.NVMLError:
            pass
        try:
            info["driver"] = _text(nv.nvmlSystemGetDriverVersion())
        except (nv.NVMLError, AttributeError):
            pass
        return info


SPEC = BackendSpec(
    name="nvml",
    factory=NvmlBackend,
    options=(
        Option("index", int, "NVML index of the GPU", 0, public="gpu-index"),
        Option(
            "allow_clock_changes",
            bool,
            "lock graphics clocks (needs root or nvidia-smi -acp UNRESTRICTED); "
            "default: profile at the card's current clock only",
            False,
        ),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cuda"),
    summary="discrete NVIDIA GPU through NVML (nvidia-ml-py)",
)
