"""The ClientApp's segmented round and identity, with real Flower records and messages.

A chain of ``train.segment`` replies through the client (each resumed from the previous reply's
progress, as the coordinator does) must end on the row ``simulate_device`` gives in one go; a
deployed simulated device resumes from its own checkpoint when that is ahead of the message;
a paced device waits (device seconds run) / pace of wall time, checked through the injected
sleep, never by this machine's clock.
"""

import json
import os
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from clients import records, segments
from clients import segment_wire as wire
from clients.client_app import app, segment_round
from fleet.config.fleetfile import load_fleet
from fleet.rounds.progress import Progress
from fleet.rounds.virtual_clock import cached_efficiency, simulate_device

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"
FLEET = load_fleet(DEFAULT)
SHIPPED = cached_efficiency(FLEET.run.efficiency)


@pytest.fixture(autouse=True)
def task_identity():
    """Message() reads the sender from TaskIdentity, which only a running app sets."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def instruction(seconds, resume=None, server_round=1, **extra):
    ins = records.TrainInstruction(
        SHIPPED, FLEET.run, fleet_path=str(DEFAULT), server_round=server_round
    )
    cfg = records.encode_instruction(ins)
    cfg[segments.SEGMENT_S] = float(seconds)
    if resume is not None:
        cfg[segments.RESUME] = resume if isinstance(resume, str) else json.dumps(resume.to_dict())
    for k, v in extra.items():
        cfg[k] = v
    return RecordDict({records.CONFIG: cfg})


def row_of(reply):
    return records.decode_reply(
        reply.metric_records[records.METRICS], reply.config_records[records.REPORT]
    )


def run_chain(node, seconds, sleep=None, limit=1000):
    resume, rows, progs = None, [], []
    for _ in range(limit):
        kwargs = {} if sleep is None else {"sleep": sleep}
        reply = segment_round(node, instruction(seconds, resume), **kwargs)
        row, prog = row_of(reply), segments.decode_progress(reply)
        rows.append(row)
        progs.append(prog)
        if row["status"] != "running":
            return rows, progs
        resume = prog
    raise AssertionError("no final row")


def context(node_config):
    return Context(1, 7, node_config, RecordDict(), {})


# --------------------------------------------------------------------------- identify


def test_identify_in_simulation_through_the_app():
    for pid, spec in enumerate(FLEET.devices):
        content = RecordDict({records.CONFIG: ConfigRecord({"fleet-path": str(DEFAULT)})})
        msg = Message(content, dst_node_id=7, message_type="query.identify")
        reply = app(msg, context({"partition-id": pid}))
        got = segments.decode_identity(reply.content)
        assert got == {"device": spec.name, "device-type": spec.device_type, "client": "simulated"}


def test_identify_in_deployment_from_the_node_config():
    board = {"device-name": "orin-7", "device-type": "jetson-agx-orin", "client": "hardware"}
    got = segments.decode_identity(segments.identify(board, RecordDict()))
    assert got == {"device": "orin-7", "device-type": "jetson-agx-orin", "client": "hardware"}
    sim = FLEET.devices[2].to_node_config()
    got = segments.decode_identity(segments.identify(sim, RecordDict()))
    assert got == {"device": "nano-free", "device-type": "jetson-nano", "client": "simulated"}


def test_a_paced_node_says_its_pace_and_the_coordinator_reads_only_a_sane_one():
    sim = dict(FLEET.devices[2].to_node_config(), pace=300.0)
    reply = segments.identify(sim, RecordDict())
    assert segments.decode_identity(reply)["pace"] == "300.0"
    assert wire.pace_of(reply) == 300.0
    unpaced = segments.identify(FLEET.devices[2].to_node_config(), RecordDict())
    assert "pace" not in segments.decode_identity(unpaced) and wire.pace_of(unpaced) is None
    for bad in (True, 0.0, -5.0, 1e12, "300"):
        said = segments.identify(FLEET.devices[2].to_node_config(), RecordDict())
        said.config_records[wire.IDENTITY]["pace"] = bad
        assert wire.pace_of(said) is None, bad


@pytest.mark.parametrize(
    "node, fleet_path, says",
    [
        ({"partition-id": 99}, str(DEFAULT), "partition-id 99 has no device"),
        ({"partition-id": 0}, "", "empty 'fleet-path'"),
        ({"device-name": "x", "device-type": "toaster"}, "", "device-type must be one of"),
        ({"device-name": "../x", "device-type": "cpu"}, "", "device-name"),
        ({}, "", "node config names no device"),
    ],
)
def test_identify_errors_are_the_records_error_never_a_raise(node, fleet_path, says):
    content = RecordDict({records.CONFIG: ConfigRecord({"fleet-path": fleet_path})})
    got = segments.decode_identity(segments.identify(node, content))
    assert says in got["error"] and "\n" not in got["error"]
    assert got["device"] == records.node_label(node)


# --------------------------------------------------------------------------- segments


@pytest.mark.parametrize("pid", range(len(FLEET.devices)))
def test_segment_chain_through_the_client_equals_the_one_shot_row(pid):
    spec = FLEET.devices[pid]
    one = simulate_device(spec, SHIPPED, FLEET.run).to_dict()
    rows, progs = run_chain({"partition-id": pid}, 1234.5)
    final = rows[-1]
    for key in ("status", "batch_size", "freq_mhz", "accuracy", "device", "device_type"):
        assert final[key] == one[key]
    for key in ("time_s", "energy_j", "samples"):
        assert final[key] == (None if one[key] is None else pytest.approx(one[key], rel=1e-9))
    assert all(r["status"] == "running" for r in rows[:-1])
    if one["status"] == "ok":
        assert len(rows) > 1 and progs[-1].done == 1.0 and progs[-1].segments == len(rows)
        # a running reply is cumulative: its counters are its progress's
        for r, p in zip(rows, progs, strict=True):
            assert (r["time_s"], r["samples"]) == pytest.approx((p.time_s, p.samples))
    # the reply is the default round's wire format: FedAvg's weight only for a final row
    reply = segment_round({"partition-id": pid}, instruction(10.0))
    assert reply.metric_records[records.METRICS]["num-examples"] == 0


def test_the_app_routes_train_segment_and_replies_progress():
    msg = Message(instruction(100.0), dst_node_id=7, message_type="train.segment")
    reply = app(msg, context({"partition-id": 0}))
    prog = segments.decode_progress(reply.content)
    assert row_of(reply.content)["status"] == "running"
    assert prog.time_s == 100.0 and prog.segments == 1 and prog.budget_w == 4.5


@pytest.mark.parametrize(
    "cfg, says",
    [
        ({segments.RESUME: "{not json"}, "'resume': not valid JSON"),
        ({segments.RESUME: json.dumps({"time_s": -1})}, "'resume': progress field 'time_s'"),
        ({segments.RESUME: json.dumps({"when": 1})}, "unknown field 'when'"),
        ({segments.SEGMENT_S: 0.0}, "'segment-s' must be in"),
        ({segments.SEGMENT_S: "10"}, "'segment-s' must be a number"),
    ],
)
def test_bad_segment_fields_are_an_error_row_naming_the_field(cfg, says):
    content = instruction(10.0)
    for k, v in cfg.items():
        content.config_records[records.CONFIG][k] = v
    row = row_of(segment_round({"partition-id": 0}, content))
    assert row["status"] == "error" and says in row["message"] and row["device"] == "nano-4w5"


def test_missing_segment_length_and_missing_instruction():
    content = instruction(10.0)
    del content.config_records[records.CONFIG][segments.SEGMENT_S]
    row = row_of(segment_round({"partition-id": 0}, content))
    assert "missing key 'segment-s'" in row["message"]
    row = row_of(segment_round({"partition-id": 0}, RecordDict()))
    assert row["message"] == "no train instruction" and row["device"] == "partition-0"


# --------------------------------------------------------------------------- checkpoint


def deployed(tmp_path, pid=1, **extra):
    node = FLEET.devices[pid].to_node_config()
    node["work-dir"] = str(tmp_path / "work")
    node.update(extra)
    return node


def test_deployed_device_resumes_from_its_checkpoint_when_ahead(tmp_path):
    node = deployed(tmp_path)  # nano-7w
    first = segments.decode_progress(segment_round(node, instruction(500.0)))
    second = segments.decode_progress(segment_round(node, instruction(500.0, first)))
    path = tmp_path / "work" / "nano-7w_mixed-nano-tx2nx_r1.progress.json"
    saved = json.loads(path.read_text())
    assert Progress.from_dict(saved["progress"]) == second
    assert oct(os.stat(tmp_path / "work").st_mode & 0o777) == "0o700"
    # the coordinator lost the second reply: it resends the first progress, the device is ahead
    third = segments.decode_progress(segment_round(node, instruction(500.0, first)))
    assert third.time_s == pytest.approx(1500.0) and third.segments == 3
    # ... or knows nothing: still the checkpoint
    fourth = segments.decode_progress(segment_round(node, instruction(500.0)))
    assert fourth.time_s == pytest.approx(2000.0)
    # a message ahead of the checkpoint wins (the device's disk was restored from older state)
    ahead = Progress.from_dict({**fourth.to_dict(), "segments": 9})
    ahead.time_s, ahead.samples = 2500.0, fourth.samples * 2500.0 / 2000.0
    ahead.energy_j, ahead.done = fourth.energy_j * 1.25, fourth.done * 1.25
    fifth = segments.decode_progress(segment_round(node, instruction(500.0, ahead)))
    assert fifth.time_s == pytest.approx(3000.0) and fifth.segments == 10
    # the chain still ends on the one-shot row
    one = simulate_device(FLEET.devices[1], SHIPPED, FLEET.run)
    rows, _ = run_chain(node, 1000.0)
    assert rows[-1]["status"] == "ok"
    assert rows[-1]["time_s"] == pytest.approx(one.time_s, rel=1e-9)
    assert rows[-1]["energy_j"] == pytest.approx(one.energy_j, rel=1e-9)


def test_replies_the_coordinator_never_saw_leave_no_hole_in_the_stretches(tmp_path):
    """The coordinator restarted and missed two replies: the device resumes from its own
    checkpoint, and its reply also carries the stretches since the coordinator's ``resume``,
    so the joined record is the one-go replay's (a hole would split it in two)."""
    from fleet.planning.round_logic import join_segments

    node = deployed(tmp_path)
    first = segment_round(node, instruction(500.0))
    kept = row_of(first)["segments"]
    seen = segments.decode_progress(first)
    for _ in range(2):  # trained and checkpointed, the replies lost
        segment_round(node, instruction(500.0, seen))
    reply = segment_round(node, instruction(100000.0, seen))
    row = row_of(reply)
    assert row["status"] == "ok" and row["segments"][0]["start_s"] == seen.time_s
    one = simulate_device(FLEET.devices[1], SHIPPED, FLEET.run).to_dict()
    joined = join_segments(kept, row["segments"])
    assert len(joined) == len(one["segments"])
    for a, b in zip(joined, one["segments"], strict=True):
        assert a["end_s"] == pytest.approx(b["end_s"], rel=1e-9)
        assert a["samples"] == pytest.approx(b["samples"], rel=1e-9)


