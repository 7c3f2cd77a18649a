"""The fit's objective: weighted residuals of a state against the paper, its caps and the priors.

Log-times of every cell and the B1/ours, B2/ours, ours/fastest ratios carry the fit, with the
choices the paper prints and Fig. 5/6 (:func:`choice_residuals`); the baselines' caps, the
models' power order, Fig. 1 and Fig. 2 and what the written profiles must keep (time falling
with the clock, the TX2 NX 1.5-2.5x the Nano, peaks clear of the budgets, read with the
profiles' keyed noise) enter as hinges; weak priors hold every constant near its hand-set
value. :func:`residuals` is the vector the solver squares; :func:`figure_misses` and
:func:`profile_misses` score the figures and profiles when choosing between B2 hypotheses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from simulations.calibrate.audit import ours_runs_baseline
from simulations.calibrate.paper import BOARDS_OF, BUDGETS, CAPS_MHZ, DATASETS, Cell
from simulations.calibrate.params import (
    DEVICE_FIELDS,
    WORKLOAD_FIELDS,
    Layout,
    State,
    decode,
    to_free,
)
from simulations.calibrate.predict import board_device, grid, predict_cells, soft_pick
from simulations.devicemodel.boards import JETSON_NANO, Device
from simulations.devicemodel.fitted import PRIOR_TX2NX, PRIOR_WORKLOADS, WORKLOADS
from simulations.devicemodel.noise import (
    DYN_POWER_NOISE,
    PEAK_POWER_NOISE,
    TIME_NOISE,
    unit_noise,
)
from simulations.devicemodel.paper_checks import FIG1_SAVING, FIG1_TOLERANCE, FIG2_N
from simulations.devicemodel.physics import base_power_w
from simulations.devicemodel.workloads import Workload

# Weights (per unit of residual). Log-times of the cells and the two speed-up ratios carry the
# fit; constraints are hinges measured in 10 mW or 1 %; priors are weak (0.08 per e-fold).
W_CELL = 1.0
W_RATIO = 6.0
W_HINGE = 5.0
W_PRIOR = 0.04
W_SCALE = 1.0
W_SMOOTH = 1.0
W_PROXY = 0.3
W_FIG1 = 3.0
#: ours/fastest (log) against the paper's, per cell: the paper's "ours" is at most 8.3 % over
#: its fastest and equal in 20 of 24 cells, which the cells' log-times alone let a fit trade
#: away for a few points of B1/B2 error (issue 21: up to 61.7 % before this term).
W_GAP = 15.0
#: Fig. 5 / Fig. 6: choosing with any one of the model's datasets' r costs 0 % extra on any
#: other (MobileNetV2 and the transformer on the Nano, the datasets this project has).
W_SENS = 3.0
SENSITIVITY_MODELS = ("mobilenetv2", "transformer")
#: Where the paper's ours repeats a baseline's cell, ours's soft weight on that (b, f) (-log).
W_CHOICE = 1.0
#: Clearance between a peak and a budget the calibration relies on (W).
MARGIN_W = 0.02
#: Whether Fig. 1 and Fig. 2 enter the fit as hinges (on ResNet18's Nano grid). They do: left
#: out, a fit weighted towards the tables' ratios and ours/fastest let Fig. 1's saving fall to
#: 26 % (paper 31.9 +- 2) and moved Fig. 2's flip below 4.5 W, i.e. it contradicted the two
#: figures the method is built on. The hinges cost nothing while they hold.
FIT_FIGURES = True
#: Relative step-time margin every profile keeps between adjacent clocks after its keyed noise
#: (so a written profile's time falls strictly with the clock, tests/test_devicemodel.py).
MONOTONE_MARGIN = 0.001
#: ResNet18's samples-to-accuracy rise with the batch by at least this much (log) per step.
EFFICIENCY_RISE = 0.002
#: Distance every written Nano ResNet18 peak keeps from a calibration budget (W): closer, "<"
#: and "<=" would choose differently (paper_checks.BUDGET_CLEARANCE_W, 0.005, plus room).
PEAK_CLEARANCE_W = 0.01
#: The TX2 NX's speed-up over the Nano under the same budget (paper Table 4 vs Table 2: about
#: 1.5-2.5x); the fit keeps it inside this band with a little room for the profiles' noise.
TX2NX_SPEEDUP = (1.53, 2.45)
#: Cost of one figure miss when choosing between B2 hypotheses (a cell off by e^1 costs 1).
W_FIGURE_MISS = 10.0


def _hinge(x: float) -> float:
    """0 when the constraint holds (x <= 0), x otherwise."""
    return max(0.0, x)


def cell_residuals(state, model, cells, soft) -> list[float]:
    """Log-time misses of every cell and of the B1/ours, B2/ours ratios (hard rules if not soft)."""
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
            oracle = have.get((budget, "oracle"))
            if ours and oracle:
                p = math.log(pred[(budget, "ours")] / pred[(budget, "oracle")])
                q = math.log(ours.time_s / oracle.time_s)
                res.append(W_GAP * (p - q))
    return res


def choice_residuals(state: State, model: str, cells: Sequence[Cell], soft) -> list[float]:
    """The choices the paper reports (:func:`.audit.ours_runs_baseline`) and Fig. 5/6's zeros.

    Where ours's cell repeats a baseline's (MobileNetV2's ours at 7 W and without a limit is B2
    at the top clock; the transformer's ours without a limit is B1's), ours's soft choice is
    pulled onto that (b, f). For the models of Fig. 5/6 every ordered pair of its datasets
    (choose with one's r, cost on the other's) should cost nothing over the other's own choice.
    """
    if soft is None:
        return []
    res = []
    proxy = DATASETS[model][0]
    runs = ours_runs_baseline(cells)
    for (m, board, _ds, budget), (method, at_budget) in runs.items():
        if m != model:
            continue
        dev = board_device(board, state)
        ts, peak, _ = grid(dev, state.workload)
        n_p = np.exp(state.log_n[proxy])
        i = len(n_p) - 1 if method == "b1" else int(np.argmin(n_p))
        j = list(dev.freqs_mhz).index(CAPS_MHZ[board][at_budget])
        w = soft_pick(ts, peak, n_p, budget, soft)
        res.append(W_CHOICE * -math.log(max(float(w[i, j]), 1e-12)))
    if model in SENSITIVITY_MODELS:
        ts, peak, _ = grid(JETSON_NANO, state.workload)
        n = {d: np.exp(state.log_n[d]) for d in DATASETS[model]}
        for budget in BUDGETS:
            picks = {d: soft_pick(ts, peak, n[d], budget, soft) for d in DATASETS[model]}
            for t in DATASETS[model]:
                cost = ts * n[t][:, None]
                best = float(np.sum(picks[t] * cost))
                for p in DATASETS[model]:
                    if p != t and p != proxy:  # proxy -> target is the ours/fastest cell
                        res.append(W_SENS * math.log(float(np.sum(picks[p] * cost)) / best))
    return res


def _power_residuals(
    state: State, model: str, lighter_than: dict[str, np.ndarray], figures: bool = True
) -> list[float]:
    """Caps and the model power order as hinges in units of 10 mW; with ``figures`` also Fig. 1
    and Fig. 2 and what the written profiles keep (:func:`_profile_residuals`)."""
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
    if not figures:
        return res
    if model == "resnet18" and FIT_FIGURES:
        res += _fig_residuals(state)
    res += _profile_residuals(state, model)
    return res


@functools.cache
def _time_noise(dev_key: str, wl_key: str, batches: tuple, freqs: tuple) -> np.ndarray:
    """The profile's keyed time-noise factors [batch, freq] (:mod:`.devicemodel.profiles`)."""
    return np.array(
        [
            [1.0 + TIME_NOISE * unit_noise(dev_key, wl_key, b, f, "t") for f in freqs]
            for b in batches
        ]
    )


