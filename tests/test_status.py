"""The round state (state.json, metrics.prom) and `powerfleet status`, as a user meets them:
real files in a run directory, the CLI as a subprocess, the text parsed back."""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime

import pytest

from fleet.common.errors import InputError
from fleet.reports import roundstate as rs
from fleet.reports.prometheus import prometheus_text
from fleet.rounds import statuses

HANG_GUARD_S = 120  # only so a broken --follow cannot hang the suite; never a verdict on speed


def build_state() -> dict:
    """Three devices: one training, one pending, one lost; round 2 of 3, one plan revision."""
    s = rs.new_state(
        "demo",
        "fleet.toml",
        "ab" * 32,
        "flower",
        "tok-1",
        3,
        600.0,
        [("nano-1", "jetson-nano", 5.0), ("tx2-1", "jetson-tx2nx", None), ("orin-1", "x", 7.5)],
    )
    s["round"] = 2
    s["plan"]["deadline_s"] = 3600.0
    s["plan"]["revisions"].append(
        {
            "at_utc": "2026-01-02T03:04:05+00:00",
            "round_time_s": 3500.0,
            "deadline_s": 3600.0,
            "previous_s": None,
            "reason": "planned",
        }
    )
    nano = s["devices"]["nano-1"]
    nano.update(status="running", node_id=17, last_seen_utc="2026-01-02T03:10:00.250+00:00")
    # the point it chose at the round's start (the segmented book keeps it), not the one now
    nano["first_point"] = {"batch_size": 64, "freq_mhz": 1300.5, "predicted_time_s": 3000.0}
    nano["progress"].update(
        time_s=1234.5,
        samples=40960.0,
        energy_j=5000.0,
        accuracy=0.71,
        end_batch_size=32,
        end_freq_mhz=921.6,
        power_w=4.3,
        done=0.42,
        eta_s=1800.0,
        segments=3,
    )
    lost = s["devices"]["orin-1"]
    lost.update(
        status="lost",
        last_seen_utc="2026-01-02T03:05:00+00:00",
        lost_at_utc="2026-01-02T03:09:00+00:00",
        message="no reply for 3 segments",
    )
    lost["progress"].update(time_s=300.0, samples=1000.0, energy_j=2000.0, done=0.1)
    s["completed_rounds"].append({"round": 1, "totals": {"devices": 3, "energy_j": 1.5}})
    return s


# ----------------------------------------------------------------------- write and read back


def test_write_then_read_back_and_no_temp_left(tmp_path):
    state = build_state()
    rs.write_state(tmp_path, state)
    assert sorted(os.listdir(tmp_path)) == ["metrics.prom", "state.json"]  # no temp file
    got = rs.read_state(tmp_path)
    assert got == json.loads(json.dumps(state))
    assert got["devices"]["nano-1"]["progress"]["samples"] == 40960.0
    # readable by a collector running as another user
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "metrics.prom").read_text() == prometheus_text(got)
    # updated_utc is stamped at every write, never earlier than the start
    assert datetime.fromisoformat(got["updated_utc"]) >= datetime.fromisoformat(got["started_utc"])