def test_checkpoint_of_another_run_or_round_is_not_ours(tmp_path):
    node = deployed(tmp_path)
    segment_round(node, instruction(500.0, **{segments.RUN_TOKEN: "run-a"}))
    other = segments.decode_progress(
        segment_round(node, instruction(500.0, **{segments.RUN_TOKEN: "run-b"}))
    )
    assert other.time_s == 500.0 and other.segments == 1
    next_round = segments.decode_progress(segment_round(node, instruction(500.0, server_round=2)))
    assert next_round.time_s == 500.0
    names = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert names == [
        "nano-7w_mixed-nano-tx2nx_r1.progress.json",
        "nano-7w_mixed-nano-tx2nx_r2.progress.json",
    ]


def test_corrupt_checkpoint_is_ignored_and_said(tmp_path):
    node = deployed(tmp_path)
    (tmp_path / "work").mkdir(mode=0o700)
    (tmp_path / "work" / "nano-7w_mixed-nano-tx2nx_r1.progress.json").write_text("{half")
    reply = segment_round(node, instruction(500.0))
    assert segments.decode_progress(reply).time_s == 500.0
    assert "checkpoint ignored" in row_of(reply)["message"]


def test_simulation_without_work_dir_counts_only_the_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        prog = segments.decode_progress(segment_round({"partition-id": 1}, instruction(500.0)))
        assert prog.time_s == 500.0 and prog.segments == 1
    assert list(tmp_path.iterdir()) == []


