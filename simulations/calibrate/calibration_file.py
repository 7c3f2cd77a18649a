"""The calibration JSON: what a fit writes for the device model, and the committed fit read back.

``simulations/calibration.json`` is the one hand-off between the fit and
:mod:`simulations.devicemodel.fitted`; this module writes its fields (constants, samples to
accuracy per batch, seed spreads, residuals, leave-one-out) and turns the committed file back
into a :class:`~.fit.Fit` for the report, without refitting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleet.method.budget import parse_budget
from simulations.calibrate.audit import copied_keys
from simulations.calibrate.evaluate import hard_predictions
from simulations.calibrate.fit import FIT_ORDER, Fit
from simulations.calibrate.paper import DATASETS, Cell
from simulations.calibrate.params import DEVICE_FIELDS, WORKLOAD_FIELDS, State
from simulations.devicemodel.curves import samples_to_accuracy
from simulations.devicemodel.fitted import DEVICES, EFFICIENCY_CURVES, WORKLOADS

CALIBRATION_PATH = Path(__file__).resolve().parents[1] / "calibration.json"
COMMAND = "python -m simulations.calibrate --loo"


def seed_spread(cells: Sequence[Cell]) -> dict[tuple[str, str], float]:
    """Seed-to-seed relative spread of each dataset: median std/mean of its oracle cells
    (a std copied from another cell, :func:`.audit.copied_stds`, left out)."""
    out: dict[tuple[str, str], list[float]] = {}
    copied = copied_keys(cells)
    for c in cells:
        if c.method == "oracle" and c.key not in copied:
            out.setdefault((c.model, c.dataset), []).append(c.std_s / c.time_s)
    return {k: float(np.median(v)) for k, v in out.items()}


def calibration_dict(fit: Fit, cells: Sequence[Cell]) -> dict:
    """What devicemodel loads: fitted constants and per-batch samples-to-accuracy."""
    spread = seed_spread(cells)
    pred = hard_predictions(fit, cells)
    fitted_err = {
        key_text(k): round(math.log(pred[k] / v), 6)
        for k, v in {c.key: c.time_s for c in cells}.items()
    }
    out: dict = {
        "about": (
            "Fitted by simulations/calibrate/ to every cell of the paper's Tables 2-4 "
            "(simulations/paper_cells.csv) and the baselines' clock caps (Fig. 1 and Fig. 2 "
            "only choose between B2 hypotheses); least squares on log-times and the B1/ours, "
            "B2/ours ratios with weak priors on the hand-set constants. Regenerate: " + COMMAND
        ),
        "fit_seconds": round(fit.seconds, 1),
        "workloads": {},
        "tx2nx": {n: getattr(fit.states["resnet18"].tx2nx, n) for n in DEVICE_FIELDS},
        "efficiency": {},
        "cell_log_residuals": fitted_err,
    }
    for model, st in fit.states.items():
        out["workloads"][model] = {n: getattr(st.workload, n) for n in WORKLOAD_FIELDS}
        for ds in DATASETS[model]:
            role = "proxy" if ds == DATASETS[model][0] else "target"
            rel = spread.get((model, ds))
            if rel is None:  # proxies: the mean spread of the model's targets
                rel = float(np.mean([spread[(model, d)] for d in DATASETS[model][1:]]))
            out["efficiency"][f"{model}/{ds}"] = {
                "role": role,
                "rel_std": round(rel, 4),
                "samples": {
                    str(b): float(np.exp(v))
                    for b, v in zip(st.workload.batch_sizes, st.log_n[ds], strict=True)
                },
            }
    return out


def key_text(key: tuple) -> str:
    """A cell key as the JSON stores it (``model|board|dataset|budget|method``)."""
    return "|".join("none" if v is None else str(v) for v in key)


def key_parse(text: str) -> tuple:
    """The inverse of :func:`key_text`."""
    model, board, ds, budget, method = text.split("|")
    return (model, board, ds, parse_budget(budget, "cell key budget"), method)


def committed_fit() -> Fit:
    """The fit devicemodel loaded (simulations/calibration.json), as calibrate's states."""
    states = {}
    for model in FIT_ORDER:
        wl = WORKLOADS[model]
        log_n = {
            ds: np.log(
                [samples_to_accuracy(EFFICIENCY_CURVES[(model, ds)], b) for b in wl.batch_sizes]
            )
            for ds in DATASETS[model]
        }
        states[model] = State(wl, DEVICES["tx2nx"], log_n)
    return Fit(states, {}, 0.0)


def committed_loo() -> dict[tuple, float] | None:
    """Leave-one-out predictions stored beside the fit, if the fit was run with ``--loo``."""
    if not CALIBRATION_PATH.exists():
        return None
    data = json.loads(CALIBRATION_PATH.read_text())
    loo = data.get("leave_one_out")
    return {key_parse(k): v for k, v in loo.items()} if loo else None
