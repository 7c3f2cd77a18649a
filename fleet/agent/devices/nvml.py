"""Discrete NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``).

Why three modes: locking graphics clocks or setting the power limit needs root (or an
admin-enabled setting) and changes a shared card for everyone on it, so each is opt-in
(``allow_clock_changes=True``: the knob is the graphics clock in MHz; ``allow_power_limit=True``:
the knob is the power limit in watts, the knob datacenter users turn and Zeus optimises, which
the predictor's ``cap`` model expects in watts). By default the backend is in "current" mode: it
offers no knob, the card picks its clock, and every profile row records the SM clock the point
actually ran at (mean, min, max: ``nvml_point``), never the idle clock found at open.

Every change is saved first (``clockstate.save_nvml``: the limit found, whether clocks were
locked) and put back by ``restore()`` on every exit path; after a SIGKILL the next start in a knob
mode, or ``powerfleet restore --backend nvml``, puts it back from the file.

Power: NVML's classic ``nvmlDeviceGetPowerUsage`` is a ~1 s moving average on recent GPUs, which
hides the peaks the budget is about; the instantaneous field (``NVML_FI_DEV_POWER_INSTANT``) is
used when the driver has it.

Python 3.6 compatible; pynvml and torch are optional imports.
"""

import math
import sys
from typing import Any, Dict, List, Optional, Tuple

from fleet.agent.devices import clockstate
from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, DeviceError, Option
from fleet.agent.devices.nvml_point import PointWatch
from fleet.agent.devices.nvml_restore import apply_saved, said_nvml
from fleet.method import liveness
from fleet.method.power_window import NVML_INSTANT_AVERAGE_S

POWER_STEP_W = 25.0
"""The power-limit knob's step (Zeus's default): an H100's 200-700 W range is 21 limits."""

FI_DEV_POWER_INSTANT = 186
"""nvml.h's field id of the instantaneous power (mW). nvidia-ml-py before 11.515 lacks the
constant though the driver may have the field: asked by number then, a driver without it answers
NOT_SUPPORTED and the backend falls back to the 1 s API."""

