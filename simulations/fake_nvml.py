"""A stand-in for the ``pynvml`` module (nvidia-ml-py) that behaves like a real card.

Why: the NVML backend changes shared, expensive cards (a power limit, locked clocks) and must put
them back on every way out, SIGKILL included. That can only be tested against something that
keeps the card's state where a killed process leaves it, refuses what the driver refuses and
answers with the driver's numbers. This module is that card, with the API surface the backend
and ``benchmarks/gpu_check.py`` use, the real constants and error codes:

- the power limit is clamped by the card's range: outside
  ``nvmlDeviceGetPowerManagementLimitConstraints`` a set is ``NVML_ERROR_INVALID_ARGUMENT``, and
  without privilege (``privileged`` false: not root) ``NVML_ERROR_NO_PERMISSION``, as on a real
  card; locked clocks likewise;
- power follows the load and the limit: ``idle_w + load * demand`` held at the enforced limit
  (the 1 s average sits at the limit; the instantaneous field ripples around it, as the H100
  measurements of 2026-11-27 showed 814-927 W readings against a 700 W limit);
- the SM clock is the idle clock with no load and moves under load: the top clock when the
  demand fits under the limit, lower when the limit holds it back, a little jitter either way;
- the hardware energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) advances with the
  power, integrated exactly over wall time between calls.

State that must outlive a process (the limit, locked clocks, privilege, the card's identity) lives
in a JSON file named by ``FAKE_NVML_STATE`` (or ``configure(path)``); the load is per process
(``set_load``: what the workload of this process asks of the card). Without a file the card lives
in memory. ``shim_dir(path)`` writes a ``pynvml.py`` that stands for this module, for a
subprocess run with that directory first on ``PYTHONPATH``. Never imports the real ``pynvml``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

ENV = "FAKE_NVML_STATE"
RIPPLE_HZ = 7.3  # the instantaneous field's ripple, on the monotonic clock

# The constants of nvml.h / pynvml.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FI_DEV_POWER_INSTANT = 186
_FI_POWER_INSTANT = 186  # the driver's field: a test may take the module's constant away
NVML_VALUE_TYPE_UNSIGNED_INT = 1

#: An H100 80GB HBM3 as nvidia-smi and the 2026-11-27 measurements saw it.
H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-fake-h100-0000",
    "driver": "580.159.04",
    "min_limit_mw": 200000,
    "max_limit_mw": 700000,
    "default_limit_mw": 700000,
    "limit_mw": 700000,
    "idle_w": 72.0,
    "demand_w": 680.0,  # dynamic power at full load with no limit in the way
    "idle_mhz": 345,
    "max_mhz": 1980,
    "min_mhz": 210,
    "mem_mhz": [1593, 2619],
    "locked_mhz": None,
    "privileged": False,
    "ripple": 0.04,  # the instantaneous field's ripple around the average
    "energy_mj": 0,
    "instant_field": True,  # False: a driver without NVML_FI_DEV_POWER_INSTANT (1 s average only)
}


class NVMLError(Exception):
    """What pynvml raises: ``value`` is the NVML return code. As in pynvml, ``NVMLError(code)``
    is an instance of the code's subclass (``NVMLError_NoPermission``...), and each subclass
    can be raised without the code."""

    code: int | None = None  # a subclass's code (NVMLError_NoPermission: 4)

    def __new__(cls, value: int | None = None) -> NVMLError:
        if cls is NVMLError and value is not None:
            cls = ERROR_CLASSES.get(value, cls)
        return Exception.__new__(cls)

    def __init__(self, value: int | None = None) -> None:
        code = self.code if self.code is not None else int(value or 0)
        super().__init__(MESSAGES.get(code, f"Unknown Error {code}"))
        self.value = code


MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
}

# pynvml's names: NVML_ERROR_NO_PERMISSION -> NVMLError_NoPermission; NVMLError(code) builds one
ERROR_CLASSES: dict[int, type[NVMLError]] = {}
for _name, _code in list(globals().items()):
    if _name.startswith("NVML_ERROR_"):
        _words = _name[len("NVML_ERROR_") :].split("_")
        _name = "NVMLError_" + "".join(w.capitalize() for w in _words)
        _cls: type[NVMLError] = type(_name, (NVMLError,), {"code": _code})
        ERROR_CLASSES[_code] = _cls
        globals()[_cls.__name__] = _cls


class _Card:
    """One GPU: persistent settings (file or memory) plus this process's load and counter."""

    def __init__(self, path: str | None, settings: dict[str, Any]) -> None:
        self.path = path
        self.s = dict(settings)
        self.load = 0.0
        self.lock = threading.Lock()
        self.t_last = time.monotonic()
        self.t0 = self.t_last
        self.energy_mj = float(self.s.get("energy_mj", 0))

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path + ".tmp"
        Path(tmp).write_text(json.dumps(self.s, sort_keys=True))
        os.replace(tmp, self.path)

    def limit_w(self) -> float:
        return self.s["limit_mw"] / 1000.0

    def avg_w(self) -> float:
        """The power the card holds now (what the 1 s average settles at)."""
        free = self.s["idle_w"] + self.load * self.s["demand_w"]
        locked = self.s.get("locked_mhz")
        if locked is not None and self.load > 0:  # a lower clock draws less dynamic power
            share = min(1.0, float(locked) / self.s["max_mhz"])
            free = self.s["idle_w"] + self.load * self.s["demand_w"] * share
        return min(free, self.limit_w())

    def advance(self) -> float:
        """Integrate the energy counter up to now; returns now (monotonic)."""
        now = time.monotonic()
        self.energy_mj += self.avg_w() * (now - self.t_last) * 1000.0
        self.t_last = now
        return now

    def instant_w(self) -> float:
        now = self.advance()
        ripple = self.s["ripple"] * math.sin(2 * math.pi * RIPPLE_HZ * (now - self.t0))
        return self.avg_w() * (1.0 + ripple) if self.load > 0 else self.avg_w()

    def sm_mhz(self) -> int:
        if self.load <= 0:
            return int(self.s["idle_mhz"])
        idle, top = self.s["idle_w"], self.s["max_mhz"]
        free = idle + self.load * self.s["demand_w"]
        mhz = float(top)
        if free > self.limit_w():  # the limit holds the clock back
            mhz = top * max(0.0, self.limit_w() - idle) / max(1e-9, free - idle)
        locked = self.s.get("locked_mhz")
        if locked is not None:
            mhz = min(mhz, float(locked))
        jitter = 15 * (int((time.monotonic() - self.t0) * 10) % 3)  # 0, 15 or 30 MHz
        return int(max(self.s["min_mhz"], min(top, 15 * round(mhz / 15) - jitter)))


