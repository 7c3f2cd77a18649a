"""The fake card behind the *real* pynvml: a stand-in for ``libnvidia-ml.so`` with its C ABI.

Why: ``fake_nvml`` stands for the pynvml module, so tests against it cannot catch a call the real
bindings would refuse (an argument ctypes will not convert, a str where bytes are needed, a return
shape such as the field values' ctypes array of unions). Here the real ``pynvml.py`` of
nvidia-ml-py runs unchanged and only its shared library is replaced: each symbol unpacks the ctypes
arguments pynvml built, asks ``fake_nvml``'s card, writes the answers back through the pointers
and returns an ``nvmlReturn_t``, as the C library does; a symbol not here is missing from the
library (pynvml raises ``NVMLError_FunctionNotFound``).

``load(path=None)`` imports the real pynvml (installed, or ``pynvml.py`` in ``path``) wired to
this library, or None when there is none. Tests only; never loads the real ``libnvidia-ml``.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from simulations import fake_nvml as F

INSUFFICIENT_SIZE = 7  # NVML_ERROR_INSUFFICIENT_SIZE: "ask again with a buffer this large"
_H = F.Handle(0)


def _call(fn: Callable[..., Any], *args: Any) -> tuple[int, Any]:
    try:
        return 0, fn(*args)
    except F.NVMLError as exc:
        return int(exc.value), None


def _put(ref: Any, value: Any, ctype: Any = ctypes.c_uint) -> None:
    """Write ``value`` where a ``byref()`` argument points, as the C library writes its out
    parameters: through a pointer of the header's type (``unsigned int`` unless told)."""
    ctypes.cast(ref, ctypes.POINTER(ctype))[0] = value


def _buffer(fn: Callable[..., Any], buf: Any, *args: Any) -> int:
    rc, text = _call(fn, *args)
    if rc == 0:
        buf.value = text.encode() if isinstance(text, str) else text
    return rc


def _array(values: list[int], count_ref: Any, arr: Any) -> int:
    _put(count_ref, len(values))
    if arr is None:  # the size query: pynvml asks again with an array this large
        return INSUFFICIENT_SIZE if values else 0
    for i, v in enumerate(values):
        arr[i] = v
    return 0


