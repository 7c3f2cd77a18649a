"""The gradient noise scale: checked against a brute force, from the training steps, and its
law's ordering of batch sizes against the measured curves of real training.

The brute force computes every per-sample gradient of a small classifier, so the true
``tr(S) / |G|^2`` is known; the estimators (micro-batches at two sizes, or consecutive training
steps) must find it within their statistical error. The real-data check reads the noise scale the
analogue's training steps recorded (``simulations/efficiency/trained/*.curves.csv``) and the
samples-to-target those runs measured.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch

from fleet.agent.learning.efficiency_learner import MAX_LAW_ERR, EfficiencyLearner, shape_from_noise
from fleet.agent.learning.noise_scale import NoiseScaleError, NoiseTracker, noise_scale
from fleet.agent.models.registry import loss_fn
from fleet.core.curves import (
    Curves,
    curves_path,
    load_curves,
    noise_law_error,
    warm_noise_scale,
)
from fleet.core.efficiency import load_efficiency

TRAINED = Path(__file__).resolve().parents[1] / "simulations" / "efficiency" / "trained"


def problem(n: int = 4096, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, 0] + 0.8 * torch.randn(n, generator=g) > 0).long()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 2))
    return model, x, y


def brute_force_b_simple(model, x, y) -> float:
    params = list(model.parameters())
    grads = []
    for i in range(len(y)):
        loss = loss_fn(model(x[i : i + 1]), y[i : i + 1])
        gs = torch.autograd.grad(loss, params)
        grads.append(torch.cat([g.flatten() for g in gs]))
    g = torch.stack(grads)
    mean = g.mean(0)
    trace = float(((g - mean) ** 2).sum(1).mean())
    return trace / float(mean @ mean)


@pytest.mark.slow
def test_micro_batch_estimate_finds_the_brute_force_noise_scale():
    model, x, y = problem()
    truth = brute_force_b_simple(model, x, y)
    ns = noise_scale(model, (x, y), small=8, big=128, batches=32, preconditioner="none")
    assert ns.b_noise == pytest.approx(truth, rel=0.25)
    assert ns.b_noise_sgd == ns.b_noise and ns.samples == 32 * 128
    assert ns.backward_passes == 32 * 16 and 0 < ns.rel_se < 0.5
    # nothing was trained: the weights are as they were
    before = [p.detach().clone() for p in model.parameters()]
    noise_scale(model, (x, y), small=8, big=64, batches=2)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.slow
def test_the_tracker_finds_it_from_training_steps_alone():
    """Steps at b=16 with a learning rate small enough that the weights barely move over a
    window: the tracker's estimate (no extra pass) matches the brute force."""
    model, x, y = problem(seed=1)
    truth = brute_force_b_simple(model, x, y)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    tracker = NoiseTracker(window=8, keep=64, preconditioner="none")
    params = list(model.parameters())
    g = torch.Generator().manual_seed(2)
    for _ in range(512):
        idx = torch.randint(0, len(y), (16,), generator=g)
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        tracker.step(params, 16, opt)
        opt.step()
    got = tracker.estimate()
    assert got is not None
    assert got[0] == pytest.approx(truth, rel=0.3)
    assert tracker.history[-1][0] == 512 * 16


def test_bad_sizes_are_refused_in_one_line():
    model, x, y = problem(n=64)
    with pytest.raises(NoiseScaleError, match="multiple of small"):
        noise_scale(model, (x, y), small=8, big=12)
    with pytest.raises(NoiseScaleError, match="cannot fill a batch of 128"):
        noise_scale(model, (x, y), small=8, big=128)
    with pytest.raises(NoiseScaleError, match="preconditioner must be one of adam, none"):
        noise_scale(model, (x, y), preconditioner="rmsprop")


@pytest.mark.parametrize("name", ["small_cnn_mnist-5k", "small_cnn_fashion-a"])
def test_the_law_orders_batch_sizes_like_the_measured_curves_where_they_differ(name):
    """The noise scale the training steps showed (median over the runs, between a tenth and
    half of each run) through the law ranks every pair of batch sizes whose measured
    samples-to-target (mean over the recorded seeds) differ by more than 15 % as they measured."""
    eff = load_efficiency(TRAINED / f"{name}.csv")
    curves = load_curves(curves_path(TRAINED / f"{name}.csv"))
    readings = []
    for (b, s), pts in curves.noise.items():
        n = curves.reached_at(b, s, curves.target)
        vals = [v for at, v, _ in pts if n > 0 and 0.1 * n <= at <= 0.5 * n and math.isfinite(v)]
        readings += vals
    assert readings, "the curves file records the noise scale"
    law = shape_from_noise(statistics.median(readings), eff.batch_sizes)
    pairs = 0
    for a in eff.batch_sizes:
        for b in eff.batch_sizes:
            na, nb = eff.reached[a], eff.reached[b]
            if a < b and (nb > 1.15 * na or na > 1.15 * nb):
                pairs += 1
                assert (law[a] < law[b]) == (na < nb), (a, b, na, nb, law)
    assert pairs >= 3


def test_the_law_error_is_the_rms_log_miss_of_its_shape():
    """Readings of B_noise = 100 (and an early, misleading 5 outside the warm window): the
    law's shape is (100 + b) / 164; measured counts off it by +10 % at b=4 only."""
    law = {b: (100 + b) / 164 for b in (4, 16, 64)}
    reached = {4: 1000 * law[4] * 1.1, 16: 1000 * law[16], 64: 1000.0}
    runs, noise = {}, {}
    for b, n in reached.items():
        runs[(b, 0)] = [(0.5 * n, 0.5), (n, 0.9)]
        noise[(b, 0)] = [(0.05 * n, 5.0, 0.1), (0.3 * n, 100.0, 0.1), (0.45 * n, 100.0, 0.1)]
    curves = Curves(runs, target=0.9, noise=noise)
    assert warm_noise_scale(curves) == 100.0
    assert noise_law_error(reached, curves) == pytest.approx(math.sqrt(math.log(1.1) ** 2 / 3))
    assert noise_law_error(reached, Curves(runs, target=0.9)) is None  # nothing recorded


@pytest.mark.parametrize(
    "name,trusted",
    [("small_cnn_mnist-5k", True), ("small_cnn_fashion-a", True),
     ("char_transformer_small_austen", False), ("char_transformer_small_mobydick", False)],
)  # fmt: skip
def test_a_device_takes_the_law_only_where_it_held_on_the_proxys_own_runs(name, trusted):
    """The efficiency file records how far the law missed its own runs (``noise_law_err``):
    small on the image analogue, far off on the char transformer (AdamW; its warm noise scale
    says every batch size is alike, its curves say small batches need far fewer samples). A
    device shipped the text file does not let the law move its belief."""
    eff = load_efficiency(TRAINED / f"{name}.csv")
    curves = load_curves(curves_path(TRAINED / f"{name}.csv"))
    err = noise_law_error(eff.reached, curves)
    assert float(eff.metadata["noise_law_err"]) == pytest.approx(err, abs=1e-3)
    assert (err <= MAX_LAW_ERR) == trusted
    learner = EfficiencyLearner(eff.reached, curves.target, noise=True, law_err=err)
    shape = shape_from_noise(warm_noise_scale(curves), eff.batch_sizes)
    before = learner.efficiency()
    assert learner.noise_shape(shape, 0.1) == trusted
    assert (learner.efficiency() != before) == trusted
