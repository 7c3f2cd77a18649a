"""What a device believes about its samples-to-target per batch size, and how evidence moves it.

Why a belief and not a vector: the shipped efficiency is a proxy's measurement, right in shape
more often than in scale (docs/analogue: another dataset needed 1.8x the samples at every batch
size) and sometimes wrong in shape too. The device gathers evidence of three kinds: its own
learning curve at the batch size it runs (``learning_curve.py``: samples to the target, with an
uncertainty), a cheap statistic of its data before training (``noise_scale.py``: a shape), and
what the fleet saw in earlier rounds (the coordinator's posterior, shipped as the next prior).
Each is weighed by its uncertainty against the others, so a guess from three early evaluations
moves little and a curve that has nearly reached the target moves a lot.

The model: ``log N(b)`` is Gaussian with the shipped counts as its mean and a covariance over
``x = log2 b`` built from four parts (``PriorTrust``): an offset common to every batch size
(the data is harder or easier as a whole), a slope (larger batches relatively better or worse),
a smooth deviation (squared-exponential in ``x``, neighbours move together) and an independent
part per batch size (plus the shipped seed spread). Evidence is linear in ``log N`` (one batch
size, or a contrast between batch sizes for a shape) with Gaussian noise, so updating is the
Gaussian conditioning formula on a matrix the size of the batch-size list. An observation at the
running batch size therefore moves the others too, by as much as the prior says they move
together: a device that finds b=32 needs twice the promised samples expects b=16 to need more
as well, and its choice can change without it ever training at b=16.

Decisions use the median ``exp(mean)`` of each batch size (``median``): with no evidence it is
the shipped vector itself, so a device that has learnt nothing chooses exactly as Algorithm 1
does; the log-normal mean (``expected``) would inflate every count by its prior width and the
predicted times of the deadline plan with it.

Python 3.6 compatible, stdlib only (the closed loop uses it on the board).
"""

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

PriorTrust = NamedTuple(
    "PriorTrust",
    [
        ("offset", float),  # sd of log N common to every batch size
        ("slope", float),  # sd of the slope of log N per octave of batch size
        ("smooth", float),  # sd of the smooth deviation
        ("length", float),  # its correlation length, in octaves
        ("indep", float),  # sd of each batch size's own deviation
    ],
)

#: How far a proxy's log N(b) is from a target's: the spread, over every (proxy, target) pair of
#: one model, of the offset (rms 0.30), the slope per octave (rms 0.064) and what is left per
#: batch size (rms 0.057), on the paper's reference efficiencies and the analogues' real training
#: (``python benchmarks/efficiency_learning.py --calibrate``; docs/efficiency.md). The offset is
#: taken 1.5x wider than seen: a fleet's data may be harder than any pair here (the issue's was
#: 1.8x, 0.59 in log), and a too narrow offset only slows the learning of the scale.
PROXY_TRUST = PriorTrust(offset=0.45, slope=0.065, smooth=0.05, length=1.5, indep=0.03)
#: A vector the coordinator learnt from the fleet's own evidence (``fleet/trust/efficiency_store``)
#: carries its posterior spread per batch size (its ``std`` column); on top of it only a small
#: common part, so the device's own curve still moves the batch sizes it does not run.
LEARNED_TRUST = PriorTrust(offset=0.1, slope=0.02, smooth=0.04, length=1.5, indep=0.0)


def trust_for(source: Optional[str]) -> PriorTrust:
    """The prior width of a shipped vector: ``learned`` ones are the fleet's posterior."""
    return LEARNED_TRUST if source == "learned" else PROXY_TRUST


class BeliefError(ValueError):
    """Evidence or a prior the belief cannot use; one line."""