@functools.cache
def _power_noise(dev_key: str, wl_key: str, batches: tuple, freqs: tuple) -> tuple:
    """The profile's keyed (dynamic, peak) power-noise factors [batch, freq]."""
    dyn = [
        [1.0 + DYN_POWER_NOISE * unit_noise(dev_key, wl_key, b, f, "dyn") for f in freqs]
        for b in batches
    ]
    peak = [
        [1.0 + PEAK_POWER_NOISE * unit_noise(dev_key, wl_key, b, f, "peak") for f in freqs]
        for b in batches
    ]
    return np.array(dyn), np.array(peak)


def _noisy_peaks(dev: Device, wl: Workload) -> np.ndarray:
    """Peak power [batch, freq] as the profile writes it: with its keyed noise."""
    _, peak, mean = grid(dev, wl)
    base = base_power_w(dev, wl)
    dyn, pk = _power_noise(dev.key, wl.key, tuple(wl.batch_sizes), tuple(dev.freqs_mhz))
    return (base + (mean - base) * dyn) * (peak / mean) * pk


def _noisy_log_times(dev: Device, wl: Workload) -> np.ndarray:
    """Log per-sample times [batch, freq] as the profile writes them: with its keyed noise."""
    ts, _, _ = grid(dev, wl)
    return np.log(ts * _time_noise(dev.key, wl.key, tuple(wl.batch_sizes), tuple(dev.freqs_mhz)))


