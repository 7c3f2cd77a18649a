"""The two boards: GPU frequency tables, voltage curves and how each scales a model's costs.

Data, not physics: the formulas that turn these numbers into time and power live in
:mod:`.physics`. The values here are hand-set; the TX2 NX's scale factors are the calibration's
starting point and priors, and the TX2 NX in force is ``fitted.DEVICES["tx2nx"]`` (the Nano is
not fitted: its table and curve are the reference every model constant is stated against).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """One board: its GPU frequency table, voltage curve and how it scales each model's costs.

    The per-model constants in :class:`Workload` are stated for the Nano; a device multiplies them
    so that one set of model constants serves both boards (the paper profiles the same models on
    both, and a model's relative cost does not change much between two small NVIDIA GPUs).
    """

    key: str  # short name used in file names ("nano")
    name: str  # what the device column says ("jetson-nano")
    gpu: str  # devfreq driver / GPU name
    devfreq_node: str  # sysfs devfreq node the frequency table was read from
    freqs_mhz: tuple[float, ...]  # available_frequencies, Hz / 1e6, ascending
    vf_knots: tuple[tuple[float, float], ...]  # (MHz, volts) knots, linearly interpolated
    idle_w: float  # board input power with the GPU idle and the CPU quiet
    host_scale: float  # multiplies a model's host (CPU + DRAM) power
    dyn_scale: float  # multiplies a model's GPU dynamic power coefficient
    compute_speed: float  # per-clock training throughput relative to the Nano
    memory_speed: float  # DRAM bandwidth relative to the Nano (speeds the memory-bound share)
    fixed_scale: float  # multiplies a model's fixed per-step (host-side) time
    occupancy_scale: float  # multiplies the batch a model needs to fill this GPU


#: Jetson Nano (Tegra X1 / GM20B, 128 Maxwell cores). Frequency table: devfreq node
#: ``57000000.gpu`` ``available_frequencies`` on L4T 32.x (76.8 MHz steps up to 921.6 MHz).
JETSON_NANO = Device(
    key="nano",
    name="jetson-nano",
    gpu="gm20b",
    devfreq_node="57000000.gpu",
    freqs_mhz=(
        76.8,
        153.6,
        230.4,
        307.2,
        384.0,
        460.8,
        537.6,
        614.4,
        691.2,
        768.0,
        844.8,
        921.6,
    ),
    # Shape after the Tegra X1 GPU DVFS table: the rail sits at its floor voltage for the lower
    # two thirds of the table and only rises over the top steps. Only V(f)/V(f_min) matters. The
    # rise is kept gentle (to ~1.05x the floor) because the paper's caps need every step between
    # 384 and 614.4 MHz to cost about the same as the step from 307.2 to 384 MHz (see the
    # calibration notes at RESNET18 below), and because a Nano training ResNet18 at full clock
    # should draw about 10 W at the barrel jack (its 10 W mode), not much more.
    vf_knots=((76.8, 0.80), (614.4, 0.80), (768.0, 0.815), (921.6, 0.84)),
    idle_w=1.25,  # headless Nano dev kit, 5 V barrel input, fan off: ~1.2-1.3 W
    host_scale=1.0,
    dyn_scale=1.0,
    compute_speed=1.0,
    memory_speed=1.0,
    fixed_scale=1.0,
    occupancy_scale=1.0,
)

#: Jetson TX2 NX (Tegra X2 / GP10B, 256 Pascal cores). The TX2-family devfreq table (node
#: ``17000000.gp10b``): 114.75 ... 1300.5 MHz in 13 steps, as L4T 32.x lists them in
#: ``available_frequencies`` on TX2-class boards. Source: public Jetson benchmarking scripts that
#: sweep the gp10b GPU of a 6-core (Denver + A57) TX2-class board list exactly these 13 values in
#: Hz; the TX2 nvpmodel MAXN mode runs the GPU at 1.30 GHz. Not read from a TX2 NX here (no board
#: was available): if a real TX2 NX lists other steps, its measured profile replaces this one.
JETSON_TX2NX = Device(
    key="tx2nx",
    name="jetson-tx2nx",
    gpu="gp10b",
    devfreq_node="17000000.gp10b",
    freqs_mhz=(
        114.75,
        216.75,
        318.75,
        420.75,
        522.75,
        624.75,
        726.75,
        828.75,
        930.75,
        1032.75,
        1134.75,
        1236.75,
        1300.5,
    ),
    # 16 nm FinFET: floor voltage up to ~0.6 GHz, then a steeper climb to the 1.3 GHz top bin
    # than the Nano's (shape only; absolute volts do not matter). Calibrated so that ResNet18 at
    # b=128 and full clock draws ~11 W at the board input, and so that the "safe for every
    # model" caps at 4.5 W / 7 W sit at 420.75 / 930.75 MHz, which makes the TX2 NX about 2x
    # faster than the Nano under the same budget, as Table 4 vs Table 2 of the paper show.
    vf_knots=((114.75, 0.80), (624.75, 0.80), (930.75, 0.85), (1300.5, 1.00)),
    idle_w=1.45,  # TX2 NX module on a carrier, headless: ~1.4-1.6 W
    host_scale=1.15,  # six CPU cores (2 Denver + 4 A57) and LPDDR4 at twice the Nano's bandwidth
    dyn_scale=0.55,  # 16 nm vs 20 nm: less switched capacitance per unit of work
    compute_speed=1.45,  # 2x the cores, but PyTorch 1.10 kernels scale sub-linearly on them
    memory_speed=2.0,  # 51.2 GB/s vs 25.6 GB/s
    fixed_scale=0.75,  # faster CPUs launch kernels and run the optimiser loop sooner
    occupancy_scale=1.5,  # twice the SMs need a larger batch before they are all busy
)