class FakeLib:
    """``pynvml.nvmlLib``: the symbols pynvml looks up with ``getattr``."""

    def __init__(self, nv: ModuleType) -> None:
        self.nv = nv
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Callable[..., int]:
        impl = getattr(self, "_" + name, None)
        if impl is None:
            raise AttributeError(name)  # pynvml: NVMLError_FunctionNotFound
        self.called.add(name)
        return impl

    def _device(self, handle: Any) -> None:
        """The handle pynvml passes is its ``c_nvmlDevice_t``; anything else is a wrong call."""
        if not isinstance(handle, self.nv.c_nvmlDevice_t):
            raise TypeError(f"not a c_nvmlDevice_t: {handle!r}")

    # -- the library --------------------------------------------------------------------------
    def _nvmlInitWithFlags(self, flags: int) -> int:
        return _call(F.nvmlInit)[0]

    def _nvmlInit_v2(self) -> int:
        return _call(F.nvmlInit)[0]

    def _nvmlShutdown(self) -> int:
        return _call(F.nvmlShutdown)[0]

    def _nvmlErrorString(self, code: int) -> bytes:
        return F.MESSAGES.get(code, "Unknown Error").encode()

    def _nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        return _buffer(F.nvmlSystemGetDriverVersion, buf)

    def _nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        rc, n = _call(F.nvmlDeviceGetCount)
        if rc == 0:
            _put(ref, n)
        return rc

    def _nvmlDeviceGetHandleByIndex_v2(self, index: ctypes.c_uint, ref: Any) -> int:
        return _call(F.nvmlDeviceGetHandleByIndex, index.value)[0]

    def _nvmlDeviceGetHandleByUUID(self, uuid: ctypes.c_char_p, ref: Any) -> int:
        return _call(F.nvmlDeviceGetHandleByUUID, uuid.value)[0]

    # -- one device ---------------------------------------------------------------------------
    def _nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:
        self._device(handle)
        return _buffer(F.nvmlDeviceGetUUID, buf, _H)

    def _nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        self._device(handle)
        return _buffer(F.nvmlDeviceGetName, buf, _H)

    def _nvmlDeviceGetClockInfo(self, handle: Any, kind: Any, ref: Any) -> int:
        self._device(handle)
        rc, mhz = _call(F.nvmlDeviceGetClockInfo, _H, getattr(kind, "value", kind))
        if rc == 0:
            _put(ref, mhz)
        return rc

    def _nvmlDeviceGetSupportedMemoryClocks(self, handle: Any, count: Any, arr: Any) -> int:
        self._device(handle)
        rc, mhz = _call(F.nvmlDeviceGetSupportedMemoryClocks, _H)
        return rc or _array(mhz, count, arr)

    def _nvmlDeviceGetSupportedGraphicsClocks(
        self, handle: Any, mem: ctypes.c_uint, count: Any, arr: Any
    ) -> int:
        self._device(handle)
        rc, mhz = _call(F.nvmlDeviceGetSupportedGraphicsClocks, _H, mem.value)
        return rc or _array(mhz, count, arr)

    def _nvmlDeviceSetGpuLockedClocks(
        self, handle: Any, lo: ctypes.c_uint, hi: ctypes.c_uint
    ) -> int:
        self._device(handle)
        return _call(F.nvmlDeviceSetGpuLockedClocks, _H, lo.value, hi.value)[0]

    def _nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> int:
        self._device(handle)
        return _call(F.nvmlDeviceResetGpuLockedClocks, _H)[0]

    def _nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any, lo: Any, hi: Any) -> int:
        self._device(handle)
        rc, pair = _call(F.nvmlDeviceGetPowerManagementLimitConstraints, _H)
        if rc == 0:
            _put(lo, pair[0])
            _put(hi, pair[1])
        return rc

    def _nvmlDeviceSetPowerManagementLimit(self, handle: Any, mw: ctypes.c_uint) -> int:
        self._device(handle)
        return _call(F.nvmlDeviceSetPowerManagementLimit, _H, mw.value)[0]

    def _read(
        self, fn: Callable[..., Any], handle: Any, ref: Any, ctype: Any = ctypes.c_uint
    ) -> int:
        self._device(handle)
        rc, value = _call(fn, _H)
        if rc == 0:
            _put(ref, value, ctype)
        return rc

    def _nvmlDeviceGetPowerManagementLimit(self, handle: Any, ref: Any) -> int:
        return self._read(F.nvmlDeviceGetPowerManagementLimit, handle, ref)

    def _nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any, ref: Any) -> int:
        return self._read(F.nvmlDeviceGetPowerManagementDefaultLimit, handle, ref)

    def _nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, ref: Any) -> int:
        return self._read(F.nvmlDeviceGetEnforcedPowerLimit, handle, ref)

    def _nvmlDeviceGetPowerUsage(self, handle: Any, ref: Any) -> int:
        return self._read(F.nvmlDeviceGetPowerUsage, handle, ref)

    def _nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, ref: Any) -> int:
        # unsigned long long: millijoules since the driver loaded
        return self._read(F.nvmlDeviceGetTotalEnergyConsumption, handle, ref, ctypes.c_ulonglong)

    def _nvmlDeviceGetFieldValues(self, handle: Any, n: ctypes.c_int32, ref: Any) -> int:
        self._device(handle)
        # pynvml's c_nvmlFieldValue_t array, fieldId (and scopeId) filled in
        values = ctypes.cast(ref, ctypes.POINTER(self.nv.c_nvmlFieldValue_t))
        slots = [values[i] for i in range(n.value)]
        rc, got = _call(F.nvmlDeviceGetFieldValues, _H, [slot.fieldId for slot in slots])
        if rc:
            return rc
        for slot, field in zip(slots, got, strict=True):
            slot.nvmlReturn = field.nvmlReturn
            slot.valueType = field.valueType
            slot.value.uiVal = field.value.uiVal
        return 0


def load(path: str | os.PathLike | None = None) -> ModuleType | None:
    """The real pynvml (``path/pynvml.py``, else the installed one) on ``FakeLib``; None when
    there is none (or the one found is ``fake_nvml`` itself). Registered as ``sys.modules
    ["pynvml"]`` (pynvml builds its error classes through it): the caller puts back what was
    there (a test: ``monkeypatch.setitem`` first)."""
    if path is not None:
        origin: str | None = os.path.join(str(path), "pynvml.py")
    else:
        # the file on sys.path, whatever sys.modules holds (a test puts None or the fake there)
        spec = importlib.machinery.PathFinder.find_spec("pynvml")
        origin = spec.origin if spec is not None else None
    if not origin or not os.path.isfile(origin) or "fake_nvml" in Path(origin).read_text():
        return None
    spec = importlib.util.spec_from_file_location("pynvml", origin)
    if spec is None or spec.loader is None:
        return None
    nv = importlib.util.module_from_spec(spec)
    sys.modules["pynvml"] = nv
    spec.loader.exec_module(nv)
    setattr(nv, "nvmlLib", FakeLib(nv))  # noqa: B010 - the module is untyped
    return nv
