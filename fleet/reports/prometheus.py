"""The round state as Prometheus text (exposition format 0.0.4), for dashboards and alerts.

Why text and not a server: the coordinator already rewrites ``state.json`` after every change;
writing ``metrics.prom`` beside it (node_exporter's textfile collector reads it) or printing it
(``powerfleet status --prometheus``) costs nothing and opens no port on the coordinator.

Base units as Prometheus names them (watts, joules, seconds, hertz, ratios 0..1), counters for
what only grows within a round (samples, energy, device seconds), one sample per device with
the labels ``run``, ``device`` and ``device_type``. A value that is not known (None: no power
reading yet, no accuracy before the first evaluation) is left out rather than written as NaN,
so an absent series means "unknown" and a graph never plots a made-up zero. The status is
one-hot over every status (``fleet.rounds.statuses.ALL``), so ``sum by (status)`` counts the
fleet and a status that nobody has yet still reads 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fleet.rounds import statuses

# (name, type, help, value from (device entry, its progress)); the order is the output's.
Getter = Callable[[dict[str, Any], dict[str, Any]], Any]
DEVICE_METRICS: list[tuple[str, str, str, Getter]] = [
    ("power_watts", "gauge", "power the device draws now", lambda e, p: p.get("power_w")),
    (
        "budget_watts",
        "gauge",
        "power budget in force on the device now",
        lambda e, p: p.get("budget_w") if p.get("budget_w") is not None else e.get("budget_w"),
    ),
    ("samples_total", "counter", "samples trained this round", lambda e, p: p.get("samples")),
    (
        "energy_joules_total",
        "counter",
        "energy spent training this round (measured on a board, profiled in replay)",
        lambda e, p: p.get("energy_j"),
    ),
    (
        "training_seconds_total",
        "counter",
        "training time this round on the device's own clock",
        lambda e, p: p.get("time_s"),
    ),
    (
        "eta_seconds",
        "gauge",
        "predicted device seconds still needed to reach the target",
        lambda e, p: p.get("eta_s"),
    ),
    (
        "batch_size",
        "gauge",
        "batch size the device chose at the round's start (the report row's batch_size)",
        lambda e, p: start_point(e).get("batch_size"),
    ),
    (
        "gpu_frequency_hertz",
        "gauge",
        "GPU clock the device chose at the round's start (the knob; a power-limited GPU's knob "
        "is in watts x 1e6)",
        lambda e, p: hertz(start_point(e).get("freq_mhz")),
    ),
    (
        "end_batch_size",
        "gauge",
        "batch size the device runs now, or ran at the end (the row's end_batch_size)",
        lambda e, p: p.get("end_batch_size"),
    ),
    (
        "end_gpu_frequency_hertz",
        "gauge",
        "GPU clock the device runs now, or ran at the end (the row's end_freq_mhz)",
        lambda e, p: hertz(p.get("end_freq_mhz")),
    ),
    ("accuracy", "gauge", "accuracy at the last evaluation", lambda e, p: p.get("accuracy")),
    ("done_ratio", "gauge", "fraction of the target's samples reached", lambda e, p: p.get("done")),
    ("segments_total", "counter", "segments run this round", lambda e, p: p.get("segments")),
    (
        "last_seen_timestamp_seconds",
        "gauge",
        "when the coordinator last heard from the device (Unix time)",
        lambda e, p: epoch(e.get("last_seen_utc")),
    ),
    (
        "lost_timestamp_seconds",
        "gauge",
        "when the device was declared lost (Unix time)",
        lambda e, p: epoch(e.get("lost_at_utc")),
    ),
]


def start_point(e: dict[str, Any]) -> dict[str, Any]:
    """The point a device chose at the round's start: its final row's, else the first point a
    segmented round's book kept (``strategies/round_book.py``); {} before it chose."""
    row = e.get("row")
    if isinstance(row, dict) and row.get("batch_size") is not None:
        return row
    first = e.get("first_point")
    return first if isinstance(first, dict) else {}


def hertz(mhz: Any) -> float | None:
    return None if not isinstance(mhz, (int, float)) else float(mhz) * 1e6


