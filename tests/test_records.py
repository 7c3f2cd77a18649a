"""The kernel's typed records (``fleet/method/records.py``) and one meaning per field.

Every record round-trips (every field set, through JSON); a field a record does not know, a
missing one, a wrong type or another version is refused in one exact line; a real agent
subprocess answers through the records; and one run that changed its point mid-round names the
point chosen at the start and the point running at the end alike in the report, devices.csv,
state.json, ``powerfleet status`` and metrics.prom.
"""

from __future__ import annotations

import csv
import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from fleet.method.agent_records import RECORDS, TrainReply, TrainRequest
from fleet.method.record_base import Field
from fleet.method.records import Progress, Record, RecordError, ReportRow, Segment

ROOT = Path(__file__).resolve().parents[1]


def sample_value(record: type[Record], f: Field) -> object:
    """A value for ``f`` other than its default, within its bounds."""
    if record in (TrainReply, ReportRow) and f.name == "segments":
        return [sample(Segment), sample(Segment).replace(start_s=9.0, reason="guard")]
    if record is TrainReply and f.name == "progress":
        return sample(Progress)
    if f.kind == "int":
        return int(f.lo) + 3 if f.lo is not None else 7
    if f.kind == "float" or (record is Segment and f.name in ("samples", "energy_j")):
        lo = 0.0 if f.lo is None else f.lo
        hi = lo + 100.0 if f.hi is None else f.hi
        return lo + (hi - lo) / 4
    if f.kind == "bool":
        return True
    if f.kind == "list":
        return [[1, 0.5], [2, 0.75]]
    if f.kind == "dict":
        return {"ran": [[8, 1]], "k": "v"}
    return "x-" + f.name


def sample(record: type[Record]) -> Record:
    return record(**{f.name: sample_value(record, f) for f in record.FIELDS})


@pytest.mark.parametrize("record", [*RECORDS, ReportRow], ids=lambda r: r.NAME)
def test_every_record_round_trips_with_every_field_set(record: type[Record]) -> None:
    r = sample(record)
    for f in record.FIELDS:  # the sample sets every field, none at its default
        assert getattr(r, f.name) != f.default, f.name
    d = r.to_dict()
    assert ("version" in d) is record.TOP and d.get("version", record.VERSION) == record.VERSION
    back = record.from_dict(json.loads(json.dumps(d)), "wire")
    assert back == r and back.to_dict() == d
    assert [k for k in d if k != "version"] == [f.name for f in record.FIELDS]  # in order


@pytest.mark.parametrize(
    ("record", "data", "line"),
    [
        (
            Progress,
            {"time_s": 1.0, "batch_size": 8},
            "resume: unknown field 'batch_size' in progress v2 (closest: 'end_batch_size')",
        ),
        (
            TrainRequest,
            {"model": "small_cnn", "data": "d.pt", "budjet_w": 5},
            "resume: unknown field 'budjet_w' in train request v1 (closest: 'budget_w')",
        ),
        (
            TrainReply,
            {"status": "reached", "start_batch": 8},
            "resume: unknown field 'start_batch' in train reply v1 (closest: 'start_batch_size')",
        ),
        (
            Segment,
            {"begin_s": 0.0},
            "resume: unknown field 'begin_s' in segment v1 (closest: 'end_s')",
        ),
        (Progress, {"zzz": 1}, "resume: unknown field 'zzz' in progress v2"),  # nothing near
    ],
)
def test_an_unknown_field_is_refused_in_one_exact_line(record, data, line) -> None:
    with pytest.raises(RecordError) as err:
        record.from_dict(data, "resume")
    assert str(err.value) == line


