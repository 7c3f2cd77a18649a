"""Simulated accuracy is the trace's, and says so: ``accuracy_source`` and ``0.920 (trace)``.

Why: a replayed device stops exactly where its recorded trace reached the target, so its
accuracy is always the target; shown bare it reads as if measured. The row says where its
accuracy comes from (``measured`` | ``trace``), every table marks a trace's, and the fleet's
summary says whether its weighted accuracy is measured, the traces' or mixed.
"""

import csv
import json

from fleet.reports.markdown import _accuracy_note
from fleet.reports.report import device_table, fleet_totals
from tests.conftest import ROOT, run_cli


def test_a_replayed_fleet_says_its_accuracy_is_the_traces(tmp_path):
    run = tmp_path / "run"
    fleet = ROOT / "simulations" / "fleets" / "default.toml"
    r = run_cli("simulate", "--fleet", str(fleet), "--engine", "direct", "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    with open(run / "devices.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    trained = [row for row in rows if row["status"] == "ok"]
    assert trained and all(row["accuracy_source"] == "trace" for row in trained)
    # the target exactly: the replay stops there (the trace's accuracy, not a measurement)
    assert {row["accuracy"] for row in trained} == {"0.92"}
    assert all(row["accuracy_source"] == "" for row in rows if row["accuracy"] == "")
    report = json.loads((run / "report.json").read_text())
    assert report["fleet"]["accuracy_source"] == "trace"
    text = " ".join(r.stdout.split())  # the summary line may wrap at the terminal's width
    assert "0.920 (trace)" in text and "weighted accuracy 0.92 (trace)" in text


def test_tables_mark_only_a_traces_accuracy_and_the_fleet_says_mixed():
    rows = [
        {"device": "a", "status": "ok", "accuracy": 0.8, "accuracy_source": "trace",
         "samples": 100},
        {"device": "b", "status": "ok", "accuracy": 0.85, "accuracy_source": "measured",
         "samples": 300},
        {"device": "c", "status": "infeasible", "accuracy": None, "accuracy_source": None},
    ]  # fmt: skip
    headers, body = device_table(rows)
    col = headers.index("accuracy")
    assert [line[col] for line in body] == ["0.800 (trace)", "0.850", "—"]
    totals = fleet_totals(rows)
    assert totals["accuracy_source"] == "mixed"
    assert totals["accuracy_weighted"] == (0.8 * 100 + 0.85 * 300) / 400
    assert fleet_totals(rows[1:])["accuracy_source"] == "measured"
    assert fleet_totals(rows[2:])["accuracy_source"] is None
    assert "traces' accuracy" in _accuracy_note("trace") and _accuracy_note("measured") == ""
