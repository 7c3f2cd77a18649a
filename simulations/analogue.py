"""An offline analogue of the paper's setting, on data that can be had without the internet.

The paper pre-trains on CIFAR-100, estimates r on a CIFAR-10 subset (the proxy) and fine-tunes
on quarters of SVHN and CINIC (the targets). Here, on 2 CPU cores in minutes:

- pre-train ``small_cnn`` on Fashion-MNIST's official *train* split (the public dataset);
- candidate proxies and targets: MNIST-5k (digits: another task, same input shape, like
  CIFAR-10 for SVHN), and two disjoint halves of Fashion-MNIST's official *test* split
  (``fashion-a``, ``fashion-b``: unseen during pre-training, like the device's own data);
- every one of them gets its own samples-to-accuracy per batch size (``powerfleet estimate``
  logic, real training, several seeds) at its own target accuracy;
- the proxy-sensitivity study (Fig. 5/6): choose (b, f) with dataset P's r, cost it with
  dataset T's, on the modeled Jetson LUTs for small_cnn, for every budget.

The measured efficiency files land in ``simulations/efficiency/trained/`` (``source=trained``)
and replace hand-made traces in the ``analogue`` fleet scenario.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fleet.agent.data import datasets
from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.imagefiles import read_idx_set, write_idx
from fleet.common.errors import InputError
from fleet.reports.experiment import proxy_sensitivity
from fleet.training.estimate import EstimateSpec, estimate, write_outputs
from fleet.training.pretrain import pretrain

HERE = Path(__file__).resolve().parent
TARGETS = {"mnist-5k": 0.95, "fashion-a": 0.86, "fashion-b": 0.86}
BATCH_SIZES = (4, 8, 16, 32, 64, 128)


def derive_fashion_halves(data_dir: str | None) -> dict[str, str]:
    """fashion-a / fashion-b: the two halves of the official test split, as IDX folders."""
    try:
        folder = Path(datasets.prepared_path("fashion-mnist", data_dir))
    except DatasetError as exc:
        raise InputError(str(exc)) from None
    x, y = read_idx_set(
        str(folder / "test-images-idx3-ubyte.gz"), str(folder / "test-labels-idx1-ubyte.gz")
    )
    out = {}
    half = len(y) // 2
    for name, sl in (("fashion-a", slice(0, half)), ("fashion-b", slice(half, None))):
        dest = folder.parent / "analogue" / name
        if not (dest / "labels-idx1-ubyte.gz").exists():
            dest.mkdir(parents=True, exist_ok=True)
            write_idx(str(dest / "images-idx3-ubyte.gz"), x[sl, 0].astype(np.uint8))
            write_idx(str(dest / "labels-idx1-ubyte.gz"), y[sl].astype(np.uint8))
        out[name] = str(dest)
    return out


def run_study(
    data_dir: str | None,
    out_dir: Path,
    efficiency_dir: Path = HERE / "efficiency" / "trained",
    profiles_dir: Path = HERE / "profiles",
    seeds: int = 3,
    workers: int | None = None,
    log=print,
) -> dict[str, Any]:
    """Pre-train, estimate on every dataset, and build the sensitivity matrices."""
    t0 = time.time()
    paths = {"mnist-5k": "mnist-5k", **derive_fashion_halves(data_dir)}
    from fleet.training.estimate import default_cache_dir

    # weights are a cache, not a result: they stay out of the report folder (and out of git)
    weights = default_cache_dir().parent / "analogue" / "small_cnn_fashion-pretrained.pft"
    if not weights.exists():
        meta = pretrain(
            "small_cnn",
            "fashion-mnist",
            str(weights),
            data_dir,
            epochs=0.5,
            batch_size=64,
            lr=1e-3,
        )
        log(f"pretrained: test accuracy {meta['accuracy']:.3f} in {meta['train_time_s']:.0f} s")
    effs = {}
    for name, target in TARGETS.items():
        spec = EstimateSpec(
            model="small_cnn",
            proxy=paths[name],
            batch_sizes=BATCH_SIZES,
            target_accuracy=target,
            seeds=seeds,
            weights=str(weights),
            lr_ref_batch=128,
            lr_ref=1e-3,
            eval_every_samples=256,
            max_samples=80_000,
            data_dir=data_dir,
        )
        eff, runs, cached = estimate(spec, workers)
        path = efficiency_dir / f"small_cnn_{name}.csv"
        write_outputs(eff, runs, spec, str(path))
        effs[name] = path
        log(f"{name}: {[eff.samples[b] for b in eff.batch_sizes]} (cached={cached})")
    sens = []
    for device in ("nano", "tx2nx"):
        s = proxy_sensitivity(
            "small_cnn", device, list(TARGETS), profiles_dir, efficiency_dir, (4.5, 7.0, None)
        )
        sens.append(s)
    result = {
        "sensitivity": sens,
        "efficiency": {k: str(v) for k, v in effs.items()},
        "wall_s": time.time() - t0,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    # committed: no machine paths, no timings (they change on every rebuild from the cache)
    portable = {"sensitivity": sens, "efficiency": {k: _rel(v) for k, v in effs.items()}}
    (out_dir / "analogue.json").write_text(json.dumps(portable, indent=1) + "\n")
    return result


def _rel(path: Path) -> str:
    """A repo-relative path where possible: the JSON is committed and read on other machines."""
    try:
        return str(Path(path).resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def efficiency_table(efficiency: dict[str, str], target: Callable[[str], float]) -> list[str]:
    """Markdown rows: samples to the target per batch size (mean over seeds) and r = N / max N,
    one row per dataset; the image and the text analogue reports share it."""
    from fleet.core.efficiency import load_efficiency

    effs = {name: load_efficiency(path) for name, path in efficiency.items()}
    bs = sorted({b for e in effs.values() for b in e.batch_sizes})
    lines = [
        "| dataset (target acc.) | " + " | ".join(f"b={b}" for b in bs) + " |",
        "|---" * (1 + len(bs)) + "|",
    ]
    for name, e in effs.items():
        r = e.ratios() if e.reached else {}
        cells = [f"{e.samples[b]:,.0f} (r={r[b]:.2f})" if b in r else "not reached" for b in bs]
        lines.append(f"| {name} ({target(name):g}) | " + " | ".join(cells) + " |")
    return lines
