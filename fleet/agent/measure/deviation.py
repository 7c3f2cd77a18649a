"""Carry measured deviations across a profile table (drift, verify-before-trust; issue 11).

A few re-measured points say how far the board has moved from its table; :func:`carry_deviation`
puts them in and scales every other row by the deviation interpolated from them (paper §4.1).
Separate from ``predict.py``: it does not fill a grid from probes, it corrects a full table
after the fact, and its callers are the board's drift refresh (``drift.py``) and the device
round's verification (``fleet/trust/verify.py``). Python 3.6, stdlib only.
"""

import math
from typing import Dict, List, Sequence, Tuple  # noqa: F401 - type comments

from fleet.agent.prediction.predict import QUANTITIES, Row, row_ok
from fleet.method.profile_io import MEASURED, PREDICTED, cell_number


def carry_deviation(
    rows: Sequence[Row], updates: Sequence[Row], power: float = 2.0, scale_measured: bool = True
) -> List[Row]:
    """Refresh a full table from a few re-measured points.

    Each row of ``updates`` (a measured profile row) replaces its grid point; every other
    ``ok`` row is scaled by the measured/old ratio of each column, interpolated from the
    updated points by inverse-distance weighting on log ratios over (batch-size rank, knob
    rank), so a deviation seen near a point moves it most (paper §4.1: "interpolating the
    deviations across operating points"). Scaled rows become ``source=predicted``: they are no
    longer what was measured there. Points of ``updates`` absent from ``rows`` are added.
    ``scale_measured=False`` leaves measured rows alone (verify-before-trust corrects only
    predictions; drift moves the whole table).
    """
    table = {}  # type: Dict[Tuple[int, float], Row]
    for r in rows:
        table[(int(float(r["batch_size"])), float(r["freq_mhz"]))] = dict(r)
    bs = sorted(set(k[0] for k in table) | set(int(float(u["batch_size"])) for u in updates))
    ks = sorted(set(k[1] for k in table) | set(float(u["freq_mhz"]) for u in updates))
    bpos = dict((b, i / max(len(bs) - 1, 1)) for i, b in enumerate(bs))
    kpos = dict((k, j / max(len(ks) - 1, 1)) for j, k in enumerate(ks))
    ratios = {}  # type: Dict[str, List[Tuple[float, float, float]]]
    new_keys = set()
    for u in updates:
        key = (int(float(u["batch_size"])), float(u["freq_mhz"]))
        new_keys.add(key)
        old = table.get(key)
        for q in QUANTITIES:
            now, before = (
                cell_number(u.get(q)),
                cell_number(old.get(q)) if old is not None else None,
            )
            if now is not None and before is not None and now > 0 and before > 0:
                ratios.setdefault(q, []).append(
                    (bpos[key[0]], kpos[key[1]], math.log(now / before))
                )
    if not scale_measured:  # measured rows are right: the deviation fades towards them
        for key, row in table.items():
            if key not in new_keys and row_ok(row) and row.get("source") != PREDICTED:
                for pts in ratios.values():
                    pts.append((bpos[key[0]], kpos[key[1]], 0.0))
    out = []
    for key in sorted(table):
        row = table[key]
        if key in new_keys or not row_ok(row):
            continue
        if not scale_measured and row.get("source") != PREDICTED:
            out.append(row)
            continue
        changed = False
        for q, pts in ratios.items():
            value = cell_number(row.get(q))
            if value is None:
                continue
            num = den = 0.0
            for pb, pk, lr in pts:
                w = 1.0 / ((bpos[key[0]] - pb) ** 2 + (kpos[key[1]] - pk) ** 2) ** (power / 2)
                num += w * lr
                den += w
            row[q] = value * math.exp(num / den)
            changed = True
        if changed:
            row["source"] = PREDICTED
        out.append(row)
    out.extend(table[k] for k in sorted(table) if k not in new_keys and not row_ok(table[k]))
    for u in updates:
        row = dict(u)
        if not row.get("source"):
            row["source"] = MEASURED
        out.append(row)
    out.sort(key=lambda r: (int(float(r["batch_size"])), float(r["freq_mhz"])))
    return out
