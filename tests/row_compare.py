"""Rows compared the way a segmented round can promise them: numbers to 1e-9, the rest exact.

A segmented round adds a device's samples, time and energy segment by segment, so its totals
can differ from the one-request round's in the last bit (72377.00000000001 vs 72377.0); anything
larger, or any other difference (a status, a choice, a missing stretch), is a real one.
"""

from __future__ import annotations

import math


def diff(a: object, b: object, where: str = "row", rel: float = 1e-9) -> list[str]:
    """Every place where ``a`` and ``b`` differ beyond ``rel`` (numbers) or at all (the rest)."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool | type(None)):
        if not isinstance(b, bool) and math.isclose(a, b, rel_tol=rel, abs_tol=rel):
            return []
        return [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: missing on one side" for k in sorted(set(a) ^ set(b), key=str)]
        for k in a.keys() & b.keys():
            out += diff(a[k], b[k], f"{where}.{k}", rel)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} entries != {len(b)}"]
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in diff(x, y, f"{where}[{i}]", rel)]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]
