"""The device model's constants in force: the hand-set tables with the fit applied.

:mod:`simulations.calibrate` writes ``simulations/calibration.json``; this module reads it once,
at import, and builds the tables every generator and simulation reads (``WORKLOADS``,
``DEVICES``, ``EFFICIENCY_CURVES``). The hand-set tables stay as the fit's priors
(``PRIOR_*``). Separate from the data modules so that they hold only what a person wrote, and
the one place that knows about the fit is this one. Without the file the hand-set constants apply.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from simulations.devicemodel.boards import JETSON_NANO, JETSON_TX2NX, Device
from simulations.devicemodel.curves import EfficiencyCurve, hand_set_curves
from simulations.devicemodel.workloads import (
    MOBILENETV2,
    RESNET18,
    SMALL_CNN,
    TRANSFORMER,
    Workload,
)

#: The fitted constants (written by simulations/calibrate); absent, the hand-set ones apply.
CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "calibration.json"

#: The hand-set constants: the calibration starts from them and pulls weakly towards them.
PRIOR_WORKLOADS: dict[str, Workload] = {
    w.key: w for w in (RESNET18, MOBILENETV2, TRANSFORMER, SMALL_CNN)
}
PRIOR_TX2NX: Device = JETSON_TX2NX
PRIOR_CURVES: dict[tuple[str, str], EfficiencyCurve] = {
    (cv.model, cv.dataset): cv for cv in hand_set_curves()
}


def load_calibration(
    path: Path = CALIBRATION_FILE,
) -> tuple[dict[str, Workload], dict[str, Device], dict[tuple[str, str], EfficiencyCurve], str]:
    """(workloads, devices, efficiency curves, about) with the fit in ``path`` applied.

    small_cnn is not in the paper's tables and keeps its hand-set constants; ``about`` is what
    the calibration says about itself ("" when ``path`` does not exist).
    """
    workloads = dict(PRIOR_WORKLOADS)
    devices = {d.key: d for d in (JETSON_NANO, PRIOR_TX2NX)}
    curves = dict(PRIOR_CURVES)
    if not path.exists():
        return workloads, devices, curves, ""
    data = json.loads(path.read_text())
    for key, fields in data["workloads"].items():
        workloads[key] = replace(PRIOR_WORKLOADS[key], **fields)
    devices["tx2nx"] = replace(PRIOR_TX2NX, **data["tx2nx"])
    for key, eff in data["efficiency"].items():
        model, dataset = key.split("/")
        fitted = tuple(sorted((int(b), float(n)) for b, n in eff["samples"].items()))
        prior = PRIOR_CURVES[(model, dataset)]
        curves[(model, dataset)] = replace(
            prior, fitted=fitted, rel_std=float(eff["rel_std"]), wiggle=0.0
        )
    return workloads, devices, curves, data["about"]


WORKLOADS, DEVICES, EFFICIENCY_CURVES, CALIBRATION_ABOUT = load_calibration()


def calibration_note() -> str:
    """What a profile's header says about its constants."""
    if CALIBRATION_ABOUT:
        return CALIBRATION_ABOUT
    return "hand-set (no simulations/calibration.json)."
