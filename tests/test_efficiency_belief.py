"""The device's belief about its samples-to-target: Gaussian conditioning checked by brute force,
the switching rule, and the learner that feeds it (refit cadence, resume, exact finish)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fleet.agent.learning.efficiency_belief import (
    LEARNED_TRUST,
    PROXY_TRUST,
    BeliefError,
    prior_belief,
    prior_cov,
    trust_for,
)
from fleet.agent.learning.efficiency_learner import (
    EfficiencyLearner,
    learning_mode,
    shape_from_noise,
    worth_switching,
)

SHIPPED = {4: 14000.0, 8: 14000.0, 16: 15000.0, 32: 17000.0, 64: 18000.0, 128: 23000.0}


def test_no_evidence_is_the_shipped_vector_exactly():
    b = prior_belief(SHIPPED)
    assert b.median() == pytest.approx(SHIPPED, rel=1e-12)
    learner = EfficiencyLearner(SHIPPED, 0.9)
    assert learner.efficiency() == pytest.approx(SHIPPED) and not learner.has_evidence
    assert learner.efficiency(z=1.0) == pytest.approx(SHIPPED)  # nothing learnt: no inflation


def test_observations_condition_like_numpy_brute_force():
    bs = sorted(SHIPPED)
    b = prior_belief(SHIPPED)
    b.observe(32, math.log(25000.0), 0.01)
    b.observe(128, math.log(20000.0), 0.02)
    mu = np.log([SHIPPED[x] for x in bs])
    K = np.array(prior_cov(bs, PROXY_TRUST))
    A = np.zeros((2, len(bs)))
    A[0, bs.index(32)], A[1, bs.index(128)] = 1.0, 1.0
    R = np.diag([0.01, 0.02])
    z = np.log([25000.0, 20000.0])
    gain = K @ A.T @ np.linalg.inv(A @ K @ A.T + R)
    mean = mu + gain @ (z - A @ mu)
    cov = K - gain @ A @ K
    assert np.allclose(b.mean, mean, rtol=0, atol=1e-9)
    assert np.allclose(np.array(b.cov), cov, rtol=0, atol=1e-9)
    # one precise observation: its batch size moves almost all the way, the others by their
    # correlation with it (less than all the way)
    one = prior_belief(SHIPPED)
    one.observe(32, math.log(25000.0), 0.001)
    assert one.median()[32] == pytest.approx(25000.0, rel=0.01)
    assert SHIPPED[16] < one.median()[16] < 25000.0 * SHIPPED[16] / SHIPPED[32]


def test_shape_evidence_moves_ratios_not_the_scale():
    b = prior_belief(SHIPPED)
    flat = {bb: 1.0 for bb in SHIPPED}  # "every batch size needs the same"
    b.observe_shape(flat, 0.0001, 0.0001)
    med = b.median()
    assert med[128] / med[4] < SHIPPED[128] / SHIPPED[4]  # pulled towards flat
    assert med[128] / med[4] == pytest.approx(1.0, abs=0.1)


def test_contrast_and_the_switching_rule():
    b = prior_belief(SHIPPED)
    mean, sd = b.contrast(16, 32)
    assert mean == pytest.approx(math.log(15000 / 17000))
    assert sd > 0
    # same batch size: only the price per sample counts, with the 3 % margin
    assert worth_switching(b, (32, 1.0), (32, 0.96))
    assert not worth_switching(b, (32, 1.0), (32, 0.98))
    # another batch size: b=16 needs 15/17 of b=32's samples; at 12 % more a sample the saving
    # (1.12 x 15/17 = 0.99) is within the belief's doubt and not taken ...
    assert not worth_switching(b, (32, 1.0), (16, 1.12))
    # ... one far beyond it is
    assert worth_switching(b, (32, 1.0), (16, 0.3))


def test_noise_law_shape_and_modes():
    s = shape_from_noise(100.0, [4, 32, 128])
    assert s == pytest.approx({4: 104 / 228, 32: 132 / 228, 128: 1.0})
    assert shape_from_noise(math.inf, [4, 8]) == {4: 1.0, 8: 1.0}
    assert shape_from_noise(math.nan, [4, 8]) is None
    assert learning_mode(None) == "online" and learning_mode("ALL") == "all"
    with pytest.raises(ValueError, match="expected one of none, online, device, all"):
        learning_mode("sometimes")
    assert trust_for("learned") is LEARNED_TRUST and trust_for("trained") is PROXY_TRUST


def test_bad_evidence_is_refused_in_one_line():
    b = prior_belief(SHIPPED)
    with pytest.raises(BeliefError, match="variance must be positive"):
        b.observe(32, 10.0, 0.0)
    with pytest.raises(BeliefError, match="batch size 3 is not one of"):
        b.sd(3)
    with pytest.raises(BeliefError, match="no batch size reached"):
        prior_belief({4: math.nan})


def curve_of(n_target: float, every: int, upto: float, start: float = 0.2, target: float = 0.9):
    """A smooth exponential approach that meets ``target`` at ``n_target``."""
    k = 3.0 / n_target
    top = start + (target - start) / (1 - math.exp(-3.0))
    return [(s, top - (top - start) * math.exp(-k * s)) for s in range(every, int(upto) + 1, every)]


def test_the_learner_finds_a_harder_target_and_resumes_from_its_state():
    """The data needs 3x the shipped samples at b=32: by 60 % of the way the learner's median
    is within 20 % of it (the prior holds it back a little), the others moved up with it, and
    a learner restored from the state holds the same belief; at the finish the count is
    exact."""
    truth = 3 * SHIPPED[32]
    learner = EfficiencyLearner(SHIPPED, 0.9, every=256)
    fits = 0
    for _, a in curve_of(truth, 256, 0.6 * truth):
        learner.trained(32, 256)
        fits += learner.evaluated(a)
    assert 10 <= fits <= 40  # a geometric cadence, not every evaluation
    est = learner.efficiency()
    assert est[32] == pytest.approx(truth, rel=0.2)
    assert est[16] > 1.5 * SHIPPED[16]  # the offset they share moved too
    assert learner.done() == pytest.approx(learner.samples / est[32], rel=1e-9)
    again = EfficiencyLearner(SHIPPED, 0.9, every=256)
    again.restore(learner.state())
    assert again.efficiency() == pytest.approx(est, rel=1e-12)
    assert again.samples == learner.samples
    learner.trained(32, truth - learner.samples)
    learner.reached()
    ev = learner.evidence()
    assert ev["batch_size"] == 32 and ev["samples_to_target"] == pytest.approx(truth)
    assert ev["reached"] is True
    with pytest.raises(ValueError, match="learning state curve"):
        again.restore({"curve": [[1, "x"]]})


def test_the_finish_is_counted_once_even_when_a_resumed_run_meets_it_again():
    """A run that switched batch size (64, then 32) and met its target: its exact count prices
    the samples run at 64 with the belief before that count. Told again (a segment sent again
    after its reply was lost, resumed from the state taken at the finish; or twice in one
    process), the count stays: re-pricing with a belief that already holds it moved it
    (the default fleet's tx2nx-free: 178,742 -> 179,131 samples)."""
    learner = EfficiencyLearner(SHIPPED, 0.9, every=256)
    for s, a in curve_of(2 * SHIPPED[32], 256, 1.6 * SHIPPED[32]):
        learner.trained(64 if s <= 8000 else 32, 256)
        learner.evaluated(a)
    learner.reached()
    first = learner.evidence()
    assert first is not None and first["batch_size"] == 32 and first["reached"] is True
    at_64 = learner.efficiency()[64]  # the belief, with the exact count in it
    state = learner.state()
    learner.reached()
    assert learner.evidence() == first and learner.efficiency()[64] == at_64
    resumed = EfficiencyLearner(SHIPPED, 0.9, every=256)
    resumed.restore(json.loads(json.dumps(state)))  # as it travels in a segment's progress
    resumed.trained(32, 0.0)  # the re-sent segment: nothing left to train
    resumed.reached()
    assert resumed.evidence() == first and resumed.efficiency()[64] == pytest.approx(at_64)
    fresh = EfficiencyLearner(SHIPPED, 0.9, every=256)  # a state from before the finish
    fresh.restore({k: v for k, v in state.items() if k != "reached_at"})
    fresh.reached()  # ... is still told (the finish it never saw): the count is taken then
    assert fresh.evidence()["reached"] is True