@pytest.mark.parametrize(
    ("record", "data", "line"),
    [
        (TrainRequest, {"model": "small_cnn"}, "train: train request needs field 'data'"),
        (
            TrainRequest,
            {"model": "m", "data": "d", "lr_ref_batch": 16.5},
            "train: train request field 'lr_ref_batch' must be an integer, got float 16.5",
        ),
        (
            Progress,
            {"samples": "12"},
            "train: progress field 'samples' must be a number, got str '12'",
        ),
        (
            Progress,
            {"done": 1.5},
            "train: progress field 'done' must be in [0, 1], got 1.5",
        ),
        (Progress, {"segments": None}, "train: progress field 'segments' must not be null"),
        (
            TrainReply,
            {"status": True},
            "train: train reply field 'status' must be text, got bool True",
        ),
        (Progress, {"version": 1}, "train: progress version 1 is not this side's version 2"),
        (Segment, [1, 2], "train: segment must be an object, got list [1, 2]"),
        (
            TrainReply,
            {"status": "reached", "segments": [{"start_s": 0.0}, {"start_s": 1.0, "budgt_w": 4}]},
            "train: train reply field 'segments'[1]: unknown field 'budgt_w' in segment v1 "
            "(closest: 'budget_w')",
        ),
        (
            TrainReply,
            {"status": "reached", "progress": {"time_s": -1}},
            "train: train reply field 'progress': progress field 'time_s' must be in "
            "[0, 3.1536e+08], got -1.0",
        ),
    ],
)
def test_missing_wrong_and_foreign_fields_are_refused_in_one_exact_line(record, data, line):
    with pytest.raises(RecordError) as err:
        record.from_dict(data, "train")
    assert str(err.value) == line and "\n" not in line


def test_building_a_record_refuses_a_name_it_does_not_know() -> None:
    with pytest.raises(RecordError, match=r"^unknown field 'batch' in train request v1 "):
        TrainRequest(model="m", data="d", batch=8)
    with pytest.raises(RecordError, match="train request needs field 'data'"):
        TrainRequest(model="m")
    r = TrainRequest(model="m", data="d", lr_ref_batch=16, lr_ref=1e-3)
    assert r.args() == {"version": 1, "model": "m", "data": "d", "lr_ref_batch": 16, "lr_ref": 1e-3}
    assert Segment(0.0, 1.0, 5.0, 16, 921.6, 0.0, 1.0, None, "start").to_dict() == {
        "start_s": 0.0, "end_s": 1.0, "budget_w": 5.0, "batch_size": 16, "freq_mhz": 921.6,
        "samples": 0.0, "energy_j": 1.0, "peak_power_w": None, "reason": "start",
    }  # fmt: skip  # positional, in the report's segment order; ``done`` only when set
    assert math.isnan(Segment.from_dict({"energy_j": None}).energy_j)  # unknown energy: NaN


def test_the_report_row_is_the_kernels_record_and_a_reply_with_another_field_is_refused():
    """One list of a row's fields: the host's builder (``DeviceResult``) has exactly the
    kernel's ``ReportRow`` fields, in order (the baseline columns apart: the host's registry
    names them); a row the host writes reads back as the record; a device's reply row with a
    field the record does not know is refused in one line naming the closest."""
    from dataclasses import fields

    from clients.reply_check import check_row
    from fleet.common.errors import InputError
    from fleet.rounds.device_round import DeviceResult, baseline_columns

    host = [f.name for f in fields(DeviceResult) if f.name != "baseline_time_s"]
    assert host == list(ReportRow.names())
    res = DeviceResult(
        "nano-1", "jetson-nano", 5.0, "ok", batch_size=16, freq_mhz=921.6, predicted_time_s=40.0,
        end_batch_size=32, end_freq_mhz=614.4, time_s=44.0, energy_j=180.0, peak_power_w=4.9,
        mean_power_w=4.1, accuracy=0.81, accuracy_source="measured", samples=4000.0,
        baseline_time_s={"B1": 60.0},
    )  # fmt: skip
    res.segments = [
        Segment(0.0, 20.0, 5.0, 16, 921.6, 2000.0, 90.0, 4.9, "start"),
        Segment(20.0, 44.0, 4.0, 32, 614.4, 2000.0, 90.0, 3.9, "budget-change"),
    ]
    row = res.to_dict()
    cols = set(baseline_columns())
    back = ReportRow.from_dict({k: v for k, v in row.items() if k not in cols}, "row")
    assert back.segments == res.segments and back.end_batch_size == 32 and back.samples == 4000.0
    assert check_row(dict(row), "nano-1") == row
    with pytest.raises(InputError) as err:
        check_row(dict(row, energy=1.0), "nano-1")
    assert str(err.value) == (
        "device nano-1: unknown field 'energy' in report row v1 (closest: 'energy_j')"
    )
    with pytest.raises(InputError, match=r"field 'samples' must be in \[0, 1e\+15\], got -1.0"):
        check_row(dict(row, samples=-1.0), "nano-1")