_state: dict[str, Any] = {"card": None, "inits": 0}
_guard = threading.Lock()


def configure(path: str | os.PathLike | None = None, **settings: Any) -> None:
    """Start a card: settings over the H100's; written to ``path`` (or ``$FAKE_NVML_STATE``)."""
    card = dict(H100)
    card.update(settings)
    target = str(path) if path is not None else os.environ.get(ENV)
    with _guard:
        _state["card"] = _Card(target, card)
        _state["card"].save()


def card_settings(path: str | os.PathLike) -> dict[str, Any]:
    """The settings a card file holds now (what a test checks after a kill)."""
    return json.loads(Path(path).read_text())


def _card() -> _Card:
    card = _state["card"]
    if card is None:
        path = os.environ.get(ENV)
        with _guard:
            if _state["card"] is None:
                settings = dict(H100)
                if path and os.path.exists(path):
                    settings.update(json.loads(Path(path).read_text()))
                _state["card"] = _Card(path, settings)
        card = _state["card"]
    return card


def _reload(card: _Card) -> None:
    """Pick up settings another process wrote (a restore after a kill)."""
    if card.path and os.path.exists(card.path):
        card.advance()
        card.s.update(json.loads(Path(card.path).read_text()))


def set_load(fraction: float) -> None:
    """What this process's workload asks of the card: 0 idle, 1 full (a matmul loop)."""
    card = _card()
    with card.lock:
        card.advance()
        card.load = max(0.0, float(fraction))


def set_privileged(flag: bool) -> None:
    card = _card()
    with card.lock:
        card.s["privileged"] = bool(flag)
        card.save()


