"""The gradient noise scale of the device's own data at the shipped weights (no training).

Why: the shipped efficiency vector was measured on a proxy dataset; the device holds the data
that matters but cannot afford to train every batch size to the target on it. The gradient
noise scale (McCandlish et al. 2018, cited by the paper; Pollux, OSDI'21, uses its
preconditioned form for Adam) is a cheap statistic of the data at the current weights: the
ratio of the per-sample gradient variance to the squared mean gradient. Its large-batch law
says the samples a batch size needs grow as ``1 + b / B_noise``, so ``B_noise`` turns into a
whole efficiency shape ``N(b) / N(b_ref)`` (``efficiency_learner.shape_from_noise``).
Whether that law predicts the measured curves is checked against real training in
``benchmarks/efficiency_learning.py``; the combination with the shipped prior weighs it by
how well it did there.

How: ``batches`` big batches of ``big`` samples, each split into ``big // small`` micro-batches
of ``small``. Each micro-batch's gradient ``g_j`` is one backward pass; the big batch's
gradient is their mean, so both sizes come from the same samples at the cost of the small one.
With ``E|G_B|^2 = |G|^2 + tr(S) / B`` at two sizes, the unbiased estimates are
``|G|^2 = (B |G_B|^2 - b |G_b|^2) / (B - b)`` and ``tr(S) = (|G_b|^2 - |G_B|^2) / (1/b - 1/B)``,
averaged over batches before the ratio (a ratio of noisy means, as McCandlish et al. advise).
Per-coordinate sums are kept, so any diagonal preconditioner applies afterwards: ``adam``
weighs each coordinate by ``1 / (sqrt(v) + eps)^2`` with ``v`` the small-batch second moment
(what Adam's ``exp_avg_sq`` would hold at the first steps), ``none`` is the plain SGD form.

The model is evaluated with BatchNorm in eval mode (running statistics) and no dropout: the
micro-batches must be gradients of one function, or their mean is not the big batch's
gradient. Nothing is updated; the weights and the buffers are left as they were.

Python 3.6 + torch 1.10 compatible.
"""

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch

from fleet.agent.models.registry import loss_fn
from fleet.agent.training.indexed_data import IndexedData

PRECONDITIONERS = ("adam", "none")
ADAM_EPS = 1e-8


class NoiseScaleError(ValueError):
    """The estimate cannot be made as asked (bad sizes, too little data); one line."""


NoiseScale = NamedTuple(
    "NoiseScale",
    [
        ("b_noise", float),  # B_simple = tr(S) / |G|^2 (inf: no signal, nan: no variance)
        ("b_noise_sgd", float),  # the same without a preconditioner
        ("rel_se", float),  # relative standard error of b_noise (batch-to-batch spread)
        ("small", int),
        ("big", int),
        ("batches", int),
        ("samples", int),  # samples whose gradients were computed
        ("backward_passes", int),  # micro-batch backward passes (the cost, in steps at ``small``)
        ("preconditioner", str),
    ],
)