def test_a_refused_state_is_never_written_and_the_old_one_stays(tmp_path):
    state = build_state()
    rs.write_state(tmp_path, state)
    before = (tmp_path / "state.json").read_bytes()
    state["devices"]["nano-1"]["status"] = "sleeping"
    with pytest.raises(InputError, match=r"devices\.nano-1\.status: 'sleeping' is not one of"):
        rs.write_state(tmp_path, state)
    assert (tmp_path / "state.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["metrics.prom", "state.json"]


def test_the_callers_dicts_stay_live_across_writes(tmp_path):
    """The coordinator keeps references into the state and mutates them between writes."""
    state = build_state()
    entry = state["devices"]["tx2-1"]
    rs.write_state(tmp_path, state)
    entry["status"] = "running"
    entry["progress"]["samples"] = 123.0
    rs.write_state(tmp_path, state)
    got = rs.read_state(tmp_path)["devices"]["tx2-1"]
    assert (got["status"], got["progress"]["samples"]) == ("running", 123.0)


def test_non_finite_numbers_are_written_as_null_in_a_copy(tmp_path):
    state = build_state()
    row = {"device": "tx2-1", "status": "error", "time_s": float("nan"), "energy_j": math.inf}
    rs.record_row(state, row)
    rs.write_state(tmp_path, state)
    text = (tmp_path / "state.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    got = rs.read_state(tmp_path)["devices"]["tx2-1"]
    assert got["row"]["time_s"] is None and got["row"]["energy_j"] is None
    assert got["progress"]["time_s"] == 0.0  # progress keeps its default for a refused value
    assert math.isnan(state["devices"]["tx2-1"]["row"]["time_s"])  # the caller's dict as it was


def test_record_row_makes_a_finished_device():
    state = build_state()
    row = {
        "device": "tx2-1",
        "status": "ok",
        "time_s": 100.0,
        "samples": 5000.0,
        "energy_j": 450.0,
        "accuracy": 0.9,
        "batch_size": 32,  # chosen at the start
        "freq_mhz": 921.6,
        "end_batch_size": 16,  # running at the end: what its final progress says
        "end_freq_mhz": 1300.5,
        "budget_w": None,
        "mean_power_w": 4.5,
        "segments": [{}, {}],
        "message": "",
    }
    rs.record_row(state, row, "2026-01-02T04:00:00+00:00")
    e = state["devices"]["tx2-1"]
    assert e["status"] == "ok" and e["row"] == row
    p = e["progress"]
    assert (p["time_s"], p["samples"], p["energy_j"], p["power_w"]) == (100.0, 5000.0, 450.0, 4.5)
    assert (p["end_batch_size"], p["end_freq_mhz"], p["done"], p["eta_s"], p["segments"]) == (
        16,
        1300.5,
        1.0,
        0.0,
        2,
    )
    rs.check_state(state, "x")


def test_missing_directory_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such directory"):
        rs.read_state(tmp_path / "nope")
    with pytest.raises(InputError) as exc:
        rs.read_state(tmp_path)
    assert str(exc.value) == (
        f"{tmp_path / 'state.json'} not found: is this a powerfleet run directory?"
    )


def test_torn_and_garbage_files_are_one_line(tmp_path):
    rs.write_state(tmp_path, build_state())
    whole = (tmp_path / "state.json").read_bytes()
    for bad in (whole[: len(whole) // 2], b"\x00\xff garbage", b"", b"[1, 2]"):
        (tmp_path / "state.json").write_bytes(bad)
        with pytest.raises(InputError) as exc:
            rs.read_state(tmp_path)
        msg = str(exc.value)
        assert "\n" not in msg and str(tmp_path / "state.json") in msg


def _set(path: str, value):
    def apply(s: dict) -> None:
        *head, last = path.split("/")
        for k in head:
            s = s[int(k)] if isinstance(s, list) else s[k]
        if value is KeyError:
            del s[last]
        else:
            s[last] = value

    return apply


@pytest.mark.parametrize(
    "change, field",
    [
        (_set("version", 2), "version"),
        (_set("version", True), "version"),
        (_set("format", "something-else"), "format"),
        (_set("finished", "yes"), "finished"),
        (_set("round", 4), "round"),
        (_set("rounds", 0), "rounds"),
        (_set("segment_s", -1), "segment_s"),
        (_set("run", KeyError), "run"),
        (_set("updated_utc", "yesterday"), "updated_utc"),
        (_set("plan/deadline_s", "soon"), "plan.deadline_s"),
        (_set("plan/revisions/0/reason", 3), r"plan.revisions\[0\].reason"),
        (_set("devices/nano-1/device", "other"), "devices.nano-1.device"),
        (_set("devices/nano-1/status", "asleep"), "devices.nano-1.status"),
        (_set("devices/nano-1/node_id", 1.5), "devices.nano-1.node_id"),
        (_set("devices/nano-1/progress/samples", -5), "nano-1.progress: progress field .samples."),
        (_set("devices/nano-1/progress/bogus", 1), "devices.nano-1.progress"),
        (_set("devices/orin-1/lost_at_utc", 5), "devices.orin-1.lost_at_utc"),
        (_set("devices/tx2-1/row", []), "devices.tx2-1.row"),
        (_set("completed_rounds/0/totals", None), r"completed_rounds\[0\].totals"),
    ],
)
def test_each_wrong_field_is_named(tmp_path, change, field):
    state = json.loads(json.dumps(build_state()))
    change(state)
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(InputError) as exc:
        rs.read_state(tmp_path)
    msg = str(exc.value)
    assert msg.startswith(str(tmp_path / "state.json") + ": ")
    assert re.search(field, msg), msg
    assert "\n" not in msg


def test_fleet_sha256_is_the_files_digest(tmp_path):
    import hashlib

    f = tmp_path / "fleet.toml"
    f.write_bytes(b"[run]\nname = 'x'\n" * 100000)
    assert rs.fleet_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()


def test_remove_stale_temps(tmp_path):
    rs.write_state(tmp_path, build_state())
    (tmp_path / ".state.json.tmp-abc.part").write_text("half")
    (tmp_path / "keep.txt").write_text("x")
    assert rs.remove_stale_temps(tmp_path) == [".state.json.tmp-abc.part"]
    assert sorted(os.listdir(tmp_path)) == ["keep.txt", "metrics.prom", "state.json"]


# ----------------------------------------------------------------------------- prometheus

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_prometheus(text: str) -> tuple[dict, dict]:
    """The text format read back: ({name: type}, {(name, frozenset(labels)): value}).

    Written for the test (prometheus_client is not installed here): HELP before TYPE before
    the samples of each family, every sample of a TYPE'd family, escapes undone."""
    types, helps, samples = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split(" ", 3)[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helps and name not in types, line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, _, raw_labels, value = m.groups()
        assert name in types, f"sample before its TYPE: {line!r}"
        labels = {}
        pos = 0
        while raw_labels and pos < len(raw_labels):
            lm = LABEL.match(raw_labels, pos)
            assert lm, f"bad labels in {line!r}"
            labels[lm.group(1)] = re.sub(
                r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group(2)
            )
            pos = lm.end()
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return types, samples


def _dev(name: str, dtype: str, run: str = "demo", **extra: str) -> frozenset:
    return frozenset({"run": run, "device": name, "device_type": dtype, **extra}.items())


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_prometheus_text_parses_back_to_the_state():
    state = build_state()
    state["devices"]["tx2-1"]["device_type"] = 'odd "type" \\ with\nnewline'
    odd = state["devices"]["tx2-1"]["device_type"]
    types, got = parse_prometheus(prometheus_text(state))
    nano = _dev("nano-1", "jetson-nano")
    expect = {
        "powerfleet_device_power_watts": 4.3,
        "powerfleet_device_budget_watts": 5.0,
        "powerfleet_device_samples_total": 40960.0,
        "powerfleet_device_energy_joules_total": 5000.0,
        "powerfleet_device_training_seconds_total": 1234.5,
        "powerfleet_device_eta_seconds": 1800.0,
        "powerfleet_device_batch_size": 64.0,  # the start point, as the row's batch_size
        "powerfleet_device_gpu_frequency_hertz": 1300.5e6,
        "powerfleet_device_end_batch_size": 32.0,  # the point running now
        "powerfleet_device_end_gpu_frequency_hertz": 921.6e6,
        "powerfleet_device_accuracy": 0.71,
        "powerfleet_device_done_ratio": 0.42,
        "powerfleet_device_segments_total": 3.0,
        "powerfleet_device_last_seen_timestamp_seconds": _epoch("2026-01-02T03:10:00.250+00:00"),
    }
    for name, value in expect.items():
        assert got[(name, nano)] == pytest.approx(value, rel=1e-12), name
    # the one-hot status: exactly one 1 per device, over the whole set
    for dev, status in (
        (nano, "running"),
        (_dev("tx2-1", odd), "pending"),
        (_dev("orin-1", "x"), "lost"),
    ):
        labels = dict(dev)
        hot = {
            s: got[("powerfleet_device_status", frozenset({**labels, "status": s}.items()))]
            for s in statuses.ALL
        }
        assert hot == {s: float(s == status) for s in statuses.ALL}
    # unknown values are left out, never NaN: the pending device has no power, b, f, accuracy
    tx2 = _dev("tx2-1", odd)
    for name in ("power_watts", "budget_watts", "batch_size", "end_batch_size", "accuracy"):
        assert ("powerfleet_device_" + name, tx2) not in got
    assert got[("powerfleet_device_samples_total", tx2)] == 0.0
    lost = _dev("orin-1", "x")
    assert got[("powerfleet_device_lost_timestamp_seconds", lost)] == _epoch(
        "2026-01-02T03:09:00+00:00"
    )
    assert got[("powerfleet_device_budget_watts", lost)] == 7.5  # the fleet's, none reported
    run = frozenset({"run": "demo"}.items())
    assert got[("powerfleet_round", run)] == 2
    assert got[("powerfleet_rounds_total", run)] == 3
    assert got[("powerfleet_round_deadline_seconds", run)] == 3600.0
    assert got[("powerfleet_run_finished", run)] == 0
    assert got[("powerfleet_plan_revisions_total", run)] == 1
    assert {n for n, t in types.items() if t == "counter"} == {
        "powerfleet_device_samples_total",
        "powerfleet_device_energy_joules_total",
        "powerfleet_device_training_seconds_total",
        "powerfleet_device_segments_total",
        "powerfleet_plan_revisions_total",
    }
    assert all(math.isfinite(v) for v in got.values())
    state["devices"]["nano-1"]["progress"]["eta_s"] = float("nan")  # not finite: left out too
    _, again = parse_prometheus(prometheus_text(state))
    assert ("powerfleet_device_eta_seconds", nano) not in again


def test_prometheus_leaves_out_an_unknown_deadline_and_marks_finished():
    state = build_state()
    state["plan"]["deadline_s"] = None
    state["finished"] = True
    _, got = parse_prometheus(prometheus_text(state))
    names = {n for n, _ in got}
    assert "powerfleet_round_deadline_seconds" not in names
    assert got[("powerfleet_run_finished", frozenset({"run": "demo"}.items()))] == 1