def epoch(stamp: str | None) -> float | None:
    """An ISO 8601 time as Unix seconds (None stays None; a time without a zone is UTC)."""
    if stamp is None:
        return None
    t = datetime.fromisoformat(stamp)
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text: backslash and newline escaped (quotes stay as they are)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: Any) -> str | None:
    """A sample value, or None to leave the sample out (unknown or not finite)."""
    if value is None:
        return None
    if type(value) is float:  # the common case first: 23 values x 1,000 devices a write
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    return repr(value) if math.isfinite(value) else None


def labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in pairs.items()) + "}"


STATUS_FAMILY = ("status", "gauge", "1 for the device's status, 0 otherwise")


def device_lines(run: str, e: dict[str, Any]) -> tuple[str | None, ...]:
    """One device's samples, one item per device family in output order (``DEVICE_METRICS``,
    then the status block): the line, or None where the value is unknown. Why per device: the
    incremental writer (``roundstate.Writer``) keeps these for each device and renders
    again only the devices whose entry changed; ``prometheus_text`` assembles them."""
    # the device's labels escaped once, not once per metric (1,000 devices x 23 families)
    i = (
        f'run="{escape_label(run)}",device="{escape_label(e["device"])}",'
        f'device_type="{escape_label(e["device_type"])}"'
    )
    p = e["progress"]
    out: list[str | None] = []
    for short, _, _, get in DEVICE_METRICS:
        v = number(get(e, p))
        out.append(None if v is None else f"powerfleet_device_{short}{{{i}}} {v}")
    status = e["status"]
    out.append(
        "\n".join(
            f'powerfleet_device_status{{{i},status="{escape_label(s)}"}} {int(status == s)}'
            for s in statuses.ALL
        )
    )
    return tuple(out)


def prometheus_text(
    state: dict[str, Any], devices: list[tuple[str | None, ...]] | None = None
) -> str:
    """Every metric of the round state, HELP and TYPE first, one sample per device.

    ``devices``: each device's ``device_lines`` in the state's order, when the caller kept
    them (the incremental writer); rendered here from the state otherwise."""
    run = str(state.get("run", ""))
    out: list[str] = []

    def family(name: str, kind: str, text: str, samples: list[tuple[str, Any]]) -> None:
        lines = [f"{name}{lab} {v}" for lab, raw in samples if (v := number(raw)) is not None]
        emit(name, kind, text, lines)

    def emit(name: str, kind: str, text: str, lines: list[str]) -> None:
        if not lines:
            return  # a family with no sample says nothing a scraper can use
        out.append(f"# HELP {name} {escape_help(text)}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)

    if devices is None:
        devices = [device_lines(run, e) for e in state.get("devices", {}).values()]
    families = [m[:3] for m in DEVICE_METRICS] + [STATUS_FAMILY]
    for k, (short, kind, text) in enumerate(families):
        lines = [d[k] for d in devices if d[k] is not None]
        emit(f"powerfleet_device_{short}", kind, text, lines)  # type: ignore[arg-type]
    r = labels({"run": run})
    plan = state.get("plan") or {}
    family("powerfleet_round", "gauge", "current round (1-based)", [(r, state.get("round"))])
    family("powerfleet_rounds_total", "gauge", "rounds in the run", [(r, state.get("rounds"))])
    family(
        "powerfleet_round_deadline_seconds",
        "gauge",
        "the round's planned deadline in device seconds",
        [(r, plan.get("deadline_s"))],
    )
    family(
        "powerfleet_plan_revisions_total",
        "counter",
        "times the round's plan was revised",
        [(r, len(plan.get("revisions") or []))],
    )
    family(
        "powerfleet_run_finished",
        "gauge",
        "1 once the run has finished",
        [(r, bool(state.get("finished")))],
    )
    status = statuses.run_status(state)
    family(
        "powerfleet_run_status",
        "gauge",
        "1 for the run's status (running, finished, interrupted: stopped before its end), 0 "
        "otherwise",
        [(labels({"run": run, "status": s}), int(s == status)) for s in statuses.RUN],
    )
    stop = state.get("interrupted") or {}
    family(
        "powerfleet_run_interrupted_timestamp_seconds",
        "gauge",
        "when the run stopped before its end (Unix time)",
        [(r, epoch(stop.get("at_utc")))],
    )
    family(
        "powerfleet_state_updated_timestamp_seconds",
        "gauge",
        "when the coordinator last wrote the round state (Unix time)",
        [(r, epoch(state.get("updated_utc")))],
    )
    return "\n".join(out) + "\n"
