"""Modeled learning curves for the modeled convergence traces: what a replay device evaluates.

Why: a device learns its samples-to-target online from its own evaluations
(``fleet/agent/learning/efficiency_learner.py``); a replay device of a modeled trace needs the
evaluations it would have seen on the way. The traces (``simulations/efficiency/*.csv``) say
only where each batch size meets the target; the curve leading there is modeled here:

- its *shape* is an exponential approach, the same for every batch size once its samples are
  scaled to its own count: the fraction of the way from the start accuracy to the target is
  ``(1 - exp(-RATE p)) / (1 - exp(-RATE))`` at the fraction ``p`` of the samples-to-target.
  ``RATE`` = 3 puts the target where the measured MNIST-5k fine-tunes (docs/analogue) meet
  theirs: after a fast rise (70 % of the way at a fifth of the samples; measured 71 %), on a
  tail that still climbs (the last tenth of the samples adds 1.8 % of the rise; measured 1.2 %);
- it starts at ``START`` accuracy (a 10-class head trained from scratch: chance) and meets the
  trace's target exactly at the trace's samples-to-target, never before;
- every evaluation adds a deterministic, keyed noise of ``NOISE_SD`` (the residual spread of the
  measured curves); evaluations come ``EVALS`` times per target, on multiples of the batch size.

No gradient-noise readings are modeled: a modeled device learns from its curve only.
``python -m simulations.devicemodel`` writes ``X.curves.csv`` beside every modeled target trace
``X.csv`` (``generate.generate_all``).
"""

from __future__ import annotations

import math
from pathlib import Path

from fleet.core.curves import Curves, curves_path, save_curves
from fleet.core.efficiency import load_efficiency
from simulations.devicemodel.noise import unit_noise

RATE = 3.0
START = {"transformer": 0.35}  # next-character accuracy of a pre-trained model; images: 0.1
NOISE_SD = 0.003
EVALS = 80
SEED = 0


def shape_at(p: float) -> float:
    """The fraction of the way to the target at fraction ``p`` of the samples."""
    return (1.0 - math.exp(-RATE * min(p, 1.0))) / (1.0 - math.exp(-RATE))


def modeled_curves(trace_path: str | Path) -> Curves:
    """One modeled run per batch size of the trace, meeting its target at its count."""
    eff = load_efficiency(trace_path)
    target = eff.target_accuracy
    if target is None:
        raise ValueError(f"{trace_path}: no target_accuracy column to model curves towards")
    model = eff.metadata.get("model", "")
    dataset = eff.metadata.get("dataset", Path(trace_path).stem)
    start = START.get(model, 0.1)
    runs: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for b, n in eff.reached.items():
        every = max(b, round(n / EVALS / b) * b)
        points = [(0.0, start)]
        s = every
        while s < n:
            mean = start + (target - start) * shape_at(s / n)
            noisy = mean + NOISE_SD * unit_noise("curve", model, dataset, b, s)
            points.append((float(s), min(noisy, target - 1e-4)))  # never before its count
            s += every
        points.append((float(n), target))
        runs[(b, SEED)] = points
    return Curves(runs, str(trace_path), target)


def write_modeled_curves(trace_path: str | Path) -> Path:
    out = curves_path(trace_path)
    save_curves(
        modeled_curves(trace_path),
        out,
        [
            "MODELED learning curves (simulations/devicemodel/learning_curves.py), not measured:",
            "the measured MNIST-5k mean shape, scaled to meet this trace's target at its count",
        ],
    )
    return out
