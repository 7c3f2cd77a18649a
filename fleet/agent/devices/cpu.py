"""CPU-only hosts: no frequency knob, power from Intel RAPL energy counters when readable.

Why: the agent must run (and its tests must pass) on machines without a GPU, and a CPU profile is
still useful for time. RAPL exposes cumulative energy (``energy_uj``) per package; power is the
energy difference between two reads divided by the time between them, so each reading is the
mean power since the previous one (at the sampler's 20 Hz, the last 50 ms). The counter wraps at
``max_energy_range_uj``. Recent kernels make ``energy_uj`` root-only and containers often hide
powercap: then power is "unavailable" and profiles are time-only.

A profile row needs a clock > 0 (a GPU never runs at 0 MHz, and a 0 in ``freq_mhz`` is refused
as a typo). The CPU has no knob here, so its rows record the clock it ran at: cpufreq's
``scaling_cur_freq`` (kHz) averaged over the cores, else the mean ``cpu MHz`` of
``/proc/cpuinfo``; a host that exposes neither cannot be profiled (one line says so).

Python 3.6 compatible, stdlib only.
"""

import glob
import os
import re
import time
from typing import Callable, Dict, List, NamedTuple, Optional

from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, DeviceError, Option

RaplDomain = NamedTuple(
    "RaplDomain", [("name", str), ("energy_path", str), ("max_range_uj", Optional[int])]
)

_PACKAGE = re.compile(r"^intel-rapl:\d+$")  # package domains; intel-rapl:0:0 etc. are sub-domains


def _read_int(path: str) -> int:
    with open(path, "r") as fh:
        return int(fh.read().strip())


def host_clock_mhz(
    cpufreq_root: str = "/sys/devices/system/cpu", cpuinfo: str = "/proc/cpuinfo"
) -> Optional[float]:
    """The CPU's current clock in MHz, averaged over the cores that report one; None if the
    host says nothing (no cpufreq, no ``cpu MHz`` line)."""
    khz = []  # type: List[float]
    for path in sorted(glob.glob(os.path.join(cpufreq_root, "cpu[0-9]*", "cpufreq"))):
        try:
            khz.append(float(_read_int(os.path.join(path, "scaling_cur_freq"))))
        except (OSError, ValueError):
            continue
    if khz:
        return round(sum(khz) / len(khz) / 1000.0, 1)
    mhz = []  # type: List[float]
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz":
                    try:
                        mhz.append(float(value))
                    except ValueError:
                        continue
    except OSError:
        return None
    good = [m for m in mhz if m > 0 and m == m and m != float("inf")]
    return round(sum(good) / len(good), 1) if good else None


def find_rapl_packages(powercap_root: str = "/sys/class/powercap") -> List[RaplDomain]:
    """The package-level RAPL domains whose energy counter can actually be read."""
    domains = []  # type: List[RaplDomain]
    for path in sorted(glob.glob(os.path.join(powercap_root, "intel-rapl:*"))):
        if not _PACKAGE.match(os.path.basename(path)):
            continue
        energy = os.path.join(path, "energy_uj")
        try:
            _read_int(energy)
        except (OSError, ValueError):
            continue
        try:
            max_range = _read_int(os.path.join(path, "max_energy_range_uj"))  # type: Optional[int]
        except (OSError, ValueError):
            max_range = None
        try:
            with open(os.path.join(path, "name"), "r") as fh:
                name = fh.read().strip()
        except OSError:
            name = os.path.basename(path)
        domains.append(RaplDomain(name, energy, max_range))
    return domains


class CpuBackend(Backend):
    """The host CPU: time-only, or time + package power where RAPL is readable.

    ``clock`` is injectable so tests can advance time by hand along with the counters.
    """

    name = "cpu"

    def __init__(
        self,
        powercap_root: str = "/sys/class/powercap",
        clock: Callable[[], float] = time.monotonic,
        cpufreq_root: str = "/sys/devices/system/cpu",
        cpuinfo: str = "/proc/cpuinfo",
    ) -> None:
        self.powercap_root = powercap_root
        self.cpufreq_root = cpufreq_root
        self.cpuinfo = cpuinfo
        self._clock = clock
        self.domains = find_rapl_packages(powercap_root)
        self._last = None  # type: Optional[tuple]
        self._last_w = None  # type: Optional[float]
        if self.domains:
            self._last = self._snapshot()  # prime, so the first read has a baseline

    def _snapshot(self) -> Optional[tuple]:
        try:
            return (self._clock(), [_read_int(d.energy_path) for d in self.domains])
        except (OSError, ValueError):
            return None

    def frequencies(self) -> List[float]:
        return []

    def current_mhz(self) -> float:
        """The clock the profile's rows record (no knob: the one the host runs at)."""
        mhz = host_clock_mhz(self.cpufreq_root, self.cpuinfo)
        if mhz is None:
            raise DeviceError(
                "the cpu backend cannot read this host's clock (no cpufreq scaling_cur_freq "
                "under {}, no 'cpu MHz' in {}); a profile row needs freq_mhz > 0".format(
                    self.cpufreq_root, self.cpuinfo
                )
            )
        return mhz

    def lock(self, freq_mhz: float) -> None:
        raise DeviceError(
            "the cpu backend has no frequency control; profile at the current clock "
            "(cannot lock {} MHz)".format(freq_mhz)
        )

    def restore(self) -> None:
        """Nothing was changed, so nothing to put back."""

    def read_power_w(self) -> Optional[float]:
        """Mean package power since the previous call (all packages summed), or None."""
        if not self.domains:
            return None
        now = self._snapshot()
        if now is None:
            return None
        prev, self._last = self._last, now
        if prev is None:
            return None
        dt = now[0] - prev[0]
        if dt <= 0:
            return self._last_w
        total_uj = 0
        for dom, before, after in zip(self.domains, prev[1], now[1]):
            delta = after - before
            if delta < 0:  # the counter wrapped at max_energy_range_uj
                if dom.max_range_uj is None:
                    return self._last_w
                delta += dom.max_range_uj
            total_uj += delta
        self._last_w = total_uj / 1e6 / dt
        return self._last_w

    def describe(self) -> Dict[str, object]:
        info = {"backend": self.name}  # type: Dict[str, object]
        if self.domains:
            info["power"] = "rapl"
            info["rapl_domains"] = ",".join(d.name for d in self.domains)
        else:
            info["power"] = "unavailable"
        return info


SPEC = BackendSpec(
    name="cpu",
    factory=CpuBackend,
    options=(Option("powercap_root", str, "where the RAPL counters live", "/sys/class/powercap"),),
    capabilities=Capabilities(measures_power=True, locks_clocks=False, torch_device="cpu"),
    summary="host CPU: no clock control, package power from RAPL where readable",
)
