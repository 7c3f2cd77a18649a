"""Regenerate every modeled file: check the paper's points, then write profiles and efficiency.

The one driver over the fitted tables, the writers and the checks; ``python -m
simulations.devicemodel`` (``__main__``) runs :func:`main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from simulations.devicemodel.boards import JETSON_NANO
from simulations.devicemodel.efficiency_files import efficiency_filename, write_efficiency
from simulations.devicemodel.fitted import DEVICES, EFFICIENCY_CURVES, WORKLOADS
from simulations.devicemodel.learning_curves import write_modeled_curves
from simulations.devicemodel.paper_checks import (
    TX2NX_BASELINE_CAPS_MHZ,
    check_baseline_caps,
    check_calibration,
    check_lighter_than,
)
from simulations.devicemodel.profiles import profile_filename, profile_rows, write_profile
from simulations.devicemodel.workloads import LIGHTER_THAN_RESNET18


def generate_all(profiles_dir: str | Path, efficiency_dir: str | Path) -> list[Path]:
    """Write every profile (4 models x 2 devices), the nine efficiency files and the modeled
    learning curves of the six targets (``learning_curves.py``: what a replay device evaluates).

    Checks the calibration first (Fig. 1 and Fig. 2 on the Nano ResNet18 rows as written, and the
    caps over every Nano model, so they are the paper's with the light workloads included), and
    that each light workload stays below ResNet18 on each device: a fit that breaks one fails
    here, before any file is written.
    """
    nano = {w.key: profile_rows(JETSON_NANO, w) for w in WORKLOADS.values()}
    check_calibration(nano["resnet18"], nano)  # Fig. 1, Fig. 2, clearance and the caps

    tx2 = {w.key: profile_rows(DEVICES["tx2nx"], w) for w in WORKLOADS.values()}
    check_baseline_caps(tx2, TX2NX_BASELINE_CAPS_MHZ)
    for dev in DEVICES.values():
        heavy = profile_rows(dev, WORKLOADS["resnet18"])
        for key in LIGHTER_THAN_RESNET18:
            check_lighter_than(profile_rows(dev, WORKLOADS[key]), heavy, f"{dev.key}_{key}")
    written = []
    for dev in DEVICES.values():
        for wl in WORKLOADS.values():
            written.append(write_profile(dev, wl, Path(profiles_dir) / profile_filename(dev, wl)))
    for model, dataset in EFFICIENCY_CURVES:
        path = Path(efficiency_dir) / efficiency_filename(model, dataset)
        written.append(write_efficiency(model, dataset, path))
        if EFFICIENCY_CURVES[(model, dataset)].role == "target":  # what devices replay
            written.append(write_modeled_curves(path))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.devicemodel --out simulations/profiles`` regenerates every file."""
    parser = argparse.ArgumentParser(
        prog="python -m simulations.devicemodel",
        description="Regenerate the modeled reference profiles and efficiency files.",
    )
    parser.add_argument("--out", default="simulations/profiles", help="profiles folder")
    parser.add_argument(
        "--efficiency-out",
        default=None,
        help="efficiency folder (default: an 'efficiency' folder beside --out)",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    eff = Path(args.efficiency_out) if args.efficiency_out else out.parent / "efficiency"
    for path in generate_all(out, eff):
        print(path)
    return 0
