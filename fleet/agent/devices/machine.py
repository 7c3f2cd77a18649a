"""What a machine that is not (or not yet) a Jetson is, and what powerfleet can run there.

Why: most first contacts are on a laptop or a workstation, where the Jetson survey finds no GPU
devfreq node and no INA sensor and can only say "no". A newcomer needs to hear what the machine
*is* (a PC with or without an NVIDIA GPU, a CPU with or without RAPL power counters) and what
runs on it: the nvml or cpu backends, the fleet simulation, a virtual board rehearsal. Every
probe only reads, and every probe that fails is an answer ("no NVML: ..."), never an error.
NVML is probed only on the live machine (``sysfs_root`` "/"): a copied tree has no driver.

Python 3.6 compatible, stdlib only (``pynvml`` is imported if it is there).
"""

import glob
import os
import re
from typing import Any, Dict, List

from fleet.agent.devices.cpu import find_rapl_packages
from fleet.agent.devices.sysfs import read_text, under


def _read(path: str) -> str:
    try:
        return read_text(path)
    except (OSError, UnicodeDecodeError):
        return ""


def cpu_model(root: str) -> str:
    """The CPU's model name from /proc/cpuinfo ('' when not there, e.g. a copied tree)."""
    text = _read(under(root, "proc/cpuinfo"))
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return ""


def nvidia_gpus(root: str) -> Dict[str, Any]:
    """NVIDIA GPUs: the driver's /proc entries, and NVML when this is the live machine."""
    found = {"present": False, "names": [], "nvml": False}  # type: Dict[str, Any]
    for info in sorted(glob.glob(under(root, "proc/driver/nvidia/gpus/*/information"))):
        for line in _read(info).splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model" and value.strip():
                found["names"].append(value.strip())
    if found["names"]:
        found["present"] = True
    if os.path.abspath(root) != "/":
        found["nvml_error"] = "not probed (a copied tree, not this machine)"
        return found
    try:
        import pynvml
    except ImportError:
        found["nvml_error"] = "the nvidia-ml-py package is not installed (import pynvml failed)"
        return found
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: all mean "no"
        found["nvml_error"] = "NVML did not start: {}".format(exc)
        return found
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        found["names"] = names or found["names"]
        found["nvml"] = bool(names)
        found["present"] = found["present"] or bool(names)
    except Exception as exc:
        found["nvml_error"] = "NVML answered with an error: {}".format(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # already down: nothing to release
            pass
    return found


def rapl(root: str) -> Dict[str, Any]:
    """The CPU's RAPL package counters under powercap, and whether this user can read them
    (recent kernels make ``energy_uj`` readable by root only)."""
    powercap = under(root, "sys/class/powercap")
    packages = [
        p
        for p in glob.glob(os.path.join(powercap, "intel-rapl:*"))
        if re.match(r"intel-rapl:\d+$", os.path.basename(p))
    ]
    readable = find_rapl_packages(powercap)  # those whose energy counter reads
    return {
        "present": bool(packages),
        "packages": len(packages),
        "readable": bool(readable),
        "powercap_root": powercap,
    }


def machine(root: str, is_jetson: bool) -> Dict[str, Any]:
    """``kind`` ('jetson' or 'pc'), ``cpu``, ``nvidia_gpu``, ``rapl`` and ``summary``: one
    sentence saying what this machine is."""
    gpu = nvidia_gpus(root)
    power = rapl(root)
    cpu = cpu_model(root)
    if is_jetson:
        summary = "a Jetson board"
    else:
        gpu_part = (
            "an NVIDIA GPU ({})".format(", ".join(gpu["names"]))
            if gpu["present"]
            else "no NVIDIA GPU"
        )
        if power["present"] and power["readable"]:
            cpu_part = "RAPL power counters"
        elif power["present"]:
            cpu_part = "RAPL power counters this user cannot read (root only)"
        else:
            cpu_part = "no RAPL power counters"
        summary = "not a Jetson: a PC with {}; its CPU{} has {}".format(
            gpu_part, " ({})".format(cpu) if cpu else "", cpu_part
        )
    return {
        "kind": "jetson" if is_jetson else "pc",
        "cpu": cpu,
        "nvidia_gpu": gpu,
        "rapl": power,
        "summary": summary,
    }


def can_run(m: Dict[str, Any], jetson_ready: bool) -> List[Dict[str, str]]:
    """What runs here, each with the exact command to start it."""
    out = []  # type: List[Dict[str, str]]
    if m["kind"] == "jetson":
        if jetson_ready:
            out.append(
                {
                    "what": "profile this board (the jetson backend)",
                    "command": "sudo powerfleet profile --backend jetson --model small_cnn "
                    "--out profile.csv",
                }
            )
        return out
    gpu = m["nvidia_gpu"]
    if gpu["nvml"]:
        out.append(
            {
                "what": "profile the NVIDIA GPU (nvml backend: power from NVML; clocks locked "
                "only with --allow-clock-changes)",
                "command": "powerfleet profile --backend nvml --model small_cnn --out profile.csv",
            }
        )
    elif gpu["present"]:
        out.append(
            {
                "what": "the nvml backend, once NVML starts (" + gpu.get("nvml_error", "") + ")",
                "command": "pip install nvidia-ml-py",
            }
        )
    power = m["rapl"]
    out.append(
        {
            "what": "profile the CPU (cpu backend: "
            + (
                "power from RAPL)"
                if power["readable"]
                else "times only, no power: RAPL "
                + ("needs root)" if power["present"] else "absent)")
            ),
            "command": "powerfleet profile --backend cpu --model small_cnn --batch-sizes 4,8,16 "
            "--out profile.csv",
        }
    )
    out.append(
        {
            "what": "simulate a fleet round from recorded Jetson profiles",
            "command": "powerfleet simulate --engine direct",
        }
    )
    out.append(
        {
            "what": "rehearse a board owner's path on a virtual Jetson (a sysfs tree and a "
            "kernel stand-in; README, 'Before the board arrives', has the whole path), one "
            "command a line",
            "command": "\n".join(
                [
                    "python -m simulations.virtual_jetson build /tmp/vboard --board nano",
                    "python -m simulations.virtual_jetson kernel /tmp/vboard &",
                    "powerfleet doctor --sysfs-root /tmp/vboard",
                    "powerfleet profile --backend jetson --sysfs-root /tmp/vboard "
                    "--model small_cnn --batch-sizes 4,8 --out /tmp/vboard/profile.csv",
                ]
            ),
        }
    )
    return out
