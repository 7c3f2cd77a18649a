"""Putting an NVML GPU back as a killed run found it: the saved power limit, unlocked clocks.

Why a module of its own: the backend puts its own changes back (``NvmlBackend.restore``) and a
start after a SIGKILL puts back what the state file says (``NvmlBackend._recover``), and
``powerfleet restore --backend nvml`` does the same without opening a backend (a boot unit, an
operator): one function applies a saved record for all three. Python 3.6 compatible, stdlib only.
"""

from typing import Any, Callable, Dict, List

from fleet.agent.devices import clockstate
from fleet.agent.devices.base import DeviceError
from fleet.method import liveness


def apply_saved(nv: Any, handle: Any, record: Dict[str, Any], error: Callable) -> None:
    """Put a saved record back on the GPU behind ``handle``: the limit, then the clocks."""
    limit = record.get("power_limit_mw")
    if limit is not None:
        try:
            nv.nvmlDeviceSetPowerManagementLimit(handle, int(limit))
        except nv.NVMLError as exc:
            raise error("restore the power limit to {:g} W".format(limit / 1000.0), exc) from exc
    if record.get("clocks_locked"):
        try:
            nv.nvmlDeviceResetGpuLockedClocks(handle)
        except nv.NVMLError as exc:
            raise error("reset locked clocks", exc) from exc


def said_nvml(record: Dict[str, Any]) -> str:
    """The saved settings of a record, for a line on stderr."""
    parts = []
    if record.get("power_limit_mw") is not None:
        parts.append("power limit {:g} W".format(record["power_limit_mw"] / 1000.0))
    if record.get("clocks_locked"):
        parts.append("clocks unlocked")
    return ", ".join(parts) or "nothing changed"


def restore_saved(state_dir: str, import_nvml: Callable[[], Any]) -> List[Dict[str, Any]]:
    """``powerfleet restore --backend nvml``: put back every GPU a killed run left changed in
    ``state_dir`` (found by UUID), remove each file; the records restored. A live writer's
    file, or a GPU that is not here, is a one-line DeviceError. ``import_nvml`` gives the
    pynvml module (imported only when there is something to restore)."""
    records = clockstate.load_nvml(state_dir)
    if not records:
        return []
    nv = import_nvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise DeviceError("cannot initialise NVML: {}".format(exc)) from exc
    done = []
    for record in records:
        if liveness.holder(record) == "alive":
            raise DeviceError(
                "GPU {} settings are held by running process {} (state {}); stop it first".format(
                    record.get("index"), record.get("pid"), record["path"]
                )
            )
        try:
            # bytes: what every nvidia-ml-py takes (11.495 and older refuse a str with a TypeError)
            handle = nv.nvmlDeviceGetHandleByUUID(str(record["uuid"]).encode())
        except nv.NVMLError as exc:
            raise DeviceError(
                "GPU {} named in {} is not here: {}".format(record["uuid"], record["path"], exc)
            ) from exc

        def error(what: str, exc: Exception, record: Dict[str, Any] = record) -> DeviceError:
            if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_NO_PERMISSION", 4):
                return DeviceError(
                    "cannot {} on GPU {}: permission denied; run powerfleet restore as root".format(
                        what, record["uuid"]
                    )
                )
            return DeviceError("cannot {} on GPU {}: {}".format(what, record["uuid"], exc))

        apply_saved(nv, handle, record, error)
        clockstate.remove_nvml(state_dir, record["uuid"])
        done.append(record)
    return done