# -- the pynvml API -------------------------------------------------------------------------------
class Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _check(handle: Any) -> _Card:
    if _state["inits"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if not isinstance(handle, Handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _card()


def nvmlInit() -> None:
    _state["inits"] += 1
    card = _card()
    with card.lock:
        _reload(card)


def nvmlShutdown() -> None:
    if _state["inits"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _state["inits"] -= 1


def nvmlDeviceGetCount() -> int:
    _check(Handle(0))
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
    _check(Handle(0))
    if int(index) != 0:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return Handle(0)


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> Handle:
    card = _check(Handle(0))
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    if text != card.s["uuid"]:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return Handle(0)


def nvmlDeviceGetName(handle: Any) -> str:
    return _check(handle).s["name"]


def nvmlDeviceGetUUID(handle: Any) -> str:
    return _check(handle).s["uuid"]


def nvmlSystemGetDriverVersion() -> str:
    return _check(Handle(0)).s["driver"]


def nvmlDeviceGetClockInfo(handle: Any, kind: int) -> int:
    card = _check(handle)
    with card.lock:
        if kind == NVML_CLOCK_MEM:
            return int(max(card.s["mem_mhz"]))
        if kind not in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return card.sm_mhz()


def nvmlDeviceGetSupportedMemoryClocks(handle: Any) -> list[int]:
    return list(_check(handle).s["mem_mhz"])


def nvmlDeviceGetSupportedGraphicsClocks(handle: Any, mem_mhz: int) -> list[int]:
    card = _check(handle)
    if int(mem_mhz) not in card.s["mem_mhz"]:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    lo, hi = card.s["min_mhz"], card.s["max_mhz"]
    return sorted(range(hi, lo - 1, -15), reverse=True)


def _privileged(card: _Card) -> None:
    if not card.s.get("privileged"):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)


def nvmlDeviceSetGpuLockedClocks(handle: Any, lo: int, hi: int) -> None:
    card = _check(handle)
    with card.lock:
        _privileged(card)
        if not card.s["min_mhz"] <= int(lo) <= int(hi) <= card.s["max_mhz"]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        card.advance()
        card.s["locked_mhz"] = int(hi)
        card.save()


def nvmlDeviceResetGpuLockedClocks(handle: Any) -> None:
    card = _check(handle)
    with card.lock:
        _privileged(card)
        card.advance()
        card.s["locked_mhz"] = None
        card.save()


def nvmlDeviceGetPowerManagementLimitConstraints(handle: Any) -> list[int]:
    card = _check(handle)
    return [int(card.s["min_limit_mw"]), int(card.s["max_limit_mw"])]


def nvmlDeviceGetPowerManagementLimit(handle: Any) -> int:
    card = _check(handle)
    with card.lock:
        return int(card.s["limit_mw"])


def nvmlDeviceGetPowerManagementDefaultLimit(handle: Any) -> int:
    return int(_check(handle).s["default_limit_mw"])


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    return nvmlDeviceGetPowerManagementLimit(handle)


def nvmlDeviceSetPowerManagementLimit(handle: Any, limit_mw: int) -> None:
    card = _check(handle)
    with card.lock:
        _privileged(card)
        if not card.s["min_limit_mw"] <= int(limit_mw) <= card.s["max_limit_mw"]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        card.advance()
        card.s["limit_mw"] = int(limit_mw)
        card.save()


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    card = _check(handle)
    with card.lock:
        card.advance()
        return int(round(card.avg_w() * 1000))


def nvmlDeviceGetTotalEnergyConsumption(handle: Any) -> int:
    card = _check(handle)
    with card.lock:
        card.advance()
        return int(card.energy_mj)


class _Value:
    def __init__(self, mw: int) -> None:
        self.uiVal = mw
        self.dVal = float(mw)


class _Field:
    def __init__(self, field_id: int, ret: int, mw: int) -> None:
        self.fieldId = field_id
        self.nvmlReturn = ret
        self.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
        self.value = _Value(mw)


def nvmlDeviceGetFieldValues(handle: Any, field_ids: list[int]) -> list[_Field]:
    card = _check(handle)
    out = []
    with card.lock:
        for fid in field_ids:
            if fid == _FI_POWER_INSTANT and card.s.get("instant_field", True):
                out.append(_Field(fid, NVML_SUCCESS, int(round(card.instant_w() * 1000))))
            else:
                out.append(_Field(fid, NVML_ERROR_NOT_SUPPORTED, 0))
    return out


def shim_dir(path: str | os.PathLike) -> str:
    """Write ``path/pynvml.py`` standing for this module; put ``path`` first on PYTHONPATH."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(
        "import sys\nimport simulations.fake_nvml as _fake\nsys.modules[__name__] = _fake\n"
    )
    return str(folder)


def install() -> Any:
    """Load this module in place of ``pynvml`` in this process; returns it."""
    import sys

    sys.modules["pynvml"] = sys.modules[__name__]
    return sys.modules[__name__]
