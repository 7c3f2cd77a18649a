"""The device model's physics: step time and board power against batch size and GPU clock.

Noise-free formulas over a :class:`~.boards.Device` and a :class:`~.workloads.Workload`; the
numbers they read live in those tables, the noise a profile adds lives in :mod:`.noise`. The
calibration's vectorised copy (``simulations.calibrate.predict.grid``) must stay equal to these.
"""

from __future__ import annotations

from simulations.devicemodel.boards import Device
from simulations.devicemodel.workloads import Workload

#: Frequency that normalises per-sample compute time: the Nano's top clock, so that ``sample_s``
#: below reads "seconds per sample on a Nano at full clock with a saturated GPU".
F_REF_MHZ = 921.6


def voltage(device: Device, freq_mhz: float) -> float:
    """GPU rail voltage at ``freq_mhz``: linear interpolation between the board's knots.

    DVFS hardware picks the lowest voltage that is stable at a frequency; below a knee that is the
    rail's floor, so power grows only linearly with f there and quadratically-plus above it.
    """
    knots = device.vf_knots
    if freq_mhz <= knots[0][0]:
        return knots[0][1]
    for (f0, v0), (f1, v1) in zip(knots, knots[1:], strict=False):
        if freq_mhz <= f1:
            return v0 + (v1 - v0) * (freq_mhz - f0) / (f1 - f0)
    return knots[-1][1]


def dvfs_factor(device: Device, freq_mhz: float) -> float:
    """``f[GHz] * (V(f) / V_floor)^2``: the frequency-dependent part of CMOS dynamic power."""
    v_floor = device.vf_knots[0][1]
    return (freq_mhz / 1000.0) * (voltage(device, freq_mhz) / v_floor) ** 2


def activity(workload: Workload, batch_size: int) -> float:
    """Share of full switching activity at ``batch_size`` (0..1, saturating in b).

    A floor for what is clocked regardless of work (clock tree, warps spinning on barriers), plus
    a share that grows with the batch and saturates: larger batches mean longer kernels with
    fewer idle gaps between them.
    """
    grow = batch_size / (batch_size + workload.act_half)
    return workload.act_floor + (1.0 - workload.act_floor) * grow


def peak_factor(batch_size: int) -> float:
    """Peak over mean board power: > 1 and growing slightly with the batch.

    The paper samples power once a second (its appendix A.4). A small-batch step lasts a fraction
    of that, so every sample already averages bursts with the host-side gaps between steps and the
    highest sample sits close to the mean. A large-batch step lasts seconds; samples then land
    inside its long full-load phases, and the highest one sits further above the mean.
    """
    return 1.05 + 0.05 * batch_size / (batch_size + 32.0)


def gpu_dynamic_power_w(
    device: Device, workload: Workload, batch_size: int, freq_mhz: float
) -> float:
    """GPU dynamic power at (b, f): coefficient x activity(b) x f V(f)^2, in watts."""
    coeff = workload.dyn_w * device.dyn_scale
    return coeff * activity(workload, batch_size) * dvfs_factor(device, freq_mhz)


def base_power_w(device: Device, workload: Workload) -> float:
    """Idle board + host side (CPU, DRAM) while training: the part the GPU clock does not move."""
    return device.idle_w + workload.host_w * device.host_scale


def mean_power_w(device: Device, workload: Workload, batch_size: int, freq_mhz: float) -> float:
    """Noise-free mean board input power while training at (b, f), in watts."""
    return base_power_w(device, workload) + gpu_dynamic_power_w(
        device, workload, batch_size, freq_mhz
    )


def peak_power_w(device: Device, workload: Workload, batch_size: int, freq_mhz: float) -> float:
    """Noise-free peak board input power at (b, f): mean power times the peak factor."""
    return mean_power_w(device, workload, batch_size, freq_mhz) * peak_factor(batch_size)


def occupied_batch(device: Device, workload: Workload, batch_size: int) -> float:
    """The batch the GPU effectively pays for: a soft maximum of b and the occupancy batch.

    Below the occupancy batch the SMs are not all busy, so a step costs about as much as a step at
    that batch; above it cost grows linearly with b. The soft maximum makes per-sample time fall
    with b and then flatten, as measured step times on small GPUs do.
    """
    k = workload.occupancy_sharpness
    b_occ = workload.occupancy_batch * device.occupancy_scale
    return (batch_size**k + b_occ**k) ** (1.0 / k)


def time_per_batch_s(device: Device, workload: Workload, batch_size: int, freq_mhz: float) -> float:
    """Noise-free seconds for one training step of ``batch_size`` samples at ``freq_mhz``.

    ``fixed + occupied_batch * sample_s * (mem (1 + b / mem_batch) / mem_speed
    + (1 - mem) * F_REF / (f * speed))``: the host-side part and the memory-bound share do not
    speed up with the GPU clock; the rest does, as 1/f.
    """
    fixed = workload.fixed_s * device.fixed_scale
    mem = workload.mem_frac * (1.0 + batch_size / workload.mem_batch) / device.memory_speed
    compute = (1.0 - workload.mem_frac) * (F_REF_MHZ / freq_mhz) / device.compute_speed
    gpu = occupied_batch(device, workload, batch_size) * workload.sample_s * (mem + compute)
    return fixed + gpu
