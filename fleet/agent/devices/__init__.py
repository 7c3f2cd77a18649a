"""Device backends: one small interface over Jetson sysfs, NVML, the CPU and a replayed profile.

``open_backend(kind, **options)`` is the one place that maps a name from the command line or the
node config to a backend, so callers never import board-specific modules they do not need (the
NVML module is imported only when asked for, since pynvml is optional).
"""

import importlib
import inspect

from .base import Backend, DeviceError

BACKENDS = {
    "jetson": ("jetson", "JetsonBackend"),
    "nvml": ("nvml", "NvmlBackend"),
    "cpu": ("cpu", "CpuBackend"),
    "replay": ("replay", "ReplayBackend"),
}


def open_backend(kind: str, **options: object) -> Backend:
    """Construct the backend named ``kind`` with keyword ``options`` (its constructor's args)."""
    key = str(kind).strip().lower()
    if key not in BACKENDS:
        raise DeviceError(
            "unknown device backend {!r}; valid kinds: {}".format(kind, ", ".join(sorted(BACKENDS)))
        )
    module_name, class_name = BACKENDS[key]
    module = importlib.import_module("." + module_name, __name__)
    cls = getattr(module, class_name)
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise DeviceError(
            "backend {!r} does not take option(s) {}; valid options: {}".format(
                key, ", ".join(unknown), ", ".join(accepted) or "none"
            )
        )
    return cls(**options)


__all__ = ["Backend", "DeviceError", "BACKENDS", "open_backend"]