def _best_per_sample(dev: Device, wl: Workload, budget: float | None) -> float:
    """Fastest per-sample time under ``budget`` (each batch at its top feasible clock)."""
    ts, peak, _ = grid(dev, wl)
    ok = np.ones_like(ts, bool) if budget is None else peak <= budget
    return float(np.where(ok, ts, np.inf).min())


def _profile_residuals(state: State, model: str) -> list[float]:
    """What the written profiles must keep, as hinges (1 % or 0.1 % units).

    Step time falls with every clock step after the profile's keyed noise (on both boards), and
    the TX2 NX is 1.5-2.5x faster than the Nano under the same budget (Tables 4 vs 2). The TX2
    NX's scales move only in ResNet18's fit, so that fit also holds the hand-set small CNN.
    """
    res = []
    workloads = [state.workload]
    if model == "resnet18":
        workloads.append(WORKLOADS["small_cnn"])
    for wl in workloads:
        for dev in (JETSON_NANO, state.tx2nx):
            lt = _noisy_log_times(dev, wl)
            rise = np.diff(lt, axis=1) + MONOTONE_MARGIN  # > 0: time rose with the clock
            res += list(W_HINGE * np.maximum(0.0, rise).ravel() / MONOTONE_MARGIN)
        lo, hi = TX2NX_SPEEDUP
        for budget in (4.5, 7.0, None):
            nano = _best_per_sample(JETSON_NANO, wl, budget)
            tx2 = _best_per_sample(state.tx2nx, wl, budget)
            if not (math.isfinite(nano) and math.isfinite(tx2)):
                continue
            speedup = math.log(nano / tx2)
            res.append(W_HINGE * _hinge((math.log(lo) - speedup) / 0.01))
            res.append(W_HINGE * _hinge((speedup - math.log(hi)) / 0.01))
    return res


def _fig_residuals(state: State) -> list[float]:
    """Fig. 1 (5 W, 31.9 %) and Fig. 2's flip on the Nano ResNet18 grid."""
    dev = JETSON_NANO
    _, peak, _ = grid(dev, state.workload)
    ts = np.exp(_noisy_log_times(dev, state.workload))  # the figures are read off the written rows
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
    noisy = _noisy_peaks(dev, state.workload)
    for budget in (4.5, 5.0, 7.0):
        near = PEAK_CLEARANCE_W - np.abs(noisy - budget)
        res += list(W_HINGE * np.maximum(0.0, near).ravel() / 0.01)
    saving = 1.0 - ts[i64, j460] / ts[i128, j307]
    res.append(W_FIG1 * _hinge(abs(saving - FIG1_SAVING) - 0.015) / 0.01)
    n8, n32 = FIG2_N[8], FIG2_N[32]
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


def profile_misses(state: State, model: str) -> float:
    """Squared size of the profile hinges (:func:`_profile_residuals`); 0 when all hold."""
    r = np.array(_profile_residuals(state, model))
    return float(r @ r)


