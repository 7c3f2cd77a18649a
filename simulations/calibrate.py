"""Fit the device model and the efficiency curves to the paper's published numbers.

The modeled Nano / TX2 NX profiles stand in for boards nobody here has, so every simulation
inherits their truth. This module fits the free constants of :mod:`simulations.devicemodel`
(per model: host and GPU power, activity curve, per-step and per-sample time, the share of GPU
time that does not follow the clock; per board: the TX2 NX's scale factors against the Nano) and
the samples-to-accuracy of every batch size on every dataset, jointly, to:

* every time cell of the paper's Tables 2, 3 and 4 (``simulations/paper_cells.csv``: B1, B2, ours,
  fastest), as log-times and as the speed-up ratios B1/ours and B2/ours;
* Fig. 1 (5 W: b=128 fits up to 307.2 MHz only, b=64 up to 460.8 MHz, 31.9 % faster);
* Fig. 2 (N(8)=10, N(32)=15: b=8 wins under 4.5 and 5 W, b=32 under 7 W on the Nano);
* the baselines' clock caps (Nano 307.2 / 614.4 / 921.6 MHz, paper §5.1; the paper gives none for
  the TX2 NX, so 420.75 / 930.75 / 1300.5 MHz are used: with the Nano's clock scaling, Table 4's
  B1 ratios 7343/3021 and 3944/3021 put them at ~410 and ~890 MHz).

The boards' frequency tables and voltage curves stay fixed. The model stays physical (step time =
a part that follows the clock + a part that does not; power = idle + host + activity(b) f V(f)^2)
and weak priors pull every constant towards its documented hand-set value, so that the fit
extrapolates sensibly to budgets the paper did not use. A method's choice is an argmin over
discrete operating points; the fit uses a soft minimum (low temperature) so that least squares
can move it, and every number reported is recomputed with the hard rules the fleet uses.

Solver: damped Gauss-Newton (Levenberg-Marquardt) with a forward-difference Jacobian in numpy; the
models are fitted one after another (ResNet18 first: it sets the caps and the TX2 NX scales).
Leave-one-out: every cell is dropped in turn, its model refitted from the full fit, and the cell
predicted; the report puts that error beside the fitted one.

Run ``python -m simulations.calibrate`` to fit and write ``simulations/calibration.json`` (what
``devicemodel`` loads), then ``python -m simulations.devicemodel --out simulations/profiles``.
``--loo`` adds the leave-one-out pass, ``--report PATH`` writes the side-by-side Markdown table.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simulations import devicemodel as dm

HERE = Path(__file__).resolve().parent
CELLS_PATH = HERE / "paper_cells.csv"
CALIBRATION_PATH = HERE / "calibration.json"
COMMAND = "python -m simulations.calibrate --loo"

BUDGETS: tuple[float | None, ...] = (4.5, 7.0, None)
#: Baselines' caps (paper §5.1 for the Nano; inferred from Table 4's B1 column for the TX2 NX).
CAPS_MHZ: dict[str, dict[float | None, float]] = {
    "nano": dm.BASELINE_CAPS_MHZ,
    "tx2nx": dm.TX2NX_BASELINE_CAPS_MHZ,
}
METHODS = ("b1", "b2", "ours", "oracle")
#: The proxy and the targets of each model (paper §5.1), in the order parameters are packed.
DATASETS = {
    "resnet18": ("cifar10-proxy", "svhn", "cinic"),
    "mobilenetv2": ("cifar10-proxy", "svhn", "cinic"),
    "transformer": ("shakespeare-proxy", "austen", "dickens"),
}
BOARDS_OF = {"resnet18": ("nano", "tx2nx"), "mobilenetv2": ("nano",), "transformer": ("nano",)}
#: Fit order: ResNet18 sets the caps and the TX2 NX scales; the lighter models must stay below it.
FIT_ORDER = ("resnet18", "transformer", "mobilenetv2")
#: Peak-power order the profiles keep at every (b, f): lighter model first.
LIGHTER = {"transformer": "resnet18", "mobilenetv2": "transformer"}

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

# Weights (per unit of residual). Log-times of the cells and the two speed-up ratios carry the
# fit; constraints are hinges measured in 10 mW or 1 %; priors are weak (0.08 per e-fold).
W_CELL = 1.0
W_RATIO = 3.5
W_HINGE = 5.0
W_PRIOR = 0.04
W_SCALE = 1.0
W_SMOOTH = 1.0
W_PROXY = 0.3
W_FIG1 = 3.0
#: Soft-minimum temperature (log-time) and feasibility softness (W) during the fit.
TEMPERATURES = ((0.08, 0.05), (0.03, 0.02), (0.012, 0.008))
#: Clearance between a peak and a budget the calibration relies on (W).
MARGIN_W = 0.02
#: Whether Fig. 1 and Fig. 2 enter the fit as hinges. They do not. Forced in (Fig. 1's saving
#: within its 2-point tolerance, Fig. 2's winners by any margin), every figure holds but the
#: ResNet18 ratio errors rise from 0.05-0.09 to 0.12-0.16 (Nano B1/ours 0.124, B2/ours 0.158;
#: TX2 NX 0.154, 0.131). Left out, they only choose between the B2 hypotheses
#: (:func:`figure_misses`); the fit then keeps Fig. 1 (30.3 % saving, paper 31.9 %) and Fig. 2
#: at 4.5 W and 7 W, while at 5 W b=32 edges out b=8 by ~2 % (the flip moves from between 5 and
#: 7 W to between 4.5 and 5 W). See :func:`figures_markdown` and tests/test_devicemodel.py.
FIT_FIGURES = False
#: Cost of one figure miss when choosing between B2 hypotheses (a cell off by e^1 costs 1).
W_FIGURE_MISS = 10.0
#: Fig. 2's ratio of samples to accuracy, N(32) / N(8) = 15 / 10, pinned on ResNet18's curves.
FIG2_RATIO = 1.5


@dataclass(frozen=True)
class Cell:
    table: int
    model: str
    board: str
    dataset: str
    budget_w: float | None
    method: str
    time_s: float
    std_s: float

    @property
    def key(self) -> tuple[str, str, str, float | None, str]:
        return (self.model, self.board, self.dataset, self.budget_w, self.method)


def load_cells(path: Path = CELLS_PATH) -> list[Cell]:
    """The transcribed table cells (``#`` lines are the citation)."""
    with open(path, newline="") as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        budget = None if r["budget_w"] == "none" else float(r["budget_w"])
        out.append(
            Cell(
                int(r["table"]),
                r["model"],
                r["board"],
                r["dataset"],
                budget,
                r["method"],
                float(r["time_s"]),
                float(r["std_s"]),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _to_free(name: str, value: float) -> float:
    if name in FRACTIONS:
        return math.log(value / (1.0 - value))
    return math.log(value)


def _from_free(name: str, x: float) -> float:
    if name in FRACTIONS:
        return 1.0 / (1.0 + math.exp(-x))
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
            for b in dm.WORKLOADS[model].batch_sizes:
                if model == "resnet18" and b == 32:
                    continue  # tied to b=8 by Fig. 2
                lay.names.append(f"n.{ds}.{b}")
        return lay


@dataclass(frozen=True)
class State:
    """Physical values: the model's workload, the TX2 NX device, log N per dataset and batch."""

    workload: dm.Workload
    tx2nx: dm.Device
    log_n: dict[str, np.ndarray]  # dataset -> log samples-to-accuracy per batch size


def decode(lay: Layout, x: np.ndarray, tx2nx: dm.Device) -> State:
    wl = dm.WORKLOADS[lay.model]
    wfields, dfields, logn = {}, {}, {}
    for name, v in zip(lay.names, x, strict=True):
        kind, rest = name.split(".", 1)
        if kind == "w":
            wfields[rest] = _from_free(rest, float(v))
        elif kind == "d":
            dfields[rest] = _from_free(rest, float(v))
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
            out.append(_to_free(rest, getattr(state.workload, rest)))
        elif kind == "d":
            out.append(_to_free(rest, getattr(state.tx2nx, rest)))
        else:
            ds, b = rest.rsplit(".", 1)
            out.append(float(state.log_n[ds][bs.index(int(b))]))
    return np.array(out)


def initial_state(model: str, tx2nx: dm.Device) -> State:
    """The hand-set constants (the priors) and the current efficiency laws."""
    wl = dm.PRIOR_WORKLOADS[model]
    logn = {}
    for ds in DATASETS[model]:
        curve = dm.PRIOR_CURVES[(model, ds)]
        logn[ds] = np.log([dm.law_samples(curve, b) for b in wl.batch_sizes])
    return State(wl, tx2nx, logn)


# --------------------------------------------------------------------------------------------
# Vectorised model (the same formulas as devicemodel, over the whole grid)
# --------------------------------------------------------------------------------------------


def grid(device: dm.Device, wl: dm.Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-sample time s, peak W, mean W), each [batch, freq], noise-free."""
    b = np.array(wl.batch_sizes, dtype=float)[:, None]
    f = np.array(device.freqs_mhz, dtype=float)[None, :]
    dvfs = np.array([dm.dvfs_factor(device, x) for x in device.freqs_mhz])[None, :]
    act = wl.act_floor + (1.0 - wl.act_floor) * b / (b + wl.act_half)
    mean = dm.base_power_w(device, wl) + wl.dyn_w * device.dyn_scale * act * dvfs
    pf = 1.05 + 0.05 * b / (b + 32.0)
    peak = mean * pf
    k = wl.occupancy_sharpness
    occ = (b**k + (wl.occupancy_batch * device.occupancy_scale) ** k) ** (1.0 / k)
    mem = wl.mem_frac * (1.0 + b / wl.mem_batch) / device.memory_speed
    comp = (1.0 - wl.mem_frac) * (dm.F_REF_MHZ / f) / device.compute_speed
    step = wl.fixed_s * device.fixed_scale + occ * wl.sample_s * (mem + comp)
    return step / b, peak, mean


def board_device(board: str, state: State) -> dm.Device:
    return dm.JETSON_NANO if board == "nano" else state.tx2nx


def _softmin_weights(score: np.ndarray, logfeas: np.ndarray, tau: float) -> np.ndarray:
    z = -score / tau + logfeas
    z = z - z.max()
    w = np.exp(z)
    return w / w.sum()


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def predict_cells(
    state: State,
    board: str,
    dataset: str,
    proxy: str,
    soft: tuple[float, float] | None,
) -> dict[tuple[float | None, str], float]:
    """Mean time (s) per (budget, method) on ``board`` for ``dataset``; hard rules if not soft."""
    dev = board_device(board, state)
    ts, peak, _ = grid(dev, state.workload)
    n_t = np.exp(state.log_n[dataset])
    n_p = np.exp(state.log_n[proxy])
    freqs = list(dev.freqs_mhz)
    out: dict[tuple[float | None, str], float] = {}
    for budget in BUDGETS:
        j = freqs.index(CAPS_MHZ[board][budget])
        out[(budget, "b1")] = float(ts[-1, j] * n_t[-1])
        if soft:
            w = _softmin_weights(np.log(n_p), np.zeros_like(n_p), soft[0])
            out[(budget, "b2")] = float(np.sum(w * ts[:, j] * n_t))
        else:
            i = int(np.argmin(n_p))
            out[(budget, "b2")] = float(ts[i, j] * n_t[i])
        cost = ts * n_t[:, None]
        for method, n in (("ours", n_p), ("oracle", n_t)):
            score = np.log(ts * n[:, None])
            if soft:
                if budget is None:
                    logfeas = np.zeros_like(score)
                else:
                    logfeas = _log_sigmoid((budget - peak) / soft[1])
                w = _softmin_weights(score, logfeas, soft[0])
                out[(budget, method)] = float(np.sum(w * cost))
            else:
                ok = np.ones_like(score, bool) if budget is None else peak <= budget
                if not ok.any():
                    out[(budget, method)] = math.inf
                    continue
                masked = np.where(ok, score, np.inf)
                i, jj = np.unravel_index(int(np.argmin(masked)), masked.shape)
                out[(budget, method)] = float(cost[i, jj])
    return out


def hard_choices(state: State, board: str, dataset: str, proxy: str) -> dict:
    """(b, f) each method picks under each budget (hard rules), for the report."""
    dev = board_device(board, state)
    ts, peak, _ = grid(dev, state.workload)
    bs, fs = list(state.workload.batch_sizes), list(dev.freqs_mhz)
    n_t, n_p = np.exp(state.log_n[dataset]), np.exp(state.log_n[proxy])
    out = {}
    for budget in BUDGETS:
        cap = CAPS_MHZ[board][budget]
        out[(budget, "b1")] = (bs[-1], cap)
        out[(budget, "b2")] = (bs[int(np.argmin(n_p))], cap)
        for method, n in (("ours", n_p), ("oracle", n_t)):
            ok = np.ones_like(ts, bool) if budget is None else peak <= budget
            masked = np.where(ok, ts * n[:, None], np.inf)
            i, j = np.unravel_index(int(np.argmin(masked)), masked.shape)
            out[(budget, method)] = (bs[i], fs[j])
    return out


# --------------------------------------------------------------------------------------------
# Residuals
# --------------------------------------------------------------------------------------------


def _hinge(x: float) -> float:
    """0 when the constraint holds (x <= 0), x otherwise."""
    return max(0.0, x)


def _cell_residuals(state, model, cells, soft) -> list[float]:
    res = []
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.board, c.dataset), []).append(c)
    proxy = DATASETS[model][0]
    for (board, ds), cs in groups.items():
        pred = predict_cells(state, board, ds, proxy, soft)
        have = {(c.budget_w, c.method): c for c in cs}
        for c in cs:
            res.append(W_CELL * math.log(pred[(c.budget_w, c.method)] / c.time_s))
        for budget in BUDGETS:
            ours = have.get((budget, "ours"))
            for ref in ("b1", "b2"):
                other = have.get((budget, ref))
                if ours and other:
                    p = math.log(pred[(budget, ref)] / pred[(budget, "ours")])
                    q = math.log(other.time_s / ours.time_s)
                    res.append(W_RATIO * (p - q))
    return res


def _power_residuals(state: State, model: str, lighter_than: dict[str, np.ndarray]) -> list[float]:
    """Caps, Fig. 1's feasibility and the model power order, as hinges in units of 10 mW."""
    res = []
    s = 0.01
    for board in ("nano", "tx2nx"):
        dev = board_device(board, state)
        _, peak, _ = grid(dev, state.workload)
        freqs = list(dev.freqs_mhz)
        for budget in (4.5, 7.0):
            j = freqs.index(CAPS_MHZ[board][budget])
            res.append(W_HINGE * _hinge((peak[:, j].max() - (budget - MARGIN_W)) / s))
            if model == "resnet18":  # the heaviest model sets the cap: one step up must not fit
                res.append(W_HINGE * _hinge(((budget + MARGIN_W) - peak[:, j + 1].max()) / s))
        heavy = lighter_than.get(board)
        if heavy is not None:
            gap = heavy[: peak.shape[0]] - peak  # lighter model's batches are a prefix
            res.append(W_HINGE * _hinge((MARGIN_W - gap.min()) / s))
    if model == "resnet18" and FIT_FIGURES:
        res += _fig_residuals(state)
    return res


def _fig_residuals(state: State) -> list[float]:
    """Fig. 1 (5 W, 31.9 %) and Fig. 2's flip on the Nano ResNet18 grid."""
    dev = dm.JETSON_NANO
    ts, peak, _ = grid(dev, state.workload)
    bs, fs = list(state.workload.batch_sizes), list(dev.freqs_mhz)
    i128, i64, i8, i32 = bs.index(128), bs.index(64), bs.index(8), bs.index(32)
    j307, j460 = fs.index(307.2), fs.index(460.8)
    s = 0.01
    res = [
        W_HINGE * _hinge((peak[i128, j307] - (5.0 - MARGIN_W)) / s),
        W_HINGE * _hinge(((5.0 + MARGIN_W) - peak[i128, j307 + 1]) / s),
        W_HINGE * _hinge((peak[i64, j460] - (5.0 - MARGIN_W)) / s),
        W_HINGE * _hinge(((5.0 + MARGIN_W) - peak[i64, j460 + 1]) / s),
    ]
    saving = 1.0 - ts[i64, j460] / ts[i128, j307]
    res.append(W_FIG1 * _hinge(abs(saving - dm.FIG1_SAVING) - 0.015) / 0.01)
    n8, n32 = dm.FIG2_N[8], dm.FIG2_N[32]
    for budget in (4.5, 5.0, 7.0):
        ok8 = np.nonzero(peak[i8] <= budget)[0]
        ok32 = np.nonzero(peak[i32] <= budget)[0]
        if not len(ok8) or not len(ok32):
            res.append(W_HINGE * 10)
            continue
        r = (ts[i32, ok32[-1]] * n32) / (ts[i8, ok8[-1]] * n8)  # TT(32) / TT(8)
        want_8 = budget < 7.0
        res.append(W_HINGE * _hinge(((1.005 - r) if want_8 else (r - 0.995)) / 0.01))
    return res


def figure_misses(state: State) -> float:
    """How far the Nano ResNet18 grid misses Fig. 1 and Fig. 2 (0 when both hold).

    Fig. 1: b=128 / b=64 top out at 307.2 / 460.8 MHz under 5 W (1 per miss) and the saving is
    within 2 points of 31.9 % (excess in points); Fig. 2: the winner under 4.5 / 5 / 7 W (1 per
    wrong winner). Used to choose between B2 hypotheses, which the tables alone leave close.
    """
    if state.workload.key != "resnet18":
        return 0.0
    ts, peak, _ = grid(dm.JETSON_NANO, state.workload)
    bs, fs = list(state.workload.batch_sizes), list(dm.JETSON_NANO.freqs_mhz)

    def top(b: int, budget: float) -> int | None:
        ok = np.nonzero(peak[bs.index(b)] <= budget)[0]
        return int(ok[-1]) if len(ok) else None

    miss = 0.0
    j128, j64 = top(128, 5.0), top(64, 5.0)
    miss += (j128 != fs.index(307.2)) + (j64 != fs.index(460.8))
    if j128 is not None and j64 is not None:
        saving = 1.0 - ts[bs.index(64), j64] / ts[bs.index(128), j128]
        miss += max(0.0, abs(saving - dm.FIG1_SAVING) - dm.FIG1_TOLERANCE) * 100
    for budget in (4.5, 5.0, 7.0):
        j8, j32 = top(8, budget), top(32, budget)
        if j8 is None or j32 is None:
            miss += 1
            continue
        tt8 = ts[bs.index(8), j8] * dm.FIG2_N[8]
        tt32 = ts[bs.index(32), j32] * dm.FIG2_N[32]
        miss += (tt8 < tt32) != (budget < 7.0)
    return float(miss)


def _prior_residuals(state: State, model: str, lay: Layout) -> list[float]:
    prior_wl = dm.PRIOR_WORKLOADS[model]
    res = []
    for name in WORKLOAD_FIELDS:
        a, b = getattr(state.workload, name), getattr(prior_wl, name)
        res.append(W_PRIOR * (_to_free(name, a) - _to_free(name, b)))
    if "tx2nx" in BOARDS_OF[model]:
        for name in DEVICE_FIELDS:
            a, b = getattr(state.tx2nx, name), getattr(dm.PRIOR_TX2NX, name)
            res.append(W_PRIOR * (_to_free(name, a) - _to_free(name, b)))
    # absolute scale: T_s and N_s_acc only appear as a product; hold the per-sample time at the
    # largest batch and full clock where the hand-set constants put it
    ts_fit, _, _ = grid(dm.JETSON_NANO, state.workload)
    ts_pri, _, _ = grid(dm.JETSON_NANO, prior_wl)
    res.append(W_SCALE * math.log(ts_fit[-1, -1] / ts_pri[-1, -1]) / 0.1)
    # efficiency: smooth in log b (second differences), ResNet18's grows with b, proxy near targets
    targets = DATASETS[model][1:]
    mean_shape = np.mean([state.log_n[d] - state.log_n[d].mean() for d in targets], axis=0)
    for ds in DATASETS[model]:
        ln = state.log_n[ds]
        res += list(W_SMOOTH * np.diff(ln, 2))
        if model == "resnet18":
            res += [W_HINGE * _hinge(-d / 0.01) for d in np.diff(ln)]
        if ds == DATASETS[model][0]:
            res += list(W_PROXY * ((ln - ln.mean()) - mean_shape))
    return res


def _b2_residuals(state: State, model: str, b2: int | None) -> list[float]:
    """Hold the proxy's most sample-efficient batch (B2's pick) at the hypothesis ``b2``."""
    if b2 is None:
        return []
    ln = state.log_n[DATASETS[model][0]]
    i = list(state.workload.batch_sizes).index(b2)
    return [W_HINGE * _hinge((ln[i] - ln[k] + 0.03) / 0.01) for k in range(ln.size) if k != i]


def residuals(
    lay: Layout,
    x: np.ndarray,
    cells: Sequence[Cell],
    tx2nx: dm.Device,
    lighter_than: dict[str, np.ndarray],
    soft: tuple[float, float],
    b2: int | None = None,
) -> np.ndarray:
    state = decode(lay, x, tx2nx)
    r = _cell_residuals(state, lay.model, cells, soft)
    r += _power_residuals(state, lay.model, lighter_than)
    r += _prior_residuals(state, lay.model, lay)
    r += _b2_residuals(state, lay.model, b2)
    return np.array(r)


# --------------------------------------------------------------------------------------------
# Solver
# --------------------------------------------------------------------------------------------


def levenberg_marquardt(
    fun: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, iters: int = 60, tol: float = 1e-7
) -> np.ndarray:
    """Minimise ``|fun(x)|^2`` by damped Gauss-Newton with a forward-difference Jacobian."""
    x = x0.astype(float).copy()
    r = fun(x)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(iters):
        h = 1e-6 * np.maximum(1.0, np.abs(x))
        jac = np.empty((r.size, x.size))
        for k in range(x.size):
            xk = x.copy()
            xk[k] += h[k]
            jac[:, k] = (fun(xk) - r) / h[k]
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        for _ in range(12):
            a = jtj + lam * (np.diag(np.diag(jtj)) + 1e-9 * np.eye(x.size))
            try:
                step = np.linalg.solve(a, -jtr)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            xn = x + step
            rn = fun(xn)
            cn = float(rn @ rn)
            if math.isfinite(cn) and cn < cost:
                done = cost - cn < tol * max(cost, 1e-12)
                x, r, cost = xn, rn, cn
                lam = max(lam / 3.0, 1e-9)
                improved = True
                break
            lam *= 4.0
        if not improved or done:
            break
    return x


@dataclass
class Fit:
    """The fitted states per model (the TX2 NX device comes from ResNet18's fit)."""

    states: dict[str, State]
    vectors: dict[str, np.ndarray]
    seconds: float


def _lighter_grids(states: dict[str, State], model: str, tx2nx: dm.Device) -> dict:
    heavy = LIGHTER.get(model)
    if heavy is None or heavy not in states:
        return {}
    st = states[heavy]
    return {
        board: grid(dev, st.workload)[1]
        for board, dev in (("nano", dm.JETSON_NANO), ("tx2nx", tx2nx))
    }


def fit_model(
    model: str,
    cells: Sequence[Cell],
    tx2nx: dm.Device,
    lighter_than: dict[str, np.ndarray],
    x0: np.ndarray | None = None,
    temperatures: Sequence[tuple[float, float]] = TEMPERATURES,
    iters: int = 40,
    b2: int | None = None,
) -> tuple[State, np.ndarray, float]:
    """Fit one model; ``b2`` fixes B2's batch (the proxy's argmin) as a hypothesis.

    Without ``b2`` every batch size is tried as B2's pick (a discrete choice that a soft minimum
    cannot move across reliably) and the hypothesis with the lowest cost wins.
    """
    lay = Layout.for_model(model)
    mine = [c for c in cells if c.model == model]
    if b2 is None and x0 is None:
        # judge each hypothesis by the hard rules the fleet applies, not by the soft objective
        best, best_cost = None, math.inf
        for cand in dm.WORKLOADS[model].batch_sizes:
            got = fit_model(model, cells, tx2nx, lighter_than, None, temperatures, iters, cand)
            hard = np.array(_cell_residuals(got[0], model, mine, None))
            cost = float(hard @ hard) + W_FIGURE_MISS * figure_misses(got[0])
            if cost < best_cost:
                best, best_cost = got, cost
        return best
    if x0 is None:
        init = initial_state(model, tx2nx)
        proxy = DATASETS[model][0]
        ln = init.log_n[proxy].copy()
        ln[list(init.workload.batch_sizes).index(b2)] = ln.min() - 0.05
        x = encode(lay, replace(init, log_n={**init.log_n, proxy: ln}))
    else:
        x = x0
    cost = math.inf
    for soft in temperatures:

        def fun(v: np.ndarray, soft: tuple[float, float] = soft) -> np.ndarray:
            return residuals(lay, v, mine, tx2nx, lighter_than, soft, b2)

        x = levenberg_marquardt(fun, x, iters)
        r = fun(x)
        cost = float(r @ r)
    return decode(lay, x, tx2nx), x, cost


def fit_all(cells: Sequence[Cell]) -> Fit:
    t0 = time.perf_counter()
    states, vectors = {}, {}
    tx2nx = dm.PRIOR_TX2NX
    for model in FIT_ORDER:
        st, x, _ = fit_model(model, cells, tx2nx, _lighter_grids(states, model, tx2nx))
        states[model], vectors[model] = st, x
        if model == "resnet18":
            tx2nx = st.tx2nx
    for model in FIT_ORDER:  # every model sees the TX2 NX ResNet18 fixed
        states[model] = replace(states[model], tx2nx=tx2nx)
    return Fit(states, vectors, time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# Evaluation: fitted and leave-one-out
# --------------------------------------------------------------------------------------------


def hard_predictions(fit: Fit, cells: Sequence[Cell]) -> dict[tuple, float]:
    out = {}
    for model, st in fit.states.items():
        proxy = DATASETS[model][0]
        for board in BOARDS_OF[model]:
            for ds in DATASETS[model][1:]:
                for (budget, method), v in predict_cells(st, board, ds, proxy, None).items():
                    out[(model, board, ds, budget, method)] = v
    return {c.key: out[c.key] for c in cells if c.key in out}


def ratio_errors(values: dict[tuple, float], cells: Sequence[Cell]) -> dict[tuple, float]:
    """Mean |ratio error| of B1/ours and B2/ours per (model, board, ref), values vs the paper."""
    paper = {c.key: c.time_s for c in cells}
    errs: dict[tuple, list[float]] = {}
    for c in cells:
        if c.method != "ours":
            continue
        for ref in ("b1", "b2"):
            k = (c.model, c.board, c.dataset, c.budget_w, ref)
            if k in paper and k in values and c.key in values:
                e = abs(values[k] / values[c.key] - paper[k] / paper[c.key])
                errs.setdefault((c.model, c.board, ref), []).append(e)
    return {k: float(np.mean(v)) for k, v in errs.items()}


def line_floor(x: Sequence[float], t: Sequence[float], w: Sequence[float]) -> float:
    """Least ``sum(w_k |a + c x_k - t_k|)`` over a, c >= 0: the weighted L1 distance of the
    points (x_k, t_k) from the nearest line with non-negative intercept and slope.

    A two-variable linear program: its optimum is a vertex, where two constraints are tight —
    the line passes through two points, or through one point with a = 0 or c = 0 — so trying
    every vertex is exact.
    """
    pts = list(zip(x, t, strict=True))
    cands: list[tuple[float, float]] = []
    for i, (xi, ti) in enumerate(pts):
        cands += [(ti, 0.0), (0.0, ti / xi)]
        for xj, tj in pts[i + 1 :]:
            if xi != xj:
                c = (tj - ti) / (xj - xi)
                cands.append((ti - c * xi, c))
    ok = [(a, c) for a, c in cands if a >= -1e-9 and c >= -1e-9]
    return min(
        sum(wk * abs(a + c * xk - tk) for xk, tk, wk in zip(x, t, w, strict=True)) for a, c in ok
    )


def baseline_floors(cells: Sequence[Cell]) -> dict[tuple, float]:
    """The least mean |ref/ours ratio error| any model of this class can reach, per (model,
    board, ref), with "ours" held at the paper's times.

    B1 and B2 each run one batch size at the baselines' clock caps, the same over the three
    budgets, and a step takes a part that follows the clock plus a part that does not, so a
    baseline's times over the budgets lie on ``t = a + c / f_cap`` with a, c >= 0. The ratio
    error of a cell is ``|t_model - t_paper| / ours``, so the least reachable error is the
    weighted L1 distance of the paper's column from that line (``line_floor``). A column that
    is not on such a line (Table 3's Dickens B2) sets a floor no fit can go under.
    """
    paper = {c.key: c.time_s for c in cells}
    sums: dict[tuple, list[float]] = {}
    for model, boards in BOARDS_OF.items():
        for board in boards:
            budgets = list(BUDGETS)
            x = [1.0 / CAPS_MHZ[board][b] for b in budgets]
            for ds in DATASETS[model][1:]:
                ours = [paper.get((model, board, ds, b, "ours")) for b in budgets]
                for ref in ("b1", "b2"):
                    t = [paper.get((model, board, ds, b, ref)) for b in budgets]
                    if None in ours or None in t:
                        continue
                    w = [1.0 / o for o in ours]
                    acc = sums.setdefault((model, board, ref), [0.0, 0.0])
                    acc[0] += line_floor(x, t, w)
                    acc[1] += len(budgets)
    return {k: total / n for k, (total, n) in sums.items()}


def leave_one_out(
    fit: Fit, cells: Sequence[Cell], progress: Callable[[int, int], None] | None = None
) -> dict[tuple, float]:
    """Each cell predicted by a refit (warm-started from the full fit) that did not see it.

    The TX2 NX scales and the heavier models' grids stay as in the full fit (a cell of one model
    moves only that model's constants), which keeps the pass to about a minute.
    """
    out = {}
    tx2nx = fit.states["resnet18"].tx2nx
    for k, cell in enumerate(cells):
        rest = [c for c in cells if c is not cell]
        lighter = _lighter_grids(fit.states, cell.model, tx2nx)
        st, _, _ = fit_model(
            cell.model,
            rest,
            tx2nx if cell.model != "resnet18" else dm.PRIOR_TX2NX,
            lighter,
            x0=_warm(fit, cell.model),
            temperatures=TEMPERATURES[-1:],
            iters=12,
        )
        pred = predict_cells(st, cell.board, cell.dataset, DATASETS[cell.model][0], None)
        out[cell.key] = pred[(cell.budget_w, cell.method)]
        if progress:
            progress(k + 1, len(cells))
    return out


def _warm(fit: Fit, model: str) -> np.ndarray:
    return fit.vectors[model].copy()


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def seed_spread(cells: Sequence[Cell]) -> dict[tuple[str, str], float]:
    """Seed-to-seed relative spread of each dataset: median std/mean of its oracle cells."""
    out: dict[tuple[str, str], list[float]] = {}
    for c in cells:
        if c.method == "oracle":
            out.setdefault((c.model, c.dataset), []).append(c.std_s / c.time_s)
    return {k: float(np.median(v)) for k, v in out.items()}


def calibration_dict(fit: Fit, cells: Sequence[Cell]) -> dict:
    """What devicemodel loads: fitted constants and per-batch samples-to-accuracy."""
    spread = seed_spread(cells)
    pred = hard_predictions(fit, cells)
    fitted_err = {
        _key_text(k): round(math.log(pred[k] / v), 6)
        for k, v in {c.key: c.time_s for c in cells}.items()
    }
    out: dict = {
        "about": (
            "Fitted by simulations/calibrate.py to every cell of the paper's Tables 2-4 "
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


def _key_text(key: tuple) -> str:
    return "|".join("none" if v is None else str(v) for v in key)


def _key_parse(text: str) -> tuple:
    model, board, ds, budget, method = text.split("|")
    return (model, board, ds, None if budget == "none" else float(budget), method)


def committed_fit() -> Fit:
    """The fit devicemodel loaded (simulations/calibration.json), as calibrate's states."""
    states = {}
    for model in FIT_ORDER:
        wl = dm.WORKLOADS[model]
        log_n = {
            ds: np.log(
                [
                    dm.samples_to_accuracy(dm.EFFICIENCY_CURVES[(model, ds)], b)
                    for b in wl.batch_sizes
                ]
            )
            for ds in DATASETS[model]
        }
        states[model] = State(wl, dm.JETSON_TX2NX, log_n)
    return Fit(states, {}, 0.0)


def committed_loo() -> dict[tuple, float] | None:
    """Leave-one-out predictions stored beside the fit, if the fit was run with ``--loo``."""
    if not CALIBRATION_PATH.exists():
        return None
    data = json.loads(CALIBRATION_PATH.read_text())
    loo = data.get("leave_one_out")
    return {_key_parse(k): v for k, v in loo.items()} if loo else None


def _fmt_budget(b: float | None) -> str:
    return "none" if b is None else f"{b:g} W"


def report_markdown(
    cells: Sequence[Cell],
    fitted: dict[tuple, float],
    loo: dict[tuple, float] | None,
    project: dict[tuple, float] | None = None,
    before: dict[tuple, float] | None = None,
) -> str:
    """Side-by-side table: every paper cell, the fit, leave-one-out and the project's value."""
    lines = [
        "## Calibration against the paper (every cell of Tables 2-4)",
        "",
        "`fit` is the calibrated model's noise-free prediction with the hard selection rules; "
        "`LOO` is the prediction of a refit that did not see the cell; `project` is what "
        "`powerfleet experiment paper` reports from the regenerated files (seed mean). "
        "Errors are relative (`fit/paper - 1`).",
        "",
    ]
    summary = _summary(cells, fitted, loo, project, before)
    lines += summary + [""]
    head = "| table | model | board | dataset | budget | method | paper (s) | fit (s) | fit err |"
    sep = "|---|---|---|---|---|---|---:|---:|---:|"
    if loo:
        head += " LOO (s) | LOO err |"
        sep += "---:|---:|"
    if project:
        head += " project (s) | project err |"
        sep += "---:|---:|"
    lines += [head, sep]
    for c in cells:
        f = fitted[c.key]
        row = (
            f"| {c.table} | {c.model} | {c.board} | {c.dataset} | {_fmt_budget(c.budget_w)} | "
            f"{c.method} | {c.time_s:.0f} | {f:.0f} | {f / c.time_s - 1:+.1%} |"
        )
        if loo:
            v = loo[c.key]
            row += f" {v:.0f} | {v / c.time_s - 1:+.1%} |"
        if project:
            v = project.get(c.key)
            row += f" {v:.0f} | {v / c.time_s - 1:+.1%} |" if v else " - | - |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _summary(cells, fitted, loo, project, before) -> list[str]:
    cols = [("fit", fitted)]
    if loo:
        cols.append(("LOO", loo))
    if project:
        cols.append(("project", project))
    if before:
        cols.insert(0, ("before", before))
    lines = [
        "Mean absolute error of the speed-up ratios (B1/ours, B2/ours) per model and board:",
        "",
        "| model | board | ratio | " + " | ".join(n for n, _ in cols) + " |",
        "|---|---|---|" + "---:|" * len(cols),
    ]
    errs = [ratio_errors(v, cells) for _, v in cols]
    floors = baseline_floors(cells)
    lines[2] += " floor |"
    lines[3] += "---:|"
    for key in sorted(errs[-1]):
        model, board, ref = key
        vals = " | ".join(f"{e.get(key, float('nan')):.3f}" for e in errs)
        lines.append(f"| {model} | {board} | {ref.upper()}/ours | {vals} | {floors[key]:.3f} |")
    lines += [
        "",
        "`floor`: the least error any model of this class can reach with ours as in the paper "
        "(`calibrate.baseline_floors`): a baseline runs one batch size at the clock caps, so its "
        "three times lie on t = a + c / f_cap (a, c >= 0); the floor is the paper column's "
        "distance from the nearest such line. Table 3's Dickens B2 column is far from one "
        "(4.5 W -> 7 W gains 1,337 s, 7 W -> none 5,074 s; one batch gains 3x more on the "
        "first step), which alone puts the transformer's B2/ours floor above the 0.10 goal. A fit "
        "can go under it only by moving ours off the paper: weighting the transformer's ratios "
        "up (x4 to x9) reaches 0.08-0.10, but only with Austen's and Dickens's b=4 needing a "
        "third of the samples Shakespeare's does, a proxy the paper's Fig. 6 says picks the "
        "targets' best configuration; the physical fit is kept.",
    ]
    lines += ["", "Relative error of the cell times (mean |err|, max |err|):", ""]
    for name, vals in cols:
        rel = [abs(vals[c.key] / c.time_s - 1) for c in cells if c.key in vals]
        lines.append(f"- {name}: mean {np.mean(rel):.1%}, max {np.max(rel):.1%}")
    return lines


def figures_markdown() -> str:
    """Where the fitted Nano ResNet18 profile leaves Fig. 1 and Fig. 2 (not fitted, reported)."""
    rows = dm.profile_rows(dm.JETSON_NANO, dm.WORKLOADS["resnet18"])
    f128, f64 = dm.highest_feasible(rows, 128, 5.0), dm.highest_feasible(rows, 64, 5.0)
    lines = [
        "### Fig. 1 and Fig. 2 under the fit",
        "",
        "Not fitted (`calibrate.FIT_FIGURES`): the table fit is checked against them afterwards. "
        "Forcing them in keeps every figure but raises the ResNet18 ratio errors to 0.12-0.16.",
        "",
        f"- Fig. 1 (5 W): b=128 tops out at {f128} MHz (paper 307.2), b=64 at {f64} MHz "
        "(paper 460.8)",
    ]
    if f128 and f64:
        saving = 1 - dm.per_sample_s(dm._row(rows, 64, f64)) / dm.per_sample_s(
            dm._row(rows, 128, f128)
        )
        lines[-1] += f"; b=64 saves {saving:.1%} of the time (paper 31.9 %)."
    for budget in (4.5, 5.0, 7.0):
        f8, f32 = dm.highest_feasible(rows, 8, budget), dm.highest_feasible(rows, 32, budget)
        t8 = dm.per_sample_s(dm._row(rows, 8, f8)) * dm.FIG2_N[8]
        t32 = dm.per_sample_s(dm._row(rows, 32, f32)) * dm.FIG2_N[32]
        win = 8 if t8 < t32 else 32
        want = 8 if budget < 7 else 32
        lines.append(
            f"- Fig. 2 at {budget:g} W: b=8 at {f8} MHz, b=32 at {f32} MHz; TT(32)/TT(8) = "
            f"{t32 / t8:.3f}, b={win} wins (paper: b={want})."
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.calibrate", description=__doc__)
    parser.add_argument("--out", default=str(CALIBRATION_PATH), help="calibration JSON")
    parser.add_argument("--loo", action="store_true", help="leave-one-out pass as well")
    parser.add_argument("--report", help="write the side-by-side Markdown table here")
    args = parser.parse_args(argv)
    cells = load_cells()
    fit = fit_all(cells)
    fitted = hard_predictions(fit, cells)
    data = calibration_dict(fit, cells)
    dm.atomic_write_text(Path(args.out), json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"fitted {len(cells)} cells in {fit.seconds:.1f} s -> {args.out}")
    loo = None
    if args.loo:
        t0 = time.perf_counter()
        loo = leave_one_out(fit, cells)
        seconds = time.perf_counter() - t0
        print(f"leave-one-out: {len(cells)} refits in {seconds:.1f} s")
        data["leave_one_out"] = {_key_text(k): v for k, v in loo.items()}
        data["leave_one_out_seconds"] = round(seconds, 1)
        dm.atomic_write_text(Path(args.out), json.dumps(data, indent=1, sort_keys=True) + "\n")
    text = report_markdown(cells, fitted, loo)
    if args.report:
        dm.atomic_write_text(Path(args.report), text)
    print("\n".join(_summary(cells, fitted, loo, None, None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
