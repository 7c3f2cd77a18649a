"""The least-squares solver: damped Gauss-Newton (Levenberg-Marquardt) in plain numpy.

Generic (a residual function and a start), so the fit needs no SciPy and the numerics can be read
and tested apart from what is being fitted.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


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