class Belief(object):
    """Gaussian belief over ``log N(b)`` for a fixed list of batch sizes."""

    def __init__(self, batch_sizes: Sequence[int], mean: Sequence[float], cov: List[List[float]]):
        self.batch_sizes = [int(b) for b in batch_sizes]
        self.mean = [float(m) for m in mean]
        self.cov = [[float(v) for v in row] for row in cov]
        self.evidence = []  # type: List[Dict[str, object]]

    def copy(self) -> "Belief":
        out = Belief(self.batch_sizes, self.mean, self.cov)
        out.evidence = [dict(e) for e in self.evidence]
        return out

    def index(self, b: int) -> int:
        try:
            return self.batch_sizes.index(int(b))
        except ValueError:
            raise BeliefError(
                "batch size {} is not one of {}".format(b, self.batch_sizes)
            ) from None

    def sd(self, b: int) -> float:
        k = self.index(b)
        return math.sqrt(max(self.cov[k][k], 0.0))

    def expected(self) -> Dict[int, float]:
        """Expected samples-to-target per batch size (log-normal mean)."""
        return dict(
            (b, math.exp(m + 0.5 * max(self.cov[k][k], 0.0)))
            for k, (b, m) in enumerate(zip(self.batch_sizes, self.mean))
        )

    def contrast(self, b1: int, b2: int) -> Tuple[float, float]:
        """(mean, sd) of ``log N(b1) - log N(b2)``: how sure the belief is that one batch size
        needs fewer samples than another (their errors are correlated: they share an offset)."""
        i, j = self.index(b1), self.index(b2)
        var = self.cov[i][i] + self.cov[j][j] - 2.0 * self.cov[i][j]
        return self.mean[i] - self.mean[j], math.sqrt(max(var, 0.0))

    def median(self) -> Dict[int, float]:
        return dict((b, math.exp(m)) for b, m in zip(self.batch_sizes, self.mean))

    def update(
        self,
        rows: List[Dict[int, float]],
        values: Sequence[float],
        noise: List[List[float]],
        label: str = "",
    ) -> None:
        """Condition on ``A logN = values + e``, ``e ~ N(0, noise)``; row k of A is
        ``rows[k]`` as {batch size: coefficient}. Rows naming no known batch size are dropped."""
        keep = [k for k, r in enumerate(rows) if any(b in self.batch_sizes for b in r)]
        if not keep:
            return
        n = len(self.batch_sizes)
        A = [[0.0] * n for _ in keep]
        for i, k in enumerate(keep):
            for b, c in rows[k].items():
                if b in self.batch_sizes:
                    A[i][self.index(b)] = float(c)
        z = [float(values[k]) for k in keep]
        R = [[float(noise[k][j]) for j in keep] for k in keep]
        for v in z + [x for row in R for x in row]:
            if not math.isfinite(v):
                raise BeliefError("evidence {!r}: values and noise must be finite".format(label))
        KAt = _matmul(self.cov, _transpose(A))  # n x m
        S = _add(_matmul(A, KAt), R)  # m x m
        resid = [zi - sum(a * m for a, m in zip(row, self.mean)) for zi, row in zip(z, A)]
        gain_t = _solve(S, _transpose(KAt))  # m x n: S^-1 (K A^T)^T
        for j in range(n):
            self.mean[j] += sum(gain_t[i][j] * resid[i] for i in range(len(z)))
        delta = _matmul(KAt, gain_t)  # n x n
        self.cov = [
            [self.cov[i][j] - 0.5 * (delta[i][j] + delta[j][i]) for j in range(n)] for i in range(n)
        ]
        self.evidence.append({"label": label, "rows": len(z)})

    def observe(self, b: int, log_n: float, var: float, label: str = "") -> None:
        """One batch size's samples-to-target seen as ``exp(log_n)`` with variance ``var``."""
        if not var > 0 or not math.isfinite(var):
            raise BeliefError("evidence {!r}: variance must be positive, got {}".format(label, var))
        self.update([{int(b): 1.0}], [log_n], [[var]], label)

    def observe_shape(
        self, ratios: Dict[int, float], var_each: float, var_common: float, label: str = ""
    ) -> None:
        """A shape (``N(b) / N(ref)`` up to one unknown scale) seen with independent error
        ``var_each`` per batch size plus ``var_common`` shared along the shape's own tilt (an
        error in one fitted parameter moves every ratio together). The reference is the
        largest batch size present."""
        bs = sorted(b for b in ratios if b in self.batch_sizes and ratios[b] > 0)
        if len(bs) < 2:
            return
        ref = bs[-1]
        others = bs[:-1]
        rows = [{b: 1.0, ref: -1.0} for b in others]
        vals = [math.log(ratios[b] / ratios[ref]) for b in others]
        tilt = [v if v != 0 else 0.0 for v in vals]
        scale = max(abs(t) for t in tilt) or 1.0
        noise = [
            [
                var_each * (2.0 if i == j else 1.0)  # both ends carry their own error
                + var_common * (tilt[i] / scale) * (tilt[j] / scale)
                for j in range(len(others))
            ]
            for i in range(len(others))
        ]
        self.update(rows, vals, noise, label)

    def to_dict(self) -> Dict[str, object]:
        return {
            "batch_sizes": list(self.batch_sizes),
            "log_mean": list(self.mean),
            "log_sd": [math.sqrt(max(self.cov[k][k], 0.0)) for k in range(len(self.mean))],
            "expected": [self.expected()[b] for b in self.batch_sizes],
            "evidence": [dict(e) for e in self.evidence],
        }


