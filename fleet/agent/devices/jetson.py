"""NVIDIA Jetson backend: lock the GPU clock through devfreq, save and restore the originals.

Why sysfs and not jetson_clocks/nvpmodel: the profile needs every GPU frequency the board offers,
one at a time, and devfreq's ``min_freq``/``max_freq`` pin it exactly without touching CPU or EMC
clocks. This module puts the backend together; the pieces live apart: the clock lock, its
kernel rules and its crash-safe restore (``clocklock.py``, with the state file in
``clockstate.py``), which devfreq node(s) are the GPU and their frequency tables
(``devfreq.py``), the INA3221 rails and their watts (``power_rails.py``), which board this is
(``board_identity.py``) and the sysfs readers under ``sysfs_root`` (``sysfs.py``).

Crash safety (docs/architecture.md, device backends; details in ``clocklock``): the originals are
saved before the first write and deleted after the restore; constructing the backend first
restores from a file a killed run left behind (saying so on stderr). After a lock,
``wait_settled()`` waits (bounded) until ``cur_freq`` reaches the target, so that measurements
start at the clock they are attributed to.

Python 3.6 compatible, stdlib only (this runs on JetPack 4.6).
"""

from typing import Dict, Optional

from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, Option
from fleet.agent.devices.board_identity import (
    board_model,
    board_serial,
    device_type,
    l4t_release,
    measurement_origin,
)
from fleet.agent.devices.board_power import open_power
from fleet.agent.devices.clocklock import SETTLE_TIMEOUT_S, DevfreqClockLock
from fleet.agent.devices.devfreq import find_gpu_devfreq


class JetsonBackend(DevfreqClockLock, Backend):
    """Jetson GPU via devfreq + INA3221. Records every sysfs write in ``writes`` (path, value).

    The original ``min_freq``/``max_freq``/``governor`` of every GPU node are captured at the
    first lock, saved to ``state_dir`` and put back by ``restore()``; process-level exit paths
    are covered by ``guard``, a SIGKILL by the state file (the next construction restores from
    it; the record it restored from is in ``recovered``). ``settle_timeout_s`` bounds
    ``wait_settled()``.
    """

    name = "jetson"

    def __init__(
        self,
        sysfs_root: str = "/",
        rail: Optional[str] = None,
        gpu_node: Optional[str] = None,
        state_dir: Optional[str] = None,
        settle_timeout_s: float = SETTLE_TIMEOUT_S,
    ) -> None:
        self.sysfs_root = sysfs_root
        self.node = find_gpu_devfreq(sysfs_root, gpu_node)
        # The rails whose sum is the board's power; none on a board without a sensor (Nano
        # 2GB): the clocks still lock, and ``power_unavailable`` says why there is no reading.
        self.power = open_power(sysfs_root, rail, self.node.name)
        self.rail = self.power if self.power.rails else None
        self.power_unavailable = self.power.unavailable  # type: Optional[str]
        self.sensor_period_s = self.power.period_s  # type: Optional[float]
        # A virtual board's tree says so (board_identity.VIRTUAL_MARKER): its times are the
        # host's, and every profile and run it gives says source=virtual and the host.
        self.origin = measurement_origin(sysfs_root)  # type: Dict[str, object]
        # the INA3221/INA238 conversion is its own hardware average: the budget bounds the
        # reading itself, over the sensor's refresh period
        self.power_window_s = self.sensor_period_s
        self._init_clocks(gpu_node, state_dir, settle_timeout_s)
        self.recovered = self.recover()

    def read_power_w(self) -> Optional[float]:
        """The board's power now (the sum of its total's rails); None without a sensor."""
        return self.power.read_w()

    def describe(self) -> Dict[str, object]:
        info = {
            "backend": self.name,
            "devfreq": self.node.name,
            "of_node": self.node.of_node,
        }  # type: Dict[str, object]
        info.update(self.power.describe())
        model = board_model(self.sysfs_root)
        if model is not None:
            info["board"] = model
        board = model or ""
        kind = device_type(self.node.name, self.node.of_node, board, root=self.sysfs_root)
        if kind:
            info["device"] = kind
        info.update(self.clock_description())
        # Provenance for the coordinator's profile store: empty where the board does not say.
        info["l4t"] = l4t_release(self.sysfs_root)
        info["serial"] = board_serial(self.sysfs_root)
        info.update(self.origin)  # source (measured | virtual), and the host when virtual
        return info


# What this backend offers every surface (CLI flags, agent argv, node config): see
# docs/architecture.md, "Adding a device backend".
SPEC = BackendSpec(
    name="jetson",
    factory=JetsonBackend,
    options=(
        Option("sysfs_root", str, "prefix for sysfs paths (copied trees, dry runs)", "/"),
        Option(
            "rail",
            str,
            "power rail, e.g. VDD_IN, or a sum GPU+CPU+SOC (default: the board's total)",
        ),  # fmt: skip
        Option("gpu_node", str, "devfreq entry of the GPU, e.g. 57000000.gpu (default: found)"),
        Option("state_dir", str, "where original clocks are saved (see powerfleet restore)"),
        Option("settle_timeout_s", float, "longest wait for cur_freq to reach a lock (s)"),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cuda"),
    summary="NVIDIA Jetson: devfreq clocks, INA3221/INA238 power rails",
)
