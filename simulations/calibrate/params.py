"""The fit's free parameters: which constants move, and how a flat vector maps onto them.

A model's workload constants (log- or logit-transformed), the TX2 NX's scales when the model ran
on it, and log samples-to-accuracy per dataset and batch size pack into one vector for the
solver; :func:`decode` and :func:`encode` are the two directions, :class:`State` the physical side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simulations.calibrate.paper import BOARDS_OF, DATASETS
from simulations.devicemodel.boards import Device
from simulations.devicemodel.curves import law_samples
from simulations.devicemodel.fitted import PRIOR_CURVES, PRIOR_WORKLOADS, WORKLOADS
from simulations.devicemodel.workloads import Workload

#: Workload constants the fit moves (log-transformed unless in FRACTIONS).
WORKLOAD_FIELDS = (
    "host_w",
    "dyn_w",
    "act_floor",
    "act_half",
    "fixed_s",
    "sample_s",
    "occupancy_batch",
    "mem_frac",
    "mem_batch",
)
#: TX2 NX constants the fit moves (relative to the Nano); only ResNet18's cells constrain them.
DEVICE_FIELDS = (
    "host_scale",
    "dyn_scale",
    "compute_speed",
    "memory_speed",
    "fixed_scale",
    "occupancy_scale",
)
FRACTIONS = ("act_floor", "mem_frac")
#: Fig. 2's ratio of samples to accuracy, N(32) / N(8) = 15 / 10, pinned on ResNet18's curves.
FIG2_RATIO = 1.5


def to_free(name: str, value: float) -> float:
    """A constant's value as the solver moves it: logit for a fraction, log otherwise."""
    if name in FRACTIONS:
        value = min(max(value, 1e-12), 1.0 - 1e-12)  # a trial step may saturate the logit
        return math.log(value / (1.0 - value))
    return math.log(value)


def from_free(name: str, x: float) -> float:
    """The inverse of :func:`to_free`."""
    if name in FRACTIONS:
        return 1.0 / (1.0 + math.exp(-min(max(x, -700.0), 700.0)))
    return math.exp(x)


@dataclass
class Layout:
    """How one model's free parameters sit in a flat vector."""

    model: str
    names: list[str] = field(default_factory=list)

    @classmethod
    def for_model(cls, model: str) -> Layout:
        lay = cls(model)
        lay.names += [f"w.{n}" for n in WORKLOAD_FIELDS]
        if "tx2nx" in BOARDS_OF[model]:
            lay.names += [f"d.{n}" for n in DEVICE_FIELDS]
        for ds in DATASETS[model]:
            for b in WORKLOADS[model].batch_sizes:
                if model == "resnet18" and b == 32:
                    continue  # tied to b=8 by Fig. 2
                lay.names.append(f"n.{ds}.{b}")
        return lay


@dataclass(frozen=True)
class State:
    """Physical values: the model's workload, the TX2 NX device, log N per dataset and batch."""

    workload: Workload
    tx2nx: Device
    log_n: dict[str, np.ndarray]  # dataset -> log samples-to-accuracy per batch size


def decode(lay: Layout, x: np.ndarray, tx2nx: Device) -> State:
    wl = WORKLOADS[lay.model]
    wfields: dict[str, Any] = {}
    dfields: dict[str, Any] = {}
    logn: dict[str, dict[int, float]] = {}
    for name, v in zip(lay.names, x, strict=True):
        kind, rest = name.split(".", 1)
        if kind == "w":
            wfields[rest] = from_free(rest, float(v))
        elif kind == "d":
            dfields[rest] = from_free(rest, float(v))
        else:
            ds, b = rest.rsplit(".", 1)
            logn.setdefault(ds, {})[int(b)] = float(v)
    arrays = {}
    for ds, per_b in logn.items():
        if lay.model == "resnet18":
            per_b[32] = per_b[8] + math.log(FIG2_RATIO)
        arrays[ds] = np.array([per_b[b] for b in wl.batch_sizes])
    dev = replace(tx2nx, **dfields) if dfields else tx2nx
    return State(replace(wl, **wfields), dev, arrays)


def encode(lay: Layout, state: State) -> np.ndarray:
    out = []
    bs = list(state.workload.batch_sizes)
    for name in lay.names:
        kind, rest = name.split(".", 1)
        if kind == "w":
            out.append(to_free(rest, getattr(state.workload, rest)))
        elif kind == "d":
            out.append(to_free(rest, getattr(state.tx2nx, rest)))
        else:
            ds, b = rest.rsplit(".", 1)
            out.append(float(state.log_n[ds][bs.index(int(b))]))
    return np.array(out)


def initial_state(model: str, tx2nx: Device) -> State:
    """The hand-set constants (the priors) and the current efficiency laws."""
    wl = PRIOR_WORKLOADS[model]
    logn = {}
    for ds in DATASETS[model]:
        curve = PRIOR_CURVES[(model, ds)]
        logn[ds] = np.log([law_samples(curve, b) for b in wl.batch_sizes])
    return State(wl, tx2nx, logn)
