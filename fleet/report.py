"""The round report: one row per device plus fleet totals, as JSON and CSV in a run directory.

Each metric is aggregated the way it is used: energy adds up across the fleet, a round lasts
as long as its slowest device (max) while the median says how a typical device fared, accuracy
is weighted by the samples each device trained on. Devices that could not train (infeasible
budget) stay in the table with their reason; they do not count toward time or energy.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from fleet.agent.profile_io import atomic_write_text

ROW_COLUMNS = [
    "device",
    "device_type",
    "budget_w",
    "status",
    "batch_size",
    "freq_mhz",
    "predicted_time_s",
    "time_s",
    "energy_j",
    "peak_power_w",
    "mean_power_w",
    "accuracy",
    "samples",
    "b1_time_s",
    "b2_time_s",
    "speedup_vs_b1",
    "speedup_vs_b2",
    "profile",
    "efficiency",
    "learning",
    "message",
]


def _finite(values: list[object]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def fleet_totals(rows: list[dict[str, object]]) -> dict[str, object]:
    ok = [r for r in rows if r.get("status") in ("ok", "late")]  # late: trained, after deadline
    times = _finite([r.get("time_s") for r in ok])
    energy = _finite([r.get("energy_j") for r in ok])
    acc_w = [
        (float(r["accuracy"]), float(r.get("samples") or 0.0))
        for r in ok
        if isinstance(r.get("accuracy"), (int, float))
    ]
    wsum = sum(w for _, w in acc_w)
    over = [r["device"] for r in ok if _over_budget(r)]
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    sp1 = _finite([r.get("speedup_vs_b1") for r in ok])
    sp2 = _finite([r.get("speedup_vs_b2") for r in ok])
    return {
        "devices": len(rows),
        "status_counts": statuses,
        "trained": len(ok),
        "energy_j": sum(energy),
        "round_time_s": max(times) if times else None,
        "median_time_s": statistics.median(times) if times else None,
        "accuracy_weighted": (sum(a * w for a, w in acc_w) / wsum) if wsum else None,
        "samples": sum(_finite([r.get("samples") for r in ok])),
        "max_peak_power_w": max(_finite([r.get("peak_power_w") for r in ok]), default=None),
        "budget_violations": over,
        "median_speedup_vs_b1": statistics.median(sp1) if sp1 else None,
        "median_speedup_vs_b2": statistics.median(sp2) if sp2 else None,
    }


def _over_budget(r: dict[str, object]) -> bool:
    """Peak above the budget in force: per segment when the budget followed a schedule (a
    rising budget lets later segments draw more than the first budget)."""
    spans = [(g.get("peak_power_w"), g.get("budget_w")) for g in r.get("segments") or []]
    spans = spans or [(r.get("peak_power_w"), r.get("budget_w"))]  # type: ignore[list-item]
    return any(
        isinstance(p, (int, float)) and isinstance(b, (int, float)) and p > b + 1e-9
        for p, b in spans
    )


def json_safe(obj: object) -> object:
    """NaN/inf become null (JSON has neither), recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_report(
    run_dir: str | Path, rows: list[dict[str, object]], meta: dict[str, object]
) -> dict[str, object]:
    """Write report.json (meta, devices, fleet) and devices.csv; return the report object."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    report = {**meta, "devices": rows, "fleet": fleet_totals(rows)}
    report = json_safe(report)  # type: ignore[assignment]
    atomic_write_text(str(run_dir / "report.json"), json.dumps(report, indent=2) + "\n")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROW_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in ROW_COLUMNS})
    atomic_write_text(str(run_dir / "devices.csv"), buf.getvalue())
    return report  # type: ignore[return-value]


def read_report(run_dir: str | Path) -> dict[str, object]:
    return json.loads((Path(run_dir) / "report.json").read_text())
