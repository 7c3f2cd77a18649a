"""The result table of a fleet run, one function for every way a run is started.

`powerfleet simulate` (either engine) prints it on the terminal; the ServerApp prints it into
Flower's log stream at the end of a `flwr run` (``strategies/flower_output.py``), so the two
paths end the same way.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fleet.cli.common import console, fmt
from fleet.reports.report import device_table, segment_table, speedup_summary


def show(report: dict[str, Any], out: Any = None) -> None:
    """Print a fleet run's report: the device table, the mid-run segments, the fleet totals,
    each device's message and where the report lies. ``out``: a rich Console (default: the
    command line's); the ServerApp passes a plain one, so `flwr run` ends with the same table."""
    out = console if out is None else out
    cols, rows = device_table(report["devices"])
    title = (
        f"{report['run']}: {len(rows)} devices, {report['model']}, target "
        f"{report['target_accuracy']:g}, engine {report['engine']}"
    )
    if len(rows) > 40:  # a what-if fleet: show the first rows, the totals tell the rest
        rows = rows[:20] + [["..."] + [""] * (len(cols) - 1)] + rows[-5:]
    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c, justify="left" if c in ("device", "type", "status") else "right")
    for r in rows:
        t.add_row(*r)
    out.print(t)
    seg_cols, seg_rows = segment_table(report["devices"])
    if seg_rows:  # the mid-run switches the device table cannot show
        st = Table(title="segments", title_justify="left")
        for c in seg_cols:
            st.add_column(c, justify="left" if c in ("device", "reason") else "right")
        for r in seg_rows[:60]:
            st.add_row(*r)
        out.print(st)
    f = report["fleet"]
    counts = ", ".join(f"{k}: {v}" for k, v in f["status_counts"].items())
    out.print(
        f"fleet: {f['devices']} devices ({counts}); training energy {fmt(f['energy_j'])} J, "
        f"round energy {fmt(f.get('round_energy_j'))} J (idle waiting included; "
        f"{f.get('idle_unknown', '?')} devices without idle power); round time "
        f"{fmt(f['round_time_s'])} s (median {fmt(f['median_time_s'])} s); weighted accuracy "
        f"{fmt(f['accuracy_weighted'])}"
        f"{' (trace)' if f.get('accuracy_source') == 'trace' else ''}; median speed-up "
        f"{speedup_summary(f)}; budget violations: {len(f['budget_violations'])}",
        highlight=False,
    )
    nodes: dict[str, int] = {}  # node -> devices that ran there (a Ray cluster's spread)
    for where in (report.get("ran_on") or {}).values():
        for node in where:
            nodes[node] = nodes.get(node, 0) + 1
    if len(nodes) > 1:
        spread = ", ".join(f"{node} ({k} devices)" for node, k in sorted(nodes.items()))
        console.print(f"ran on {len(nodes)} nodes: {spread}", highlight=False)
    if report.get("deadline_vs_time"):  # the deadline objective beside the time objective
        from fleet.reports.deadline_md import deadline_lines

        for line in deadline_lines(report["deadline_vs_time"], report.get("deadline_s")):
            out.print(line, highlight=False)
    for d in report["devices"]:
        if d.get("message"):  # why it failed, or what an ok row's numbers mean
            out.print(f"  {d['device']}: {d['status']}: {d['message']}", highlight=False)
    out.print(
        f"report: {report['run_dir']}/report.json, devices.csv ({report['wall_s']:.1f} s)",
        highlight=False,
    )