def figure_misses(state: State) -> float:
    """How far the Nano ResNet18 grid misses Fig. 1 and Fig. 2 (0 when both hold).

    Fig. 1: b=128 / b=64 top out at 307.2 / 460.8 MHz under 5 W (1 per miss) and the saving is
    within 2 points of 31.9 % (excess in points); Fig. 2: the winner under 4.5 / 5 / 7 W (1 per
    wrong winner). Used to choose between B2 hypotheses, which the tables alone leave close.
    """
    if state.workload.key != "resnet18":
        return 0.0
    ts, peak, _ = grid(JETSON_NANO, state.workload)
    bs, fs = list(state.workload.batch_sizes), list(JETSON_NANO.freqs_mhz)

    def top(b: int, budget: float) -> int | None:
        ok = np.nonzero(peak[bs.index(b)] <= budget)[0]
        return int(ok[-1]) if len(ok) else None

    miss = 0.0
    j128, j64 = top(128, 5.0), top(64, 5.0)
    miss += (j128 != fs.index(307.2)) + (j64 != fs.index(460.8))
    if j128 is not None and j64 is not None:
        saving = 1.0 - ts[bs.index(64), j64] / ts[bs.index(128), j128]
        miss += max(0.0, abs(saving - FIG1_SAVING) - FIG1_TOLERANCE) * 100
    for budget in (4.5, 5.0, 7.0):
        j8, j32 = top(8, budget), top(32, budget)
        if j8 is None or j32 is None:
            miss += 1
            continue
        tt8 = ts[bs.index(8), j8] * FIG2_N[8]
        tt32 = ts[bs.index(32), j32] * FIG2_N[32]
        miss += (tt8 < tt32) != (budget < 7.0)
    return float(miss)


def _prior_residuals(state: State, model: str, lay: Layout) -> list[float]:
    prior_wl = PRIOR_WORKLOADS[model]
    res = []
    for name in WORKLOAD_FIELDS:
        a, b = getattr(state.workload, name), getattr(prior_wl, name)
        res.append(W_PRIOR * (to_free(name, a) - to_free(name, b)))
    if "tx2nx" in BOARDS_OF[model]:
        for name in DEVICE_FIELDS:
            a, b = getattr(state.tx2nx, name), getattr(PRIOR_TX2NX, name)
            res.append(W_PRIOR * (to_free(name, a) - to_free(name, b)))
    # absolute scale: T_s and N_s_acc only appear as a product; hold the per-sample time at the
    # largest batch and full clock where the hand-set constants put it
    ts_fit, _, _ = grid(JETSON_NANO, state.workload)
    ts_pri, _, _ = grid(JETSON_NANO, prior_wl)
    res.append(W_SCALE * math.log(ts_fit[-1, -1] / ts_pri[-1, -1]) / 0.1)
    # efficiency: smooth in log b (second differences), ResNet18's grows with b, proxy near targets
    targets = DATASETS[model][1:]
    mean_shape = np.mean([state.log_n[d] - state.log_n[d].mean() for d in targets], axis=0)
    for ds in DATASETS[model]:
        ln = state.log_n[ds]
        res += list(W_SMOOTH * np.diff(ln, 2))
        if model == "resnet18":  # with room for the files' rounding (tests/test_devicemodel.py)
            res += [W_HINGE * _hinge((EFFICIENCY_RISE - d) / 0.01) for d in np.diff(ln)]
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
    tx2nx: Device,
    lighter_than: dict[str, np.ndarray],
    soft: tuple[float, float],
    b2: int | None = None,
    figures: bool = True,
) -> np.ndarray:
    """The vector the solver squares; ``figures=False`` leaves out the figures' and profiles'
    hinges (the first leg of :func:`.fit.fit_model`'s continuation)."""
    state = decode(lay, x, tx2nx)
    r = cell_residuals(state, lay.model, cells, soft)
    r += _power_residuals(state, lay.model, lighter_than, figures)
    r += _prior_residuals(state, lay.model, lay)
    r += _b2_residuals(state, lay.model, b2)
    r += choice_residuals(state, lay.model, cells, soft)
    return np.array(r)
