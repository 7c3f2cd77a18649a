"""The training workloads (model + input shape) and their hand-set cost constants, stated for the
Nano.

Data with the reasoning behind every number; the formulas are :mod:`.physics`. These are the
calibration's starting point and priors: the workloads in force (ResNet18, MobileNetV2 and the
transformer fitted to the paper) are ``fitted.WORKLOADS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One training workload (model + input shape) with its Nano-referenced cost constants."""

    key: str
    input_shape: str
    batch_sizes: tuple[int, ...]
    host_w: float  # CPU + DRAM power while training, above idle (W, at the board input)
    dyn_w: float  # GPU dynamic power at full activity, 1 GHz and floor voltage (W)
    act_floor: float  # activity share that does not depend on batch (clock tree, busy waiting)
    act_half: float  # batch at which the batch-dependent share of activity is half way
    fixed_s: float  # per-step time that neither batch nor GPU clock changes (host side)
    sample_s: float  # GPU seconds per sample at F_REF_MHZ with the GPU saturated
    occupancy_batch: float  # batch below which the step costs about as much as this batch
    occupancy_sharpness: float  # exponent of the soft maximum between b and occupancy_batch
    mem_frac: float  # share of GPU time that is memory-bound (does not scale with f)
    #: batch at which the memory-bound time per sample has doubled: large batches stream
    #: activations that no longer stay in L2, so their DRAM traffic per sample grows (inf: none)
    mem_batch: float = math.inf


#: ResNet18 with a CIFAR stem on 3x32x32: ~0.56 GFLOP forward per image, ~11 M parameters.
#: The heaviest model here in power (dense 3x3 convolutions keep the SMs busy).
RESNET18 = Workload(
    key="resnet18",
    input_shape="3x32x32",
    batch_sizes=(4, 8, 16, 32, 64, 128),
    host_w=0.55,  # Python loop, data loader and Adam's per-parameter launches on the A57 cores
    # dyn_w, act_floor and act_half are calibrated together (see check_calibration):
    # Fig. 1 needs b=128 to cost a full 76.8 MHz step more than b=64 under 5 W, and b=128 must
    # gain more than 0.5 W from 307.2 to 384 MHz (feasible at 4.5 W there, not at 5 W one step
    # up) while gaining less than 2 W over the three steps to 614.4 MHz (feasible at 7 W).
    # Power keeps growing with batch well past the point where throughput saturates (act_half
    # is beyond the largest batch): larger batches leave fewer idle gaps between kernels and
    # stream larger activations through DRAM, which the board-input sensor sees. The floor
    # keeps b=8 close enough to b=32 in power that b=8 gets only one or two frequency steps
    # more under 4.5/5/7 W, which is what makes Fig. 2 flip from b=8 to b=32 at 7 W.
    dyn_w=13.65,
    act_floor=0.25,
    act_half=200.0,
    fixed_s=0.030,  # Adam over 11 M parameters is DRAM-bound (~15 ms) plus launch overhead
    # ~28 ms per sample at b=128 and 921.6 MHz: 1.7 GFLOP per training sample at an effective
    # ~60 GFLOP/s (a quarter of the Nano's FP32 peak); Table 2's 6187 s baseline is then ~15
    # epochs over the 14.6k training samples of a quarter of SVHN.
    sample_s=0.0280,
    # A CIFAR-stem ResNet18 fills the 128 Maxwell cores from about a dozen images on; below
    # that a step costs about as much as 12 images (this sets Fig. 2's T_s(32)/T_s(8) ~ 0.6 at
    # equal clocks, so that b=32 is faster per sample yet loses on time-to-accuracy at 4.5/5 W).
    occupancy_batch=12.0,
    occupancy_sharpness=2.0,
    # Fig. 1: b=64 at 460.8 MHz is 31.9 % faster than b=128 at 307.2 MHz, a 1.5x clock ratio,
    # which leaves room for only a few percent of clock-independent GPU time.
    mem_frac=0.02,
    mem_batch=1000.0,
)

#: MobileNetV2 (CIFAR variant) on 3x32x32: ~6x fewer FLOPs than ResNet18 but depthwise layers
#: that are memory-bound and parallelise poorly at small batches (paper §5.2: "lower peak power,
#: better parallelization for larger batch sizes"). b=128 does not fit in memory (paper §5.1).
MOBILENETV2 = Workload(
    key="mobilenetv2",
    input_shape="3x32x32",
    batch_sizes=(4, 8, 16, 32, 64),
    host_w=0.50,  # ~150 small layers: more launches per step, fewer parameters for Adam
    dyn_w=10.0,  # ~73 % of ResNet18's switching at full activity: lower peak power
    act_floor=0.25,
    act_half=200.0,
    fixed_s=0.040,  # launch-bound host side: many tiny kernels per step
    sample_s=0.0125,  # about half ResNet18's per-sample time (Table 2: ~0.6x the wall time)
    occupancy_batch=28.0,  # depthwise convs need a large batch to fill the GPU
    occupancy_sharpness=2.0,
    mem_frac=0.15,  # depthwise + expansion layers stream activations: more memory-bound
    mem_batch=1000.0,
)