# --------------------------------------------------------------------------- a real agent


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_real_agent_answers_through_the_records_and_the_row_names_both_points(tmp_path):
    """``python -m fleet.agent --backend replay``: a closed-loop train under "0:7,0.5:4"
    (paced: the 0.5 s step comes long before the run's 160 samples end) starts at
    16 @ 800 (7 W) and ends at 16 @ 400 (4 W); the hardware client's row says both, and its
    ``predicted_time_s`` is the start point's."""
    from clients import records
    from clients.agent_link import AgentError, AgentLink, AgentSettings
    from clients.hardware_client import run_on_agent
    from fleet.config.fleetfile import DeviceSpec, RunSettings
    from fleet.core.efficiency import Efficiency
    from fleet.method.budget import parse_schedule
    from tests.hardware_helpers import tiny_pt_data

    prof = tmp_path / "profile.csv"
    prof.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n"
        "16,400,0.1,3.5,3.2\n16,800,0.05,6.0,5.5\n"
    )
    data = tiny_pt_data(tmp_path / "data.pt")
    settings = AgentSettings(
        backend="replay", options={"profile_csv": str(prof)}, timeout_s=60,
        long_timeout_s=300, work_dir=str(tmp_path), pace_to_profile=True,
    )  # fmt: skip
    run = RunSettings(
        "rec", "small_cnn", "eff.csv", 1.0, lr_ref_batch=16, lr_ref=1e-3,
        max_samples=160,
        eval_every_samples=80,
    )  # fmt: skip
    ins = records.TrainInstruction(Efficiency({16: 3000.0}, source="eff.csv"), run)
    spec = DeviceSpec(
        "nano-1", "jetson-nano", 7.0, str(prof), str(data), parse_schedule("0:7,0.5:4")
    )
    reply: dict = {}
    with AgentLink(settings.argv(), timeout_s=60) as link:
        # the agent refuses, in the record's one line, a name it does not know ...
        base = {"model": "small_cnn", "data": str(data), "target_accuracy": 1.0}
        with pytest.raises(AgentError) as err:
            link.request("train", budjet_w=5, **base)
        assert err.value.reason == (
            "train: unknown field 'budjet_w' in train request v1 (closest: 'budget_w')"
        )
        with pytest.raises(AgentError) as err:  # every command's request is a record
            link.request("lock", freq=800.0)
        assert err.value.reason == (
            "lock: unknown field 'freq' in lock request v1 (closest: 'freq_mhz')"
        )
        # ... and a name that would mean something else here (the loop chooses the batch)
        with pytest.raises(AgentError) as err:
            link.request("train", budget_w=5, batch_size=16, lr=1e-3, **base)
        assert err.value.reason == (
            "a closed-loop train (a budget) takes 'lr_ref_batch', not 'batch_size'"
        )
        row = run_on_agent(link, spec, ins, settings, train_reply=reply)
    got = TrainReply.from_dict({k: v for k, v in reply.items() if k not in ("id", "ok")}, "r")
    assert isinstance(got.progress, Progress) and all(isinstance(s, Segment) for s in got.segments)
    assert (got.start_batch_size, got.start_freq_mhz) == (16, 800.0)
    assert (got.end_batch_size, got.end_freq_mhz) == (16, 400.0) == (
        got.progress.end_batch_size, got.progress.end_freq_mhz,
    )  # fmt: skip
    assert got.batch_size is None and got.lr is None  # no third meaning on the wire
    assert (got.lr_ref_batch, got.lr_ref) == (16, 1e-3)
    assert row["status"] == "not reached", row["message"]
    segs = row["segments"]
    assert [(s["batch_size"], s["freq_mhz"], s["budget_w"]) for s in segs] == [
        (16, 800.0, 7.0),
        (16, 400.0, 4.0),
    ]
    assert (row["batch_size"], row["freq_mhz"]) == (16, 800.0)  # the start point
    assert (row["end_batch_size"], row["end_freq_mhz"]) == (16, 400.0)  # the end point
    assert row["predicted_time_s"] == pytest.approx(0.05 / 16 * 3000)  # the start point's


# --------------------------------------------------------------------------- one run, five views


