"""The virtual Jetsons' power models: one device-model ``Device`` per board row, and its watts.

Why a module of its own: a virtual board's rails must follow the GPU clock the way a real
board's do, so every row of ``fleet.agent.devices.boards`` needs a power curve, yet the device
model (``simulations.devicemodel``) is calibrated for two boards only, the Nano and the TX2 NX.
Those two are reused as they are; every other row gets an *emulated* ``Device``: plausible
scales (idle draw, GPU dynamic power, speed) chosen by hand so that power rises with the clock
and a bigger module draws more, over the row's own clock table. Nothing in a profile, a paper
number or a calibration comes from an emulated device; they exist so that the power-following
tests (profile, guard, schedule) have a rail that moves on every layout.

Thor's row has no public clock table; ``THOR_VIRTUAL_HZ`` is a made-up one (marked so wherever
it is used) that only the virtual tree shows.
"""

from __future__ import annotations

from dataclasses import replace

from fleet.agent.devices.boards import BOARDS as ROWS_BY_KEY
from fleet.agent.devices.boards import Board
from simulations.devicemodel.boards import JETSON_NANO, Device
from simulations.devicemodel.fitted import DEVICES, WORKLOADS
from simulations.devicemodel.physics import dvfs_factor, mean_power_w

#: VIRTUAL ONLY: Thor's GPU clock table is not public (the board table leaves it empty); the
#: virtual Thor offers 300 ... 1560 MHz in 105 MHz steps so that locking has something to pin.
THOR_VIRTUAL_HZ: tuple[int, ...] = tuple(int((300.0 + 105.0 * k) * 1e6) for k in range(13))


def clock_table(row: Board) -> tuple[tuple[int, ...], bool]:
    """The GPU table a virtual ``row`` offers, and whether it is virtual-only (not the row's)."""
    if row.clock_hz:
        return tuple(sorted(row.clock_hz)), False
    return THOR_VIRTUAL_HZ, True


def _emulated(row_key: str, gpu: str, node: str, **scales: float) -> Device:
    """A plausible Device over the row's table: floor voltage up to ~55 % of the top clock,
    then a rise to 1.33x the floor at the top (the shape today's emulated Orin had)."""
    hz, _virtual = clock_table(ROWS_BY_KEY[row_key])
    mhz = tuple(h / 1e6 for h in hz)
    knee = mhz[0] + 0.55 * (mhz[-1] - mhz[0])
    return Device(
        key=row_key,
        name=row_key,
        gpu=gpu,
        devfreq_node=node,
        freqs_mhz=mhz,
        vf_knots=((mhz[0], 0.60), (knee, 0.60), (mhz[-1], 0.80)),
        **scales,
    )


def _devices() -> dict[str, Device]:
    tx2nx = DEVICES["tx2nx"]
    tx2_hz, _ = clock_table(ROWS_BY_KEY["jetson-tx2"])
    tx2_mhz = tuple(h / 1e6 for h in tx2_hz)
    orin_nx = dict(
        idle_w=3.5,
        host_scale=1.5,
        dyn_scale=0.45,
        compute_speed=4.0,
        memory_speed=4.0,
        fixed_scale=0.5,
        occupancy_scale=4.0,
    )
    orin_nano = dict(orin_nx, idle_w=3.0, host_scale=1.3, dyn_scale=0.4, compute_speed=3.0)
    orin_nano["memory_speed"] = 3.0
    return {
        # calibrated (the device model's own boards)
        "jetson-nano": JETSON_NANO,
        "jetson-nano-2gb": replace(JETSON_NANO, key="jetson-nano-2gb", name="jetson-nano-2gb"),
        "jetson-tx2nx": tx2nx,
        # emulated: plausible, not measured
        "jetson-tx2": replace(
            tx2nx,
            key="jetson-tx2",
            name="jetson-tx2",
            freqs_mhz=tx2_mhz,
            vf_knots=((tx2_mhz[0], 0.80), (586.5, 0.80), (943.5, 0.85), (tx2_mhz[-1], 1.00)),
            idle_w=2.6,  # module (VDD_IN) + carrier (VDD_MUX)
        ),
        "jetson-xavier-nx": _emulated(
            "jetson-xavier-nx", "gv11b", "17000000.gv11b",
            idle_w=3.0, host_scale=1.3, dyn_scale=0.5, compute_speed=2.5, memory_speed=2.5,
            fixed_scale=0.6, occupancy_scale=2.0,
        ),
        "jetson-agx-xavier": _emulated(
            "jetson-agx-xavier", "gv11b", "17000000.gv11b",
            idle_w=6.0, host_scale=1.6, dyn_scale=0.55, compute_speed=4.0, memory_speed=5.0,
            fixed_scale=0.5, occupancy_scale=3.0,
        ),
        "jetson-orin-nano": _emulated("jetson-orin-nano", "ga10b", "17000000.gpu", **orin_nano),
        "jetson-orin-nano-super": _emulated(
            "jetson-orin-nano-super", "ga10b", "17000000.gpu", **orin_nano
        ),
        "jetson-orin-nx": _emulated("jetson-orin-nx", "ga10b", "17000000.gpu", **orin_nx),
        "jetson-orin-nx-super": _emulated(
            "jetson-orin-nx-super", "ga10b", "17000000.gpu", **orin_nx
        ),
        "jetson-agx-orin": _emulated(
            "jetson-agx-orin", "ga10b", "17000000.gpu",
            idle_w=7.0, host_scale=2.0, dyn_scale=0.5, compute_speed=8.0, memory_speed=8.0,
            fixed_scale=0.4, occupancy_scale=8.0,
        ),
        "jetson-thor": _emulated(
            "jetson-thor", "gb10b", "gpu-gpc-0",
            idle_w=25.0, host_scale=3.0, dyn_scale=0.6, compute_speed=20.0, memory_speed=10.0,
            fixed_scale=0.3, occupancy_scale=16.0,
        ),
    }  # fmt: skip


#: Power model per board row (calibrated for the Nano and TX2 NX, emulated for the rest).
POWER_MODELS: dict[str, Device] = _devices()
CALIBRATED = frozenset({"jetson-nano", "jetson-nano-2gb", "jetson-tx2nx"})

#: Today's emulated Orin (kept under its old name): an Orin NX on JetPack 5.
JETSON_ORIN = POWER_MODELS["jetson-orin-nx"]


def modeled_power_w(spec: object, workload: str, load: int | None, freq_hz: int) -> float:
    """Board input power from the device model of ``spec.device``: training at ``load`` or
    idle (None).

    Idle is the board's idle power plus the clocked-but-idle GPU share (5 % of the workload's
    dynamic coefficient at that clock), so even an idle board draws a little more at high clocks.
    """
    device: Device = spec.device  # type: ignore[attr-defined]
    w = WORKLOADS[workload]
    mhz = freq_hz / 1e6
    if load is None:
        return device.idle_w + 0.05 * w.dyn_w * device.dyn_scale * dvfs_factor(device, mhz)
    return mean_power_w(device, w, int(load), mhz)