def noise_scale(
    model: torch.nn.Module,
    train_set: Any,
    small: int = 8,
    big: int = 128,
    batches: int = 4,
    seed: int = 0,
    device: Any = "cpu",
    preconditioner: str = "adam",
) -> NoiseScale:
    """Estimate the gradient noise scale of ``train_set`` at the model's current weights."""
    if preconditioner not in PRECONDITIONERS:
        raise NoiseScaleError(
            "preconditioner must be one of {}, got {!r}".format(
                ", ".join(PRECONDITIONERS), preconditioner
            )
        )
    for name, v in (("small", small), ("big", big), ("batches", batches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise NoiseScaleError("{} must be a positive integer, got {!r}".format(name, v))
    if big % small or big // small < 2:
        raise NoiseScaleError(
            "big ({}) must be a multiple of small ({}), at least twice it".format(big, small)
        )
    data = IndexedData(train_set, "train_set")
    if len(data) < big:
        raise NoiseScaleError(
            "{} training samples cannot fill a batch of {}".format(len(data), big)
        )
    dev = torch.device(device)
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.to(dev)
    model.eval()
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    micro = big // small
    small_sq = [torch.zeros_like(p) for p in params]  # sum over micro-batches of g_j^2
    big_sq = [torch.zeros_like(p) for p in params]  # sum over big batches of G_B^2
    per_batch = []  # type: List[List[torch.Tensor]]  # (sum g_j^2, G_B^2) per big batch
    try:
        perm = torch.randperm(len(data), generator=gen)
        pos = 0
        for _ in range(batches):
            if pos + big > len(data):
                perm, pos = torch.randperm(len(data), generator=gen), 0
            mean = [torch.zeros_like(p) for p in params]
            s_sq = [torch.zeros_like(p) for p in params]
            for j in range(micro):
                idx = data.index_on_data_device(perm[pos + j * small : pos + (j + 1) * small])
                xb, yb = data.batch(idx)
                loss = loss_fn(model(xb.to(dev)), yb.to(dev))
                grads = torch.autograd.grad(loss, params)
                for m, s, g in zip(mean, s_sq, grads):
                    m.add_(g.detach(), alpha=1.0 / micro)
                    s.add_(g.detach() * g.detach())
            pos += big
            for acc, s in zip(small_sq, s_sq):
                acc.add_(s)
            for acc, m in zip(big_sq, mean):
                acc.add_(m * m)
            per_batch.append([torch.cat([s.flatten() for s in s_sq]), _flat_sq(mean)])
    finally:
        model.train(was_training)
    n_small = batches * micro
    g2 = torch.cat([s.flatten() for s in small_sq]) / n_small  # E[g_small^2] per coordinate
    weights = {"none": torch.ones_like(g2), "adam": 1.0 / (g2.sqrt() + ADAM_EPS) ** 2}
    out: Dict[str, float] = {}
    for name, w in weights.items():
        out[name] = _ratio(
            [float((w * s).sum()) / micro for s, _ in per_batch],
            [float((w * g).sum()) for _, g in per_batch],
            small,
            big,
        )
    w = weights[preconditioner]
    rel_se = _jackknife_rel_se(
        [float((w * s).sum()) / micro for s, _ in per_batch],
        [float((w * g).sum()) for _, g in per_batch],
        small,
        big,
    )
    return NoiseScale(
        b_noise=out[preconditioner],
        b_noise_sgd=out["none"],
        rel_se=rel_se,
        small=small,
        big=big,
        batches=batches,
        samples=batches * big,
        backward_passes=n_small,
        preconditioner=preconditioner,
    )


def _flat_sq(tensors: List[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(t * t).flatten() for t in tensors])


def _ratio(small_sq: List[float], big_sq: List[float], b: int, B: int) -> float:
    """B_simple from the batch means of |G_b|^2 and |G_B|^2 (ratio of means)."""
    gs = sum(small_sq) / len(small_sq)
    gb = sum(big_sq) / len(big_sq)
    g2 = (B * gb - b * gs) / (B - b)
    trace = (gs - gb) / (1.0 / b - 1.0 / B)
    if trace <= 0:
        return float("nan")  # no measurable variance: the estimate says nothing
    if g2 <= 0:
        return float("inf")  # the mean gradient is lost in the noise: a very large noise scale
    return trace / g2


def _jackknife_rel_se(small_sq: List[float], big_sq: List[float], b: int, B: int) -> float:
    """Relative standard error of log B_simple by leaving one big batch out at a time."""
    n = len(small_sq)
    if n < 2:
        return float("inf")
    full = _ratio(small_sq, big_sq, b, B)
    if not (full > 0 and math.isfinite(full)):
        return float("inf")
    logs = []  # type: List[float]
    for k in range(n):
        r = _ratio(small_sq[:k] + small_sq[k + 1 :], big_sq[:k] + big_sq[k + 1 :], b, B)
        if not (r > 0 and math.isfinite(r)):
            return float("inf")
        logs.append(math.log(r))
    mean = sum(logs) / n
    var = (n - 1) / float(n) * sum((x - mean) ** 2 for x in logs)
    return math.sqrt(var)


class NoiseTracker(object):
    """The gradient noise scale from the training steps themselves: no extra pass.

    Why: ``noise_scale`` spends backward passes the training does not use, which on a short
    fine-tune costs more than the choice it informs can save; and at the shipped weights the
    noise scale can be far from what it is once training has started (a new task's head is
    learnt first: docs/efficiency). The steps the trainer takes anyway give both sizes: each
    step's gradient is one of batch ``b``, the mean over ``window`` consecutive steps one of
    ``window x b`` (the weights move little over a few steps of fine-tuning). Per window, the
    two-size formulas of the module docstring give ``|G|^2`` and ``tr(S)``; the estimate is the
    ratio of their means over the last ``keep`` windows, with a jackknife standard error. With
    ``adam`` the coordinates are weighed by the optimizer's ``exp_avg_sq`` (once it exists),
    read once per window.

    ``step(params, batch_size, optimizer)`` goes after ``backward()`` and before
    ``optimizer.step()``; a batch-size change starts a new window. Cost: one window is measured
    in every ``every`` (the others are skipped), and a measured step adds two element-wise
    passes over the gradients and one parameter-sized buffer; nothing is read back to the host
    until ``estimate()`` (at an evaluation), so a GPU step never waits for it.
    """

    def __init__(
        self, window: int = 4, keep: int = 12, preconditioner: str = "adam", every: int = 2
    ) -> None:
        if preconditioner not in PRECONDITIONERS:
            raise NoiseScaleError(
                "preconditioner must be one of {}, got {!r}".format(
                    ", ".join(PRECONDITIONERS), preconditioner
                )
            )
        self.window = max(2, int(window))
        self.keep = max(2, int(keep))
        self.every = max(1, int(every))
        self.preconditioner = preconditioner
        self.windows = []  # type: List[List[Any]]  # [small sum, big, count, batch] per window
        self.history = []  # type: List[List[float]]  # [samples, b_noise, rel_se] at each read
        self._acc = None  # type: Optional[List[torch.Tensor]]
        self._scale = None  # type: Optional[List[Any]]  # 1 / (sqrt(v) + eps) per parameter
        self._small = None  # type: Any  # a 0-d tensor on the gradients' device
        self._count = 0
        self._batch = 0
        self._phase = 0  # steps into the current cycle of ``every`` windows
        self.samples = 0

    def step(self, params: List[torch.Tensor], batch_size: int, optimizer: Any = None) -> None:
        """Account one training step's gradients (``p.grad`` of ``params``)."""
        self.samples += int(batch_size)
        if batch_size != self._batch:
            self._acc, self._count, self._batch, self._phase = None, 0, int(batch_size), 0
        self._phase = (self._phase + 1) % (self.window * self.every)
        if self._count == 0 and self._phase > self.window:
            return  # the skipped part of the cycle
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        with torch.no_grad():
            first = self._acc is None
            if first:  # the window's first step: its gradients start the sum (no zero pass)
                self._scale = self._scales(params, optimizer)
                self._acc = [g.detach().clone() for g in grads]
                self._small = torch.zeros((), device=grads[0].device)
            acc = self._acc
            assert acc is not None  # the window's sum, started above on its first step
            for k, g in enumerate(grads):
                t = g if self._scale is None else g * self._scale[k]
                self._small += torch.dot(t.reshape(-1), t.reshape(-1))
                if not first:
                    acc[k].add_(g)
            self._count += 1
            if self._count < self.window:
                return
            big = torch.zeros((), device=grads[0].device)
            for k, a in enumerate(acc):
                m = a / self._count
                if self._scale is not None:
                    m = m * self._scale[k]
                big += torch.dot(m.reshape(-1), m.reshape(-1))
        self.windows.append([self._small, big, self._count, self._batch])
        del self.windows[: -self.keep]
        self._acc, self._count = None, 0

    def _scales(self, params: List[torch.Tensor], optimizer: Any) -> Optional[List[Any]]:
        if self.preconditioner != "adam" or optimizer is None:
            return None
        out = []
        for p in params:
            if p.grad is None:
                continue
            v = optimizer.state.get(p, {}).get("exp_avg_sq")
            if v is None:
                return None  # before the first step: no second moment yet
            out.append(1.0 / (v.sqrt() + ADAM_EPS))
        return out

    def estimate(self) -> Optional[Tuple[float, float]]:
        """(B_simple, standard error of its log) over the windows kept; None before two."""
        if len(self.windows) < 2:
            return None
        g2, tr = [], []  # type: Tuple[List[float], List[float]]
        for small, big, n, b in self.windows:  # read back here, not during the steps
            gs, gb = float(small) / n, float(big)
            B = n * float(b)
            g2.append((B * gb - b * gs) / (B - b))
            tr.append((gs - gb) / (1.0 / b - 1.0 / B))
        value = _from_means(g2, tr)
        n = len(g2)
        logs = []  # type: List[float]
        for k in range(n):
            r = _from_means(g2[:k] + g2[k + 1 :], tr[:k] + tr[k + 1 :])
            if not (r > 0 and math.isfinite(r)):
                logs = []
                break
            logs.append(math.log(r))
        if logs:
            mean = sum(logs) / n
            se = math.sqrt((n - 1) / float(n) * sum((x - mean) ** 2 for x in logs))
        else:
            se = float("inf")
        self.history.append([self.samples, value, se])
        return value, se


def _from_means(g2: List[float], trace: List[float]) -> float:
    """B_simple = mean tr(S) / mean |G|^2 (nan: no variance; inf: no signal)."""
    t = sum(trace) / len(trace)
    g = sum(g2) / len(g2)
    if t <= 0:
        return float("nan")
    if g <= 0:
        return float("inf")
    return t / g