def test_one_run_names_its_start_and_end_points_alike_in_every_view(tmp_path) -> None:
    """The direct engine on a Nano whose budget drops 7 W -> 4.5 W at 3000 s: it starts at
    32 @ 844.8 and ends at 16 @ 537.6 (the profile's fastest points under each budget)."""
    from fleet.cli import main
    from fleet.config.fleetfile import load_fleet
    from fleet.reports.roundstate import read_state
    from simulations.runner import run_direct

    sim = ROOT / "simulations"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f"""[run]
name = "dusk"
model = "resnet18"
efficiency = "{sim / "efficiency" / "resnet18_cifar10-proxy.csv"}"
target_accuracy = 0.92

[[devices]]
name = "nano-dusk"
type = "jetson-nano"
budget_schedule = [[0, 7.0], [3000, 4.5]]
profile = "{sim / "profiles" / "nano_resnet18.csv"}"
data = "{sim / "efficiency" / "resnet18_svhn.csv"}"
"""
    )
    run_dir = tmp_path / "run"
    report = run_direct(load_fleet(str(fleet)), run_dir)
    start, end = (32, 844.8), (16, 537.6)
    names = ("batch_size", "freq_mhz", "end_batch_size", "end_freq_mhz")
    want = dict(zip(names, start + end, strict=True))

    row = json.loads((run_dir / "report.json").read_text())["devices"][0]
    assert row == report["devices"][0] and {k: row[k] for k in names} == want
    segs = row["segments"]
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"]) == start
    assert (segs[-1]["batch_size"], segs[-1]["freq_mhz"]) == end
    # the prediction is the start point's: its step time x the shipped samples at b=32
    assert row["predicted_time_s"] > 0 and row["time_s"] > row["predicted_time_s"]

    with open(run_dir / "devices.csv", newline="") as fh:
        csv_row = next(csv.DictReader(fh))
    assert {k: float(csv_row[k]) for k in names} == want

    state = read_state(run_dir)
    entry = state["devices"]["nano-dusk"]
    assert {k: entry["row"][k] for k in names} == want
    p = entry["progress"]
    assert (p["end_batch_size"], p["end_freq_mhz"]) == end and "batch_size" not in p

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["status", str(run_dir), "--json"]) == 0
    shown = json.loads(out.getvalue())["devices"]["nano-dusk"]
    assert {k: shown["row"][k] for k in names} == want
    assert (shown["progress"]["end_batch_size"], shown["progress"]["end_freq_mhz"]) == end
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["status", str(run_dir)]) == 0
    assert "32 @ 844.8 > 16 @ 537.6" in out.getvalue()

    prom = (run_dir / "metrics.prom").read_text()
    metrics = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in prom.splitlines()
        if line.startswith("powerfleet_device_") and 'device="nano-dusk"' in line
    }
    assert metrics["powerfleet_device_batch_size"] == 32
    assert metrics["powerfleet_device_gpu_frequency_hertz"] == pytest.approx(844.8e6)
    assert metrics["powerfleet_device_end_batch_size"] == 16
    assert metrics["powerfleet_device_end_gpu_frequency_hertz"] == pytest.approx(537.6e6)


def test_the_prediction_follows_the_start_point_the_row_names(tmp_path) -> None:
    """A board whose closed loop starts elsewhere than the host chose (here 16 @ 400 where the
    host chose 16 @ 800 under 7 W): the row's ``predicted_time_s`` is its start point's,
    step time / batch x the shipped samples, never the other point's."""
    from clients.train_exchange import predict_start
    from fleet.config.fleetfile import DeviceSpec, RunSettings
    from fleet.core.efficiency import Efficiency
    from fleet.core.profile import load_profile
    from fleet.rounds.device_round import run_device

    prof = tmp_path / "profile.csv"
    prof.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w\n"
        "16,400,0.1,3.5,3.2\n16,800,0.05,6.0,5.5\n"
    )

    class BoardStartsLow:
        learning = None
        truth = None  # no true efficiency: no baselines costed

        def run(self, rnd, res) -> None:
            assert (rnd.first.batch_size, rnd.first.freq_mhz) == (16, 800.0)
            res.batch_size, res.freq_mhz, res.status = 16, 400.0, "selected"
            predict_start(res, rnd)

    spec = DeviceSpec("nano-1", "jetson-nano", 7.0, str(prof), None)
    run = RunSettings("rec", "small_cnn", "eff.csv", 0.9)
    res = run_device(
        spec, load_profile(str(prof)), Efficiency({16: 3000.0}, source="e"), run, BoardStartsLow()
    )
    assert res.predicted_time_s == pytest.approx(0.1 / 16 * 3000)
    assert res.to_dict()["end_batch_size"] == 16 and res.to_dict()["end_freq_mhz"] == 400.0