def test_unusable_work_dir_is_an_error_row_naming_the_key(tmp_path):
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    node = deployed(tmp_path, **{"work-dir": str(tmp_path / "open")})
    row = row_of(segment_round(node, instruction(500.0)))
    assert row["status"] == "error" and "node config 'work-dir'" in row["message"]


# --------------------------------------------------------------------------- pacing


def test_paced_device_sleeps_device_seconds_over_pace():
    slept = []
    node = {"partition-id": 0, "pace": 50.0}
    rows, progs = run_chain(node, 1000.0, sleep=slept.append)
    ran = [progs[0].time_s] + [
        b.time_s - a.time_s for a, b in zip(progs[:-1], progs[1:], strict=True)
    ]
    assert slept == pytest.approx([r / 50.0 for r in ran])
    assert slept[:-1] == pytest.approx([20.0] * (len(slept) - 1)) and slept[-1] < 20.0
    assert sum(slept) == pytest.approx(rows[-1]["time_s"] / 50.0)


@pytest.mark.parametrize("pace", [0, 0.0, "", None])
def test_no_pace_no_wait(pace):
    slept = []
    segment_round({"partition-id": 0, "pace": pace}, instruction(100.0), sleep=slept.append)
    assert slept == []


@pytest.mark.parametrize("pace", [-1.0, "fast", float("inf"), float("nan"), 1e-9, True])
def test_bad_pace_is_an_error_row_naming_the_key(pace):
    slept = []
    reply = segment_round({"partition-id": 0, "pace": pace}, instruction(100.0), slept.append)
    row = row_of(reply)
    assert row["status"] == "error" and "node config 'pace'" in row["message"]
    assert slept == [] and "\n" not in row["message"]


