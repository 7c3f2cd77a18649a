"""The device model vectorised over a whole (batch, frequency) grid, and each method's time on it.

The same formulas as :mod:`simulations.devicemodel.physics` (tests check they agree), noise-free
and in numpy so the fit can evaluate a state hundreds of times a second. B1, B2, ours and the
oracle choose on that grid: with a soft minimum during the fit (so least squares can move the
choice), with the fleet's hard rules for every number reported.
"""

from __future__ import annotations

import math

import numpy as np

from simulations.calibrate.paper import BUDGETS, CAPS_MHZ
from simulations.calibrate.params import State
from simulations.devicemodel.boards import JETSON_NANO, Device
from simulations.devicemodel.physics import F_REF_MHZ, base_power_w, dvfs_factor
from simulations.devicemodel.workloads import Workload


def grid(device: Device, wl: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-sample time s, peak W, mean W), each [batch, freq], noise-free."""
    b = np.array(wl.batch_sizes, dtype=float)[:, None]
    f = np.array(device.freqs_mhz, dtype=float)[None, :]
    dvfs = np.array([dvfs_factor(device, x) for x in device.freqs_mhz])[None, :]
    act = wl.act_floor + (1.0 - wl.act_floor) * b / (b + wl.act_half)
    mean = base_power_w(device, wl) + wl.dyn_w * device.dyn_scale * act * dvfs
    pf = 1.05 + 0.05 * b / (b + 32.0)
    peak = mean * pf
    k = wl.occupancy_sharpness
    occ = (b**k + (wl.occupancy_batch * device.occupancy_scale) ** k) ** (1.0 / k)
    mem = wl.mem_frac * (1.0 + b / wl.mem_batch) / device.memory_speed
    comp = (1.0 - wl.mem_frac) * (F_REF_MHZ / f) / device.compute_speed
    step = wl.fixed_s * device.fixed_scale + occ * wl.sample_s * (mem + comp)
    return step / b, peak, mean


def board_device(board: str, state: State) -> Device:
    return JETSON_NANO if board == "nano" else state.tx2nx


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
                row, col = np.unravel_index(int(np.argmin(masked)), masked.shape)
                out[(budget, method)] = float(cost[row, col])
    return out


def soft_pick(
    ts: np.ndarray, peak: np.ndarray, n: np.ndarray, budget: float | None, soft: tuple[float, float]
) -> np.ndarray:
    """Soft-minimum weights over the (batch, freq) grid of a choice made with efficiency ``n``
    under ``budget``: what :func:`predict_cells` averages for ours and the oracle."""
    score = np.log(ts * n[:, None])
    logfeas = np.zeros_like(score) if budget is None else _log_sigmoid((budget - peak) / soft[1])
    return _softmin_weights(score, logfeas, soft[0])


def hard_pick(ts: np.ndarray, peak: np.ndarray, n: np.ndarray, budget: float | None):
    """(batch index, freq index) of the hard choice with efficiency ``n``, or None."""
    ok = np.ones_like(ts, bool) if budget is None else peak <= budget
    if not ok.any():
        return None
    masked = np.where(ok, ts * n[:, None], np.inf)
    i, j = np.unravel_index(int(np.argmin(masked)), masked.shape)
    return int(i), int(j)


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