#: Character transformer: 6 layers, 6 heads, 256-dim embeddings, sequence 64 (~4.8 M params).
#: A "sample" is one 64-character sequence; the input shape is the sequence length.
TRANSFORMER = Workload(
    key="transformer",
    input_shape="64",
    batch_sizes=(4, 8, 16, 32, 64, 128),
    host_w=0.52,
    dyn_w=11.8,  # GEMM-heavy but with softmax/layernorm gaps: between the two CNNs
    act_floor=0.25,
    act_half=200.0,
    fixed_s=0.045,  # many small kernels per layer; AdamW over 4.8 M parameters
    sample_s=0.0200,  # ~1.9 GFLOP per training sequence; Table 3's times are ResNet18-like
    # 256x256 GEMMs over b*64 tokens only fill the GPU from a few thousand tokens on, so small
    # batches waste most of the GPU (the paper's B2, at the sample-efficient batch, is slow).
    occupancy_batch=48.0,
    occupancy_sharpness=2.0,
    mem_frac=0.08,  # layernorm, softmax and the embedding gather
    mem_batch=1000.0,
)

#: The project's demo CNN (fleet/agent/models/registry.py ``small_cnn``, width 16) on 1x28x28
#: grayscale
#: images (Fashion-MNIST / MNIST): conv 1->16 3x3 at 28x28 (112,896 MACs), BN, ReLU, 2x2
#: max-pool, conv 16->32 3x3 at 14x14 (903,168 MACs), BN, ReLU, adaptive avg-pool to 4x4, linear
#: 512->10 (5,120 MACs): ~1.02 M MACs = ~2.0 MFLOP forward per image, and ~5.9 MFLOP per training
#: sample (the backward pass is ~2x the forward, less conv1's unneeded input gradient) -- ~290x
#: fewer than ResNet18. 9,978 parameters (8 tensors). Its samples-to-accuracy come from real
#: training (simulations/analogue.py), so it has no modeled efficiency curve here.
#: It is launch-bound: a step is ~100 small kernels whose host-side cost rivals the GPU work up
#: to b ~ fixed_s / sample_s ~ 25, so per-sample time keeps falling up to the largest batch and
#: GPU activity (hence power) climbs with the batch much faster than ResNet18's, from far lower.
SMALL_CNN = Workload(
    key="small_cnn",
    input_shape="1x28x28",
    batch_sizes=(4, 8, 16, 32, 64, 128),
    # One A57 core runs the Python loop flat out, but DRAM traffic is tiny (10 k parameters,
    # 28x28 inputs sliced from in-memory arrays): less host power than ResNet18's 0.55 W.
    host_w=0.45,
    # 16/32-channel convs with small tiles, a C_in=1 first conv (K=9) and BN/pool kernels stall
    # on DRAM and switch far less per busy cycle than ResNet18's dense 64-512-channel convs (and
    # less than MobileNetV2's 10.0): ~44 % of ResNet18's coefficient. Also bounded by the power
    # order: where small_cnn's activity is closest to saturating relative to ResNet18's
    # (b=32-64, ratio ~0.57) the coefficient must stay below 13.65 x 0.57 ~ 7.7 W.
    dyn_w=6.0,
    # Lower than the other workloads' 0.25: in a host-bound loop the GPU sits idle between
    # launches for most of a small-batch step, and the GM20B/GP10B clock gating (ELCG/BLCG) then
    # gates the idle units, so less of the clocked activity is workload-independent.
    act_floor=0.15,
    # The batch-dependent activity follows the GPU's busy share of a step,
    # b * sample_s / (fixed_s + b * sample_s) = b / (b + fixed_s / sample_s): half way at
    # b = 0.005 / 0.0002 = 25 (ResNet18's GPU is busy at every batch; its act_half is 200).
    act_half=25.0,
    # ~100 kernel launches per step (forward ~10, backward ~25, zero_grad 8, torch 1.10's
    # per-tensor Adam ~7 x 8 tensors) at the ~23 us each implied by ResNet18's 15 ms for ~650,
    # plus ~2.7 ms of Python loop, batch slicing/H2D copy and the loss.item() sync; no
    # DRAM-bound optimiser term (Adam over 10 k parameters is ~0.1 MB).
    fixed_s=0.005,
    # ~0.2 ms per sample at 921.6 MHz: 5.9 MFLOP per training sample at ~30 GFLOP/s effective,
    # half ResNet18's efficiency (K=9 GEMMs for conv1, 16-32 output channels leave most of each
    # tile idle, and a third of the time is memory-bound elementwise work, see mem_frac).
    sample_s=0.0002,
    # Set by the conv with the fewest output pixels per image: conv2 has 14x14 = 196, so at b=8
    # its implicit GEMM has ~1.6 k rows, ~12 tiles of 128, enough CTAs to fill the Nano's single
    # 128-core SMM (x1.5 for the TX2 NX's two SMs). Below that the kernels run at their
    # minimum, latency-bound duration. Smaller than ResNet18's 12, whose last stage has only
    # 4x4 pixels per image; the GPU becomes the bottleneck only at larger batches because of
    # fixed_s above, not because of occupancy.
    occupancy_batch=8.0,
    occupancy_sharpness=2.0,
    # BN, ReLU, max/avg-pool and their backward passes stream ~1.5 MB of activations per sample
    # (~80 us at the Nano's ~18 GB/s achievable) against ~200 us of GPU time per sample.
    mem_frac=0.35,
)


#: Workloads that must draw less peak power than ResNet18 at every (b, f) on every device, so
#: that adding them cannot move the baselines' "safe for every model" caps (checked by
#: :func:`.paper_checks.check_lighter_than`, which generation asserts).
LIGHTER_THAN_RESNET18 = ("small_cnn",)