_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def import_pynvml() -> Any:  # the module: nvidia-ml-py ships no types
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
    """One NVIDIA GPU by NVML index; at most one knob: locked clocks or the power limit."""

    name = "nvml"

    def __init__(
        self,
        index: int = 0,
        allow_clock_changes: bool = False,
        allow_power_limit: bool = False,
        power_step_w: float = POWER_STEP_W,
        state_dir: Optional[str] = None,
    ) -> None:
        nv = import_pynvml()
        self._nv = nv
        self.index = int(index)
        self.allow_clock_changes = bool(allow_clock_changes)
        self.allow_power_limit = bool(allow_power_limit)
        if self.allow_clock_changes and self.allow_power_limit:
            raise DeviceError(
                "choose one knob: --allow-clock-changes (lock clocks) or --allow-power-limit "
                "(set the power limit), not both"
            )
        if not float(power_step_w) > 0:
            raise DeviceError("power_step_w must be > 0 W, got {}".format(power_step_w))
        self.power_step_w = float(power_step_w)
        self.state_dir = state_dir or clockstate.default_state_dir("/")
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
        self._limit_set = False
        self._saved = None  # type: Optional[Dict[str, Any]]  # what the state file holds
        self._watch = None  # type: Optional[PointWatch]
        self._counter_ok = True
        self._instant_field = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", FI_DEV_POWER_INSTANT)
        self.uuid = self._uuid()
        # Asked once now, so power_average_s and describe() are right before the first reading
        # (a budget window is sized from them before a sampler starts).
        self._instant_ok = self._instant_power_w() is not None
        # The clock at open: only the label of a profile's grid in current mode (rows record the
        # clock each point ran at), and the one clock lock() accepts there as a no-op.
        self._current_mhz = float(self._clock(nv.NVML_CLOCK_GRAPHICS, "read the graphics clock"))
        self._supported = None  # type: Optional[List[float]]
        self._torch_cuda = None  # type: Any  # the module torch.cuda, False (none), None (not yet)
        self.recovered = self._recover()

    # -- identity and readings --------------------------------------------------------------------
    def _error(self, what: str, exc: Exception) -> DeviceError:
        code = getattr(exc, "value", None)
        if code == getattr(self._nv, "NVML_ERROR_NO_PERMISSION", 4):
            # Locked clocks and the power limit are NVML "device commands": root/admin only
            # (nvidia-smi -acp opens application clocks, not these).
            hint = "run as root"
            return DeviceError(
                "cannot {} on GPU {}: permission denied; {}".format(what, self.index, hint)
            )
        return DeviceError("cannot {} on GPU {}: {}".format(what, self.index, exc))

    def _uuid(self) -> str:
        try:
            return _text(self._nv.nvmlDeviceGetUUID(self._handle))
        except (self._nv.NVMLError, AttributeError):
            return "index-{}".format(self.index)

    def _clock(self, kind: int, what: str) -> float:
        try:
            return float(self._nv.nvmlDeviceGetClockInfo(self._handle, kind))
        except self._nv.NVMLError as exc:
            raise self._error(what, exc) from exc

    def sm_clock_mhz(self) -> Optional[float]:
        """The SM clock now, or None when the driver does not say."""
        nv = self._nv
        try:
            return float(nv.nvmlDeviceGetClockInfo(self._handle, getattr(nv, "NVML_CLOCK_SM", 1)))
        except nv.NVMLError:
            return None

    def energy_counter_mj(self) -> Optional[float]:
        """The GPU's hardware energy counter (mJ since the driver loaded), None without one."""
        if not self._counter_ok:
            return None
        nv = self._nv
        try:
            return float(nv.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except (nv.NVMLError, AttributeError):
            self._counter_ok = False  # Volta and later have it; older cards never will
            return None

    def watch_point(self) -> PointWatch:
        """Start watching one profile point (the profiler calls this once per point, then the
        watch's ``columns(row)``): the SM clock and the energy counter beside every power
        reading until the next ``watch_point``."""
        self._watch = PointWatch(self.sm_clock_mhz, self.energy_counter_mj)
        return self._watch

    @property
    def knob_measured(self) -> bool:
        """True in current-clocks mode: the profile's clock is what the card ran, not a knob."""
        return not (self.allow_clock_changes or self.allow_power_limit)

    def current_mhz(self) -> float:
        """The grid's label in current-clocks mode (the clock at open); rows say the clock each
        point ran at (``label_measured_clocks``)."""
        return self._current_mhz

    # -- the knobs --------------------------------------------------------------------------------
    def limit_range_w(self) -> Tuple[float, float]:
        """The card's power-limit range in watts (``...LimitConstraints``)."""
        try:
            lo, hi = self._nv.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
        except self._nv.NVMLError as exc:
            raise self._error("read the power-limit range", exc) from exc
        return float(lo) / 1000.0, float(hi) / 1000.0

    def power_limit_w(self) -> Optional[float]:
        """The power limit in force now (watts), or None when the card does not say."""
        try:
            return float(self._nv.nvmlDeviceGetPowerManagementLimit(self._handle)) / 1000.0
        except self._nv.NVMLError:
            return None

    def average_power_w(self) -> Optional[float]:
        """NVML's classic reading (a ~1 s moving average on recent GPUs), for comparison with
        the instantaneous field ``read_power_w`` uses; None when the card does not say."""
        try:
            return float(self._nv.nvmlDeviceGetPowerUsage(self._handle)) / 1000.0
        except self._nv.NVMLError:
            return None

    def _supported_clocks(self) -> List[float]:
        if self._supported is None:
            nv = self._nv
            try:
                mems = nv.nvmlDeviceGetSupportedMemoryClocks(self._handle)
                # pynvml answers [] when the driver lists none (max() of it would be a traceback)
                clocks = (
                    nv.nvmlDeviceGetSupportedGraphicsClocks(self._handle, max(mems)) if mems else []
                )
            except nv.NVMLError as exc:
                raise self._error("list supported clocks", exc) from exc
            if not clocks:
                raise DeviceError(
                    "GPU {} lists no supported graphics clocks to lock; profile at current "
                    "clocks (no --allow-clock-changes)".format(self.index)
                )
            self._supported = sorted(set(float(c) for c in clocks))
        return self._supported

    def frequencies(self) -> List[float]:
        """Locked clocks (MHz), power limits (W: the card's range in ``power_step_w`` steps,
        both ends included), or none in current-clocks mode: the card picks its clock there,
        and each profile row records the one it ran at."""
        if self.allow_power_limit:
            lo, hi = self.limit_range_w()
            steps = int(math.floor((hi - lo) / self.power_step_w + 1e-9))
            values = [lo + i * self.power_step_w for i in range(steps + 1)] + [hi]
            return sorted(set(round(v, 3) for v in values))
        if self.allow_clock_changes:
            return self._supported_clocks()
        return []

    def lock(self, freq_mhz: float) -> None:
        if self.allow_power_limit:
            self._set_limit(float(freq_mhz))
            return
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
        self._save(clocks_locked=True)
        try:
            self._nv.nvmlDeviceSetGpuLockedClocks(self._handle, mhz, mhz)
        except self._nv.NVMLError as exc:
            self._forget_if_unchanged()
            raise self._error("lock graphics clocks", exc) from exc
        self._locked = True

    def _set_limit(self, watts: float) -> None:
        lo, hi = self.limit_range_w()
        if not lo - 1e-6 <= watts <= hi + 1e-6:
            raise DeviceError(
                "{:g} W is outside GPU {}'s power-limit range {:g}-{:g} W".format(
                    watts, self.index, lo, hi
                )
            )
        self._save(clocks_locked=False)
        try:
            self._nv.nvmlDeviceSetPowerManagementLimit(self._handle, int(round(watts * 1000)))
        except self._nv.NVMLError as exc:
            self._forget_if_unchanged()
            raise self._error("set the power limit", exc) from exc
        self._limit_set = True

    def _save(self, clocks_locked: bool) -> None:
        """Before the first change, the settings as found go to the state file (a killed run
        leaves them for the next start or ``powerfleet restore --backend nvml``)."""
        if self._saved is not None:
            return
        limit = self.power_limit_w() if self.allow_power_limit else None
        record = {
            "uuid": self.uuid,
            "index": self.index,
            "gpu": self._name(),
            "power_limit_mw": None if limit is None else int(round(limit * 1000)),
            "clocks_locked": bool(clocks_locked),
        }  # type: Dict[str, Any]
        clockstate.save_nvml(self.state_dir, record)
        self._saved = record

    def _forget_if_unchanged(self) -> None:
        if self._saved is not None and not (self._locked or self._limit_set):
            clockstate.remove_nvml(self.state_dir, self.uuid)
            self._saved = None

    def restore(self) -> None:
        """Put back what the state file saved: the power limit, then unlocked clocks; the file
        goes once both are back. Idempotent."""
        if self._saved is None:
            return
        apply_saved(self._nv, self._handle, self._saved, self._error)
        self._locked = self._limit_set = False
        clockstate.remove_nvml(self.state_dir, self.uuid)
        self._saved = None

    def _recover(self) -> Optional[Dict[str, Any]]:
        """Settings a killed run left on this GPU: put back (a knob mode), or named on stderr
        (current-clocks mode changes nothing, not even that). A live writer's are refused."""
        records = [r for r in clockstate.load_nvml(self.state_dir) if r["uuid"] == self.uuid]
        if not records:
            return None
        record = records[0]
        owner = liveness.holder(record)
        if owner == "self":  # a second backend in this process: adopt its originals
            self._saved = record
            return None
        if owner == "alive":
            raise DeviceError(
                "GPU {} settings are held by running process {} (state {}); stop it first, or "
                "remove the file if that process is not powerfleet".format(
                    self.index, record.get("pid"), record["path"]
                )
            )
        if self.knob_measured:
            sys.stderr.write(
                "powerfleet: GPU {} still has settings an interrupted run changed ({}); run "
                "powerfleet restore --backend nvml to put them back\n".format(
                    self.index, said_nvml(record)
                )
            )
            return None
        apply_saved(self._nv, self._handle, record, self._error)
        clockstate.remove_nvml(self.state_dir, self.uuid)
        sys.stderr.write(
            "powerfleet: restored GPU {} ({}) from {} left by an interrupted run\n".format(
                self.index, said_nvml(record), record["path"]
            )
        )
        return record

    # -- power ------------------------------------------------------------------------------------
    def _instant_power_w(self) -> Optional[float]:
        nv = self._nv
        try:
            values = nv.nvmlDeviceGetFieldValues(self._handle, [self._instant_field])
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
        watch = self._watch
        if watch is not None:
            if watch.done:
                self._watch = None
            else:
                watch.read()  # the clock and the counter beside every power reading of a point
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

    def _name(self) -> Optional[str]:
        try:
            return _text(self._nv.nvmlDeviceGetName(self._handle))
        except self._nv.NVMLError:
            return None

    def describe(self) -> Dict[str, object]:
        nv = self._nv
        mode = "current"
        if self.allow_clock_changes:
            mode = "locked"
        elif self.allow_power_limit:
            mode = "power-limit"
        info = {
            "backend": self.name,
            "index": self.index,
            "mode": mode,
            # What freq_mhz means in this profile: the knob set, or the clock measured.
            "knob": {"current": "sm_clock_measured", "locked": "graphics_clock_mhz"}.get(
                mode, "power_limit_w"
            ),
            "power": "instant" if self._instant_ok else "average",
            "energy": "counter" if self.energy_counter_mj() is not None else "sampled",
        }  # type: Dict[str, object]
        name = self._name()
        if name:
            info["gpu"] = name
        try:
            info["driver"] = _text(nv.nvmlSystemGetDriverVersion())
        except (nv.NVMLError, AttributeError):
            pass
        limit = self.power_limit_w()
        if limit is not None:
            info["power_limit_w"] = limit
        return info


SPEC = BackendSpec(
    name="nvml",
    factory=NvmlBackend,
    options=(
        Option("index", int, "NVML index of the GPU", 0, public="gpu-index"),
        Option(
            "allow_clock_changes",
            bool,
            "lock graphics clocks (needs root); default: profile at the card's current clock only",
            False,
        ),
        Option(
            "allow_power_limit",
            bool,
            "set the GPU power limit as the knob (watts; needs root); saved first and restored "
            "on every way out (after a kill: powerfleet restore --backend nvml)",
            False,
        ),
        Option("power_step_w", float, "power-limit knob step in watts", POWER_STEP_W),
        Option("state_dir", str, "where the original settings are saved (powerfleet restore)"),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cuda"),
    summary="discrete NVIDIA GPU through NVML (nvidia-ml-py)",
)
