"""The round report: one row per device plus fleet totals, as JSON and CSV in a run directory.

The columns are ``fleet.rounds.device_round.DeviceResult``'s fields (``row_columns``), baselines
included from their registry; this module writes the report, reads it back (``read_report``,
the only reader) and lays out the per-device table people see (``device_table``).

Each metric is aggregated the way it is used: energy adds up across the fleet, a round lasts
as long as its slowest device (max) while the median says how a typical device fared, accuracy
is weighted by the samples each device trained on. Devices that could not train (infeasible
budget) stay in the table with their reason; they do not count toward time or training energy.
Round energy (``fleet.planning.roundenergy``) adds what every device draws idle while it waits for
the round to end (a device that could not train waits the whole round): each row carries its
``idle_power_w`` and ``idle_wait_j``, the totals ``round_energy_j`` beside ``energy_j``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any, overload

from fleet.common.errors import InputError
from fleet.core.baselines import BASELINES, speedup_column
from fleet.method.profile_io import atomic_write_text
from fleet.planning.roundenergy import round_energy, round_totals
from fleet.rounds import statuses
from fleet.rounds.device_round import TRAINED, row_columns

#: What write_report adds to every row (after the device's own columns).
WAIT_COLUMNS = ("idle_power_w", "idle_wait_j")


def runner_row(row: dict[str, object]) -> dict[str, object]:
    """A report row as its runner reported it: without what write_report added (the waits)."""
    return {k: v for k, v in row.items() if k not in WAIT_COLUMNS}


def _finite(values: list[object]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def fleet_totals(rows: list[dict[str, object]]) -> dict[str, object]:
    ok = [r for r in rows if r.get("status") in TRAINED]  # late: trained, after the deadline
    times = _finite([r.get("time_s") for r in ok])
    energy = _finite([r.get("energy_j") for r in ok])
    acc_w = [
        (float(a), float(n) if isinstance(n := r.get("samples"), (int, float)) else 0.0)
        for r in ok
        if isinstance(a := r.get("accuracy"), (int, float))
    ]
    wsum = sum(w for _, w in acc_w)
    over = [r["device"] for r in ok if _over_budget(r)]
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    rnd = round_totals(rows)
    totals: dict[str, object] = {
        "devices": len(rows),
        "status_counts": statuses,
        "trained": len(ok),
        "energy_j": sum(energy),  # training only
        "idle_wait_j": rnd["idle_wait_j"],
        "round_energy_j": rnd["round_energy_j"],  # training + every device's idle waiting
        "idle_unknown": rnd["idle_unknown"],
        "round_time_s": max(times) if times else None,
        "median_time_s": statistics.median(times) if times else None,
        "accuracy_weighted": (sum(a * w for a, w in acc_w) / wsum) if wsum else None,
        "accuracy_source": _accuracy_source(ok),
        "samples": sum(_finite([r.get("samples") for r in ok])),
        "max_peak_power_w": max(_finite([r.get("peak_power_w") for r in ok]), default=None),
        "budget_violations": over,
    }
    for name in BASELINES:
        sp = _finite([r.get(speedup_column(name)) for r in ok])
        totals[f"median_{speedup_column(name)}"] = statistics.median(sp) if sp else None
    return totals


def _over_budget(r: dict[str, object]) -> bool:
    """Peak above the budget in force: per segment when the budget followed a schedule (a
    rising budget lets later segments draw more than the first budget)."""
    segments = r.get("segments")
    segments = segments if isinstance(segments, list) else []
    spans = [(g.get("peak_power_w"), g.get("budget_w")) for g in segments]
    spans = spans or [(r.get("peak_power_w"), r.get("budget_w"))]
    spent = r.get("over_budget_s")
    if isinstance(spent, (int, float)) and spent > 0:
        return True
    return any(
        isinstance(p, (int, float)) and isinstance(b, (int, float)) and p > b + 1e-9
        for p, b in spans
    )


@overload
def json_safe(obj: dict[str, Any]) -> dict[str, Any]: ...
@overload
def json_safe(obj: object) -> object: ...
def json_safe(obj: object) -> object:
    """NaN/inf become null (JSON has neither), recursively; a dict stays a dict."""
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
    """Write report.json (meta, devices, fleet) and devices.csv; return the report object.

    Each device row gains its idle power and idle waiting (``fleet.planning.roundenergy``)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    waits, _ = round_energy(rows)
    rows = [
        {**r, "idle_power_w": w["idle_power_w"], "idle_wait_j": w["idle_wait_j"]}
        for r, w in zip(rows, waits, strict=True)
    ]
    report = {**meta, "devices": rows, "fleet": fleet_totals(rows)}
    report = json_safe(report)
    atomic_write_text(str(run_dir / "report.json"), json.dumps(report, indent=2) + "\n")
    columns = row_columns() + list(WAIT_COLUMNS)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    atomic_write_text(str(run_dir / "devices.csv"), buf.getvalue())
    return report


def read_report(run_dir: str | Path, token: str | None = None) -> dict[str, object]:
    """The one reader of a run's report.json; every problem is one InputError naming the file.

    ``token``: the run token the writer stamped (``run_token``); a report from another run in
    the same directory is refused rather than mistaken for this one.
    """
    path = Path(run_dir) / "report.json"
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: not found (is {run_dir} a run directory?)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(report, dict):
        raise InputError(f"{path}: expected a JSON object (a powerfleet round report)")
    for key in ("devices", "fleet"):
        if key not in report:
            raise InputError(f"{path}: missing '{key}' (expected a powerfleet round report)")
    if token is not None and report.get("run_token") != token:
        raise InputError(f"{path} is from another run: this run did not finish its report")
    check_shape(path, report)
    return report