def test_hardware_node_without_segment_support_is_an_error_row():
    from clients import hardware_client

    if hasattr(hardware_client, "hardware_segment"):
        pytest.skip("the board's segment has landed; its own tests cover it")
    board = {"device-name": "orin-7", "device-type": "jetson-agx-orin", "client": "hardware"}
    row = row_of(segment_round(board, instruction(100.0)))
    assert row["status"] == "error" and "hardware_segment" in row["message"]


@pytest.mark.slow
def test_host_training_runs_its_whole_round_in_one_segment(tmp_path):
    """Host training cannot stop mid-round: one segment is its whole (final) round."""
    from tests.test_estimate import tiny_idx
    from tests.test_learning import HEADER

    data = tiny_idx(tmp_path / "tiny")
    prof = tmp_path / "p.csv"
    prof.write_text(
        HEADER + "\n8,307.2,0.08,4.0,3.0,jetson-nano\n16,307.2,0.12,4.4,3.6,jetson-nano\n"
    )
    from fleet.config.fleetfile import RunSettings
    from fleet.core.efficiency import Efficiency

    run = RunSettings("t", "small_cnn", "proxy.csv", 0.9, lr_ref_batch=16, lr_ref=2e-3)
    ins = records.TrainInstruction(Efficiency({8: 400.0, 16: 900.0}, source="proxy.csv"), run)
    cfg = records.encode_instruction(ins)
    cfg[segments.SEGMENT_S] = 1.0  # far less than the round: it runs whole anyway
    node = {
        "device-name": "nano-t",
        "device-type": "jetson-nano",
        "budget-w": 5.0,
        "profile": str(prof),
        "data": str(data),
        "learning": "train",
    }
    reply = segment_round(node, RecordDict({records.CONFIG: cfg}))
    row, prog = row_of(reply), segments.decode_progress(reply)
    assert row["status"] == "ok" and row["learning"] == "train" and row["time_s"] > 1.0
    assert (prog.time_s, prog.samples, prog.done, prog.segments) == (
        row["time_s"],
        row["samples"],
        1.0,
        1,
    )
    assert prog.accuracy == row["accuracy"] and prog.end_batch_size == row["end_batch_size"]