def prior_cov(
    batch_sizes: Sequence[int], trust: PriorTrust, seed_sd: Optional[Dict[int, float]] = None
) -> List[List[float]]:
    """The prior covariance of ``log N`` (module docstring); ``seed_sd`` adds each batch
    size's own seed spread (relative std of the shipped mean)."""
    xs = [math.log(b, 2) for b in batch_sizes]
    centre = sum(xs) / len(xs)
    out = []
    for i, xi in enumerate(xs):
        row = []
        for j, xj in enumerate(xs):
            v = trust.offset**2 + trust.slope**2 * (xi - centre) * (xj - centre)
            if trust.smooth > 0 and trust.length > 0:
                v += trust.smooth**2 * math.exp(-((xi - xj) ** 2) / (2.0 * trust.length**2))
            if i == j:
                v += trust.indep**2
                sd = (seed_sd or {}).get(batch_sizes[i], 0.0)
                v += sd * sd
            row.append(v)
        out.append(row)
    return out


def prior_belief(
    shipped: Dict[int, float],
    trust: PriorTrust = PROXY_TRUST,
    rel_std: Optional[Dict[int, float]] = None,
) -> Belief:
    """The belief before any evidence: the shipped counts, trusted as ``trust`` says; each
    batch size's seed spread (``rel_std``: std over mean of the shipped estimate) widens it."""
    bs = sorted(b for b, n in shipped.items() if n > 0 and math.isfinite(n))
    if not bs:
        raise BeliefError("shipped efficiency: no batch size reached the target")
    seed_sd = {}  # type: Dict[int, float]
    for b in bs:
        r = (rel_std or {}).get(b)
        if r is not None and r > 0:
            seed_sd[b] = math.log(1.0 + r)
    return Belief(bs, [math.log(shipped[b]) for b in bs], prior_cov(bs, trust, seed_sd))


# ------------------------------------------------------------------------------ linear algebra


def _transpose(m: List[List[float]]) -> List[List[float]]:
    return [list(col) for col in zip(*m)] if m else []


def _matmul(a: List[List[float]], b: List[List[float]]) -> List[List[float]]:
    bt = _transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]


def _add(a: List[List[float]], b: List[List[float]]) -> List[List[float]]:
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def _solve(a: List[List[float]], b: List[List[float]]) -> List[List[float]]:
    """``a^-1 b`` by Gauss-Jordan elimination with partial pivoting (a is small and SPD)."""
    n = len(a)
    m = [list(a[i]) + list(b[i]) for i in range(n)]
    width = len(m[0])
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise BeliefError("evidence is degenerate (a singular system)")
        m[c], m[p] = m[p], m[c]
        inv = 1.0 / m[c][c]
        m[c] = [v * inv for v in m[c]]
        for r in range(n):
            if r != c and m[r][c] != 0.0:
                f = m[r][c]
                m[r] = [vr - f * vc for vr, vc in zip(m[r], m[c])]
    return [row[n:width] for row in m]


def expected_argmin(
    belief: Belief, cost_per_sample: Dict[int, float]
) -> Tuple[Optional[int], Dict[int, float]]:
    """(batch size of least cost, cost per batch size) on the median counts: a helper for tests
    and reports; the loop chooses with ``choose.choose`` on ``belief.median()``."""
    exp = belief.median()
    costs = dict((b, cost_per_sample[b] * exp[b]) for b in exp if b in cost_per_sample)
    if not costs:
        return None, costs
    return min(costs, key=lambda b: (costs[b], b)), costs