def check_shape(path: Path, report: dict[str, object]) -> None:
    """The fields every reader of a report relies on: ``devices`` a list of objects, each
    naming its device and one of ``statuses.FINAL``; ``fleet`` an object. Why here: a report
    edited by hand or cut short must be one line naming the field, not a traceback deep in
    the table code (or a table that says ``status None``)."""
    devices, fleet = report["devices"], report["fleet"]
    if not isinstance(fleet, dict):
        raise InputError(f"{path}: 'fleet' must be an object of fleet totals")
    if not isinstance(devices, list):
        raise InputError(f"{path}: 'devices' must be a list of device rows")
    for i, row in enumerate(devices):
        where = f"{path}: devices[{i}]"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected an object (a device's row)")
        if not isinstance(row.get("device"), str) or not row["device"]:
            raise InputError(f"{where}: 'device' must be the device's name")
        if row.get("status") not in statuses.FINAL:
            raise InputError(
                f"{where} ({row['device']}): 'status' {row.get('status')!r} is not one of "
                + ", ".join(statuses.FINAL)
            )


# ------------------------------------------------------------------------- the device table


def _num(v: object, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and math.isfinite(v) else "—"


def _budget(v: object) -> str:
    return "none" if v is None else f"{v:g} W"


def device_table(rows: list[dict[str, object]]) -> tuple[list[str], list[list[str]]]:
    """The round's per-device table for people: (headers, formatted cells).

    One renderer for every place that shows a round (the terminal after ``simulate``, the
    Markdown report); a baseline in the registry adds its "x <name>" column here and there.
    """
    headers = ["device", "type", "budget", "status", "b", "f (MHz)", "peak W", "time s"]
    headers += ["energy kJ", "idle wait kJ", "accuracy"] + [f"× {n.upper()}" for n in BASELINES]
    body = []
    for d in rows:
        body.append(
            [
                str(d.get("device")),
                str(d.get("device_type") or "—"),
                _budget(d.get("budget_w")),
                str(d.get("status")),
                _num(d.get("batch_size"), "d"),
                _num(d.get("freq_mhz"), "g"),
                _num(d.get("peak_power_w"), ".2f"),
                _num(d.get("time_s"), ",.0f"),
                _num(_kj(d.get("energy_j")), ".1f"),
                _num(_kj(d.get("idle_wait_j")), ".2f"),
                _accuracy(d),
                *(_num(d.get(speedup_column(n)), ".2f") for n in BASELINES),
            ]
        )
    return headers, body


def _accuracy_source(rows: list[dict[str, object]]) -> str | None:
    """Where the fleet's accuracy comes from: ``measured``, ``trace`` or ``mixed`` (None: no
    device has an accuracy)."""
    with_accuracy = [r for r in rows if r.get("accuracy") is not None]
    found = {str(r.get("accuracy_source") or "unknown") for r in with_accuracy}
    if not found:
        return None
    return found.pop() if len(found) == 1 else "mixed"


def _accuracy(d: dict[str, object]) -> str:
    """The accuracy cell; a replayed device's is its trace's (it stops where the trace reached
    the target), marked so it is never read as measured: ``0.800 (trace)``."""
    cell = _num(d.get("accuracy"), ".3f")
    if d.get("accuracy_source") == "trace" and d.get("accuracy") is not None:
        cell += " (trace)"
    return cell


def segment_table(rows: list[dict[str, object]]) -> tuple[list[str], list[list[str]]]:
    """One line per segment of every device whose run changed point mid-run: (headers, cells).

    The device table shows each device's first (b, f); a budget step, a guard step-down or a
    paused stretch starts a new segment, and only this table shows them. A device that ran
    one segment has nothing more to show (its row is its run), so a 1,000-device what-if
    without schedules adds no lines.
    """
    headers = ["device", "from s", "to s", "budget", "b", "f (MHz)", "energy kJ", "reason"]
    body = []
    for d in rows:
        segs = d.get("segments") or []
        if not isinstance(segs, list) or len(segs) < 2:
            continue
        for seg in segs:
            if not isinstance(seg, dict):
                continue
            b = seg.get("batch_size")
            body.append(
                [
                    str(d.get("device")),
                    _num(seg.get("start_s"), ",.1f"),
                    _num(seg.get("end_s"), ",.1f"),
                    _budget(seg.get("budget_w")),
                    _num(b, "d") if b is not None else "paused",
                    _num(seg.get("freq_mhz"), "g"),
                    _num(_kj(seg.get("energy_j")), ".3f"),
                    str(seg.get("reason") or ("budget" if seg is not segs[0] else "start")),
                ]
            )
    return headers, body


def _kj(v: object) -> float | None:
    return v / 1000 if isinstance(v, (int, float)) and math.isfinite(v) else None


def speedup_summary(fleet: dict[str, object]) -> str:
    """ "vs B1 1.23×, vs B2 1.10×": the fleet's median speed-up over every baseline."""
    parts = []
    for n in BASELINES:
        v = fleet.get(f"median_{speedup_column(n)}")
        parts.append(
            f"vs {n.upper()} {_num(v, '.2f')}×" if isinstance(v, float) else f"vs {n.upper()} —"
        )
    return ", ".join(parts)