# --------------------------------------------------------------------------- one kind, once


def kind_fleet(tmp_path):
    """The default fleet with three devices of its first kind (``count = 3``)."""
    text = DEFAULT.read_text().replace('"../', f'"{ROOT / "simulations"}/')
    text = text.replace('name = "nano-4w5"\n', 'name = "nano-4w5"\ncount = 3\n', 1)
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def fleet_chain(path, pid, seconds=900.0):
    """Every reply of one device's round, decoded: (row, progress) per segment."""
    resume, out = None, []
    for _ in range(1000):
        cfg = {"fleet-path": str(path)}
        reply = segment_round({"partition-id": pid}, instruction(seconds, resume, **cfg))
        row, prog = row_of(reply), segments.decode_progress(reply)
        out.append((row, prog))
        if row["status"] != "running":
            return out
        resume = prog
    raise AssertionError("no final row")


def test_devices_of_one_kind_share_a_computed_segment_under_their_own_names(tmp_path):
    """A process playing many devices of one kind computes each segment once: the second
    device's chain adds nothing to the cache, and every reply equals the one the device
    computes for itself (cache emptied), its own name in it."""
    path = kind_fleet(tmp_path)
    names = [d.name for d in load_fleet(path).devices]
    assert len(set(names[:3])) == 3 and names[3] == "nano-7w"
    segments._KIND_SEGMENTS.clear()
    first = fleet_chain(path, 0)
    kept = len(segments._KIND_SEGMENTS)
    assert kept == len(first) > 1
    shared = fleet_chain(path, 2)
    assert len(segments._KIND_SEGMENTS) == kept  # nothing computed for the second device
    segments._KIND_SEGMENTS.clear()
    own = fleet_chain(path, 2)
    assert shared == own
    assert {row["device"] for row, _ in shared} == {names[2]}
    assert [p for _, p in shared] == [p for _, p in first]
    assert [{**r, "device": ""} for r, _ in shared] == [{**r, "device": ""} for r, _ in first]
    # another kind (another budget) is its own computation, and another segment length too
    fleet_chain(path, 3)
    grown = len(segments._KIND_SEGMENTS)
    assert grown > len(own)
    fleet_chain(path, 2, seconds=1200.0)
    assert len(segments._KIND_SEGMENTS) > grown


def test_a_shared_segment_still_paces_each_device(tmp_path):
    path = kind_fleet(tmp_path)
    slept = []
    for pid in (0, 1):
        cfg = {"fleet-path": str(path)}
        node = {"partition-id": pid, "pace": 100.0}
        segment_round(node, instruction(500.0, **cfg), sleep=slept.append)
    assert slept == [5.0, 5.0]


# --------------------------------------------------------------------------- timings


def test_each_message_appends_its_handler_and_its_cost(monkeypatch, tmp_path):
    from clients.handler_timings import ENV, read_timings

    path = tmp_path / "client.jsonl"
    monkeypatch.setenv(ENV, str(path))
    for kind in ("train.segment", "query.identify", "train.segment"):
        app(
            Message(instruction(100.0), dst_node_id=7, message_type=kind),
            context({"partition-id": 0}),
        )
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["handler"] for x in lines] == ["train_segment", "identify", "train_segment"]
    assert all(x["pid"] == os.getpid() and x["cpu_s"] >= 0 and x["wall_s"] >= 0 for x in lines)
    got = read_timings(path)
    assert got["train_segment"]["messages"] == 2 and got["identify"]["messages"] == 1
    assert got["train_segment"]["cpu_s"] == pytest.approx(
        sum(x["cpu_s"] for x in lines if x["handler"] == "train_segment")
    )
    assert got["identify"]["processes"] == 1


def test_no_timings_without_the_environment(monkeypatch, tmp_path):
    from clients.handler_timings import ENV

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    reply = app(Message(instruction(100.0), dst_node_id=7, message_type="train.segment"),
                context({"partition-id": 0}))  # fmt: skip
    assert row_of(reply.content)["status"] == "running"
    assert list(tmp_path.iterdir()) == []
