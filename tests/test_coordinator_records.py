"""Unit tests of the wire format, the coordinator's plain functions and the strategy's hooks.

No Flower processes: records are built and parsed directly, the ClientApp's plain function is
called in-process, and the strategy's configure/aggregate are called with hand-made messages.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from clients import records
from clients.client_app import simulated_round
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, load_fleet
from fleet.core.efficiency import Efficiency
from fleet.core.profile import load_profile
from fleet.method.budget import BudgetStep
from fleet.method.selection import choose
from fleet.rounds.device_round import row_fields
from fleet.rounds.virtual_clock import cached_efficiency, simulate_device
from strategies import coordinator
from strategies.server_app import settings_from_run_config
from strategies.strategy import NodesMissing, PowerAwareStrategy, ReportingGrid, wait_for_nodes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"


@pytest.fixture(autouse=True)
def task_identity():
    """Message() reads the sender from TaskIdentity, which only a running app sets."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


@pytest.fixture(scope="module")
def fleet():
    return load_fleet(DEFAULT)


@pytest.fixture(scope="module")
def shipped(fleet):
    return cached_efficiency(fleet.run.efficiency)


def _same(a: object, b: object) -> bool:
    """Equality where NaN equals NaN (segments may hold inf, which compares normally)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# ----------------------------------------------------------------------------- efficiency


def test_efficiency_round_trip_marks_unreached() -> None:
    eff = Efficiency({4: 1000.0, 8: math.nan, 16: 1500.5}, source="proxy.csv")
    bs, samples = records.encode_efficiency(eff)
    assert bs == [4, 8, 16] and samples == [1000.0, -1.0, 1500.5]
    ConfigRecord({"b": bs, "s": samples})  # homogeneous lists: accepted
    back = records.decode_efficiency(bs, samples, "proxy.csv")
    assert back.reached == {4: 1000.0, 16: 1500.5} and back.unreached == [8]
    assert back.source == "proxy.csv"


def test_instruction_round_trip(fleet, shipped) -> None:
    ins = coordinator.instruction_for(fleet, shipped, server_round=3)
    cfg = records.encode_instruction(ins)
    assert cfg["batch-sizes"] == [4, 8, 16, 32, 64, 128]
    assert cfg["optimizer"] == "adam" and cfg["lr-ref-batch"] == 128 and cfg["lr-ref"] == 5e-4
    back = records.decode_instruction(cfg)
    assert back.efficiency.samples == shipped.samples
    assert back.efficiency.source == shipped.source
    assert back.run == fleet.run  # the one settings object travels whole, extra included
    assert (back.run.target_accuracy, back.run.objective, back.run.mode) == (0.92, "time", "local")
    assert back.fleet_path == str(DEFAULT) and back.server_round == 3


def test_instruction_errors_are_one_line(fleet, shipped) -> None:
    cfg = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
    del cfg["target-accuracy"]
    with pytest.raises(InputError, match="missing key 'target-accuracy'"):
        records.decode_instruction(cfg)
    cfg = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
    cfg["objective"] = "speed"
    with pytest.raises(InputError, match="'objective' must be one of time, energy.*, got 'speed'"):
        records.decode_instruction(cfg)
    cfg = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
    cfg["samples-to-accuracy"] = [1.0, 2.0]
    with pytest.raises(InputError, match="6 batch sizes but 2 values"):
        records.decode_instruction(cfg)


# ----------------------------------------------------------------------------- replies


@pytest.mark.slow
def test_reply_round_trip_for_every_default_device(fleet, shipped) -> None:
    for spec in fleet.devices:
        row = simulate_device(spec, shipped, fleet.run).to_dict()
        metrics, report = records.encode_reply(row)
        assert all(isinstance(v, (int, float)) for v in metrics.values())
        assert _same(records.decode_reply(metrics, report), row), spec.name
    free = next(d for d in fleet.devices if d.budget_w is None)
    metrics, _ = records.encode_reply(simulate_device(free, shipped, fleet.run).to_dict())
    assert "budget-w" not in metrics  # no budget: no value (the row decodes it as None)


def test_reply_num_examples_and_missing_values(fleet, shipped) -> None:
    first = fleet.devices[0]
    ok = simulate_device(first, shipped, fleet.run).to_dict()
    metrics, report = records.encode_reply(ok)
    # the batch the device's profile and the shipped proxy give (the kernel's eq. 4)
    want = choose(load_profile(first.profile).points, shipped.reached, first.budget_w)
    assert metrics["num-examples"] == round(ok["samples"])
    assert metrics["batch-size"] == want.batch_size
    starved = next(d for d in fleet.devices if d.name == "nano-starved")
    row = simulate_device(starved, shipped, fleet.run).to_dict()
    metrics, report = records.encode_reply(row)
    assert "time-s" not in metrics and metrics["num-examples"] == 0
    assert report["status"] == "infeasible" and "1.5" in str(report["message"])
    assert records.decode_reply(metrics, report)["time_s"] is None


# ----------------------------------------------------------------------------- node config


def test_node_config_round_trips_every_fleet_device(fleet) -> None:
    for spec in fleet.devices:
        assert records.spec_from_node_config(spec.to_node_config()) == spec


def test_node_config_budget_none_and_schedule_string() -> None:
    base = {"device-name": "n1", "device-type": "jetson-nano", "profile": "/p.csv"}
    spec = records.spec_from_node_config({**base, "budget-w": "none"})
    assert spec.budget_w is None and spec.schedule == () and spec.data is None
    spec = records.spec_from_node_config({**base, "budget-w": 4.5, "data": "/d.csv"})
    assert spec.budget_w == 4.5 and spec.data == "/d.csv" and spec.learning == "trace"
    spec = records.spec_from_node_config({**base, "budget-schedule": "0:7,600:4.5"})
    assert spec.schedule == (BudgetStep(0.0, 7.0), BudgetStep(600.0, 4.5))
    assert spec.budget_w == 7.0
    spec = records.spec_from_node_config({**base, "budget-w": 7, "budget-schedule": "0:7,60:none"})
    assert spec.schedule[1].budget_w is None
    with pytest.raises(InputError, match="disagrees with budget-schedule's first step"):
        records.spec_from_node_config({**base, "budget-w": 5.0, "budget-schedule": "0:7"})
    with pytest.raises(InputError, match="first step must start at 0"):
        records.spec_from_node_config({**base, "budget-schedule": "10:7"})
    with pytest.raises(InputError, match="is not a budget"):
        records.spec_from_node_config({**base, "budget-w": -2.0})
    with pytest.raises(InputError, match="missing field 'budget-w'"):
        records.spec_from_node_config(base)


def test_node_config_unknown_device_type_and_missing_name() -> None:
    with pytest.raises(InputError) as err:
        records.spec_from_node_config(
            {"device-name": "x", "device-type": "raspberry-pi", "budget-w": 5.0}
        )
    text = str(err.value)
    assert "unknown device type 'raspberry-pi'" in text and "jetson-nano" in text
    assert "\n" not in text
    with pytest.raises(InputError, match="missing node config 'device-name'"):
        records.spec_from_node_config({"device-type": "jetson-nano", "budget-w": 5.0})
    with pytest.raises(InputError, match="learning must be one of"):
        records.spec_from_node_config(
            {"device-name": "x", "device-type": "cpu", "budget-w": 5.0, "learning": "magic"}
        )


def test_device_spec_for_partition_id(fleet) -> None:
    assert records.device_spec_for({"partition-id": 2}, str(DEFAULT)) == fleet.devices[2]
    with pytest.raises(InputError, match="partition-id 8 has no device"):
        records.device_spec_for({"partition-id": 8}, str(DEFAULT))
    with pytest.raises(InputError, match="empty 'fleet-path'"):
        records.device_spec_for({"partition-id": 0}, "")
    with pytest.raises(InputError, match="names no device"):
        records.device_spec_for({}, str(DEFAULT))


# ----------------------------------------------------------------------------- client


def _instruction_content(fleet, shipped, mode: str = "local", arrays=None) -> RecordDict:
    cfg = records.encode_instruction(coordinator.instruction_for(fleet, shipped))
    cfg["mode"] = mode
    return RecordDict({"arrays": arrays or ArrayRecord(), "config": cfg})


@pytest.mark.slow
def test_simulated_round_in_process_equals_direct(fleet, shipped) -> None:
    for pid, spec in enumerate(fleet.devices):
        out = simulated_round({"partition-id": pid}, _instruction_content(fleet, shipped))
        row = records.decode_reply(out["metrics"], out["report"])  # type: ignore[arg-type]
        assert _same(row, simulate_device(spec, shipped, fleet.run).to_dict())
        assert "arrays" not in out  # local mode: weights stay on the device


def test_simulated_round_federated_returns_weights_and_errors_are_rows(fleet, shipped) -> None:
    weights = ArrayRecord({"w": Array(np.arange(4, dtype=np.float32))})
    out = simulated_round(
        {"partition-id": 0}, _instruction_content(fleet, shipped, "federated", weights)
    )
    assert np.array_equal(out["arrays"]["w"].numpy(), np.arange(4, dtype=np.float32))
    starved = {"partition-id": 7}  # infeasible: trained nothing, so sends no weights
    out = simulated_round(starved, _instruction_content(fleet, shipped, "federated", weights))
    assert "arrays" not in out
    nc = {**fleet.devices[0].to_node_config(), "learning": "train"}
    out = simulated_round(nc, _instruction_content(fleet, shipped))
    row = records.decode_reply(out["metrics"], out["report"])  # type: ignore[arg-type]
    assert row["status"] == "error" and row["device"] == "nano-4w5"
    # learning = "train" reads the device's data as a dataset: a trace CSV is refused, by name
    assert "resnet18_svhn.csv" in row["message"]
    nc = {"device-name": "bad", "device-type": "toaster", "budget-w": 1.0}
    out = simulated_round(nc, _instruction_content(fleet, shipped))
    row = records.decode_reply(out["metrics"], out["report"])  # type: ignore[arg-type]
    assert row["device"] == "bad" and "unknown device type 'toaster'" in row["message"]


# ----------------------------------------------------------------------------- aggregation

HAND_ROWS = [
    {"device": "a", "status": "ok", "time_s": 100.0, "energy_j": 500.0, "samples": 1000.0,
     "accuracy": 0.9, "budget_w": 5.0, "peak_power_w": 4.0, "batch_size": 16},
    {"device": "b", "status": "ok", "time_s": 300.0, "energy_j": 1500.0, "samples": 3000.0,
     "accuracy": 0.8, "budget_w": None, "peak_power_w": 9.0, "batch_size": 32},
    {"device": "c", "status": "infeasible", "budget_w": 1.5, "message": "nothing fits"},
]  # fmt: skip


def _reply(to: Message, row: dict, arrays: ArrayRecord | None = None) -> Message:
    full = {k: row.get(k) for k in row_fields()}
    return Message(records.reply_content(full, arrays), reply_to=to)


def _instructions(nodes: Iterable[int]) -> list[Message]:
    return [
        Message(RecordDict({"config": ConfigRecord({"x": 1})}), dst_node_id=n,
                message_type=MessageType.TRAIN)
        for n in nodes
    ]  # fmt: skip


def test_round_metrics_match_hand_computed_totals() -> None:
    m = coordinator.round_metrics(HAND_ROWS)
    assert m["energy-j"] == 2000.0  # sum over ok devices
    assert m["round-time-s"] == 300.0  # the slowest device
    assert m["median-time-s"] == statistics.median([100.0, 300.0])
    assert m["accuracy-weighted"] == pytest.approx((0.9 * 1000 + 0.8 * 3000) / 4000)
    assert m["trained"] == 2 and m["devices"] == 3 and m["budget-violations"] == 0
    assert m["status-ok"] == 2 and m["status-infeasible"] == 1 and m["status-error"] == 0
    summary = coordinator.round_summary(4, HAND_ROWS)
    assert summary["round"] == 4 and summary["energy_j"] == 2000.0


def test_rows_from_replies_error_and_lost_nodes() -> None:
    ins = _instructions([11, 12, 13, 14])
    replies = [
        _reply(ins[0], HAND_ROWS[0]),
        _reply(ins[1], HAND_ROWS[1]),
        _reply(ins[2], HAND_ROWS[2]),
        Message(Error(code=0, reason="boom on 14"), reply_to=ins[3]),
    ]
    rows, weights = coordinator.rows_from_replies(replies, sent_to=[11, 12, 13, 14, 15])
    by = {r["device"]: r for r in rows}
    assert set(by) == {"a", "b", "c", "node-14", "node-15"}
    assert by["node-14"]["status"] == "error" and "boom on 14" in by["node-14"]["message"]
    assert by["node-15"]["status"] == "lost"
    assert weights == []  # local mode replies carry no weights
    totals = coordinator.round_metrics(rows)
    assert totals["energy-j"] == 2000.0 and totals["status-error"] == 1
    assert totals["status-lost"] == 1
    ordered = coordinator.order_rows(rows, ["c", "b", "a"])
    assert [r["device"] for r in ordered] == ["c", "b", "a", "node-14", "node-15"]


def _arrays(scale: float) -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.full((2, 2), scale, dtype=np.float32)),
            "n": Array(np.array(int(scale), dtype=np.int64)),
        }
    )


def test_strategy_aggregate_federated_and_local() -> None:
    ins = _instructions([1, 2, 3])
    replies = [
        _reply(ins[0], HAND_ROWS[0], _arrays(1.0)),  # 1000 examples
        _reply(ins[1], HAND_ROWS[1], _arrays(5.0)),  # 3000 examples
        _reply(ins[2], HAND_ROWS[2]),
    ]
    seen = []
    fed = PowerAwareStrategy(
        3, "federated", ["a", "b", "c"], on_round=lambda r, rows: seen.append(r)
    )
    arrays, metrics = fed.aggregate_train(1, replies)
    assert arrays is not None
    w = arrays["w"].numpy()
    assert w.dtype == np.float32 and np.allclose(w, (1.0 * 1000 + 5.0 * 3000) / 4000)
    assert arrays["n"].numpy().dtype == np.int64 and int(arrays["n"].numpy()) == 4
    assert metrics["energy-j"] == 2000.0 and seen == [1]
    assert [r["device"] for r in fed.rounds[1]] == ["a", "b", "c"]
    local = PowerAwareStrategy(3, "local")
    arrays, metrics = local.aggregate_train(1, replies)
    assert arrays is None and metrics["round-time-s"] == 300.0


class FakeGrid(Grid):
    """Nodes online and replies arriving two at a time (pull by pull)."""

    def __init__(self, nodes: list[int], replies: list[Message] | None = None) -> None:
        self.nodes = nodes
        self.replies = list(replies or [])
        self.pushed: list[Message] = []

    def set_run(self, run):  # type: ignore[no-untyped-def]
        pass

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return None

    def create_message(self, *a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the strategy must not call this")

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        self.pushed.extend(messages)
        return [f"id-{i}" for i in range(len(messages))]

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out, self.replies = self.replies[:2], self.replies[2:]
        return out

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        raise AssertionError("the strategy must not call this")


def test_configure_train_one_message_per_node_and_config_untouched(fleet, shipped) -> None:
    strategy = PowerAwareStrategy(2, node_wait_s=1.0)
    config = coordinator.train_config(fleet, shipped)
    arrays = _arrays(2.0)
    msgs = list(strategy.configure_train(5, arrays, config, FakeGrid([30, 20])))
    assert [m.metadata.dst_node_id for m in msgs] == [20, 30]
    for m in msgs:
        assert m.metadata.message_type == MessageType.TRAIN
        assert m.content["config"]["server-round"] == 5
        assert m.content["config"]["batch-sizes"] == [4, 8, 16, 32, 64, 128]
        assert np.array_equal(m.content["arrays"]["w"].numpy(), arrays["w"].numpy())
    assert config["server-round"] == 0  # the caller's record is not mutated
    with pytest.raises(NodesMissing, match="only 1 of 2 devices connected"):
        wait_for_nodes(FakeGrid([1]), 2, wait_s=0.2, poll_s=0.05)


class ServerClock:
    """The strategy module's clock, held by the test: sleeping advances it, nothing else does."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_reporting_grid_calls_back_per_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    import strategies.strategy as strategy_module

    clock = ServerClock()
    monkeypatch.setattr(strategy_module, "time", clock)
    ins = _instructions([1, 2, 3])
    replies = [_reply(m, HAND_ROWS[i]) for i, m in enumerate(ins)]
    inner = FakeGrid([1, 2, 3], replies)
    seen: list[int] = []
    grid = ReportingGrid(inner, lambda msg: seen.append(msg.metadata.src_node_id), poll_s=0.01)
    assert grid.send_and_receive([]) == []
    # FakeGrid's ids are "id-k", the replies point at the instructions' ids: nothing matches,
    # so the grid keeps pulling until the timeout and still returns everything that came
    # (two replies per pull: two pulls bring all three).
    out = list(grid.send_and_receive(ins, timeout=0.2))
    assert len(out) == 3 and seen == [1, 2, 3]
    assert clock.now >= 0.2 and set(clock.sleeps) == {0.01}  # pulled every 10 ms until then


# ----------------------------------------------------------------------------- settings


def test_server_settings_from_run_config() -> None:
    assert settings_from_run_config({}) is None
    assert settings_from_run_config({"fleet-path": "", "run-dir": "/r"}) is None
    s = settings_from_run_config(
        {"fleet-path": "/f.toml", "run-dir": "/r", "num-nodes": 2, "ship-weights": "fleet"}
    )
    assert s is not None and s.num_nodes == 2 and s.ship_weights is None
    assert s.engine == "flower-deployment"
    s = settings_from_run_config({"fleet-path": "/f.toml", "ship-weights": False})
    assert s is not None and s.ship_weights is False
    with pytest.raises(InputError, match="field 'ship-weights' must be one of fleet, true, false"):
        settings_from_run_config({"fleet-path": "/f.toml", "ship-weights": "maybe"})


@pytest.mark.parametrize("key, value, needle", [
    ("num-nodes", -3, "must be an integer in [0, 100000] (0: every device), got -3"),
    ("num-nodes", "abc", "got 'abc' (wrong type)"),
    ("num-nodes", 2.7, "got 2.7 (wrong type)"),
    ("num-nodes", True, "got True (wrong type)"),
    ("round-timeout-s", float("nan"), "must be a finite number > 0 (seconds), got nan"),
    ("round-timeout-s", -5.0, "got -5.0"),
    ("node-wait-s", -1.0, "must be a finite number > 0 (seconds), got -1.0"),
    ("segment-s", 1e-4, "must be 0 or seconds in [0.001, 2592000], got 0.0001"),
    ("engine", "mine", "must be one of flower, flower-deployment, got 'mine'"),
])  # fmt: skip
def test_a_run_config_value_is_checked_as_its_key_declares(key, value, needle) -> None:
    """Only the keys were checked: ``num-nodes=-3`` waited for -3 devices and lost them all,
    2.7 became 2, a NaN timeout never ended, and any engine name went into the report."""
    with pytest.raises(InputError) as exc:
        settings_from_run_config({"fleet-path": "/f.toml", key: value})
    assert f"run config ([tool.flwr.app.config] or flwr run -c): field '{key}' " in str(exc.value)
    assert needle in str(exc.value)
    empty = settings_from_run_config({"fleet-path": "/f.toml", "run-dir": "", "segment-s": 0})
    assert empty is not None and empty.run_dir == "" and empty.segment_s == 0


def test_ship_weights_setting(fleet) -> None:
    large = load_fleet(ROOT / "simulations" / "fleets" / "large.toml")
    assert coordinator.ship_weights(fleet.run) is True
    assert coordinator.ship_weights(large.run) is False
    assert coordinator.ship_weights(large.run, override=True) is True


def test_initial_arrays_are_the_models_state_dict() -> None:
    arrays = coordinator.initial_arrays("small_cnn", seed=0)
    again = coordinator.initial_arrays("small_cnn", seed=0)
    assert len(arrays) > 0 and list(arrays) == list(again)
    assert all(np.array_equal(arrays[k].numpy(), again[k].numpy()) for k in arrays)
    with pytest.raises(InputError, match="unknown model 'vgg'"):
        coordinator.initial_arrays("vgg")


def test_error_row_has_every_report_column() -> None:
    row = records.error_row("x", "why")
    assert list(row) == row_fields() and row["status"] == "error"
    assert isinstance(DeviceSpec("n", "cpu", None, "", None).to_node_config(), dict)


def test_run_settings_are_decoded_once_per_wire_text_and_still_checked():
    """A round's segments carry the same [run] settings: the ClientApp decodes them once
    (``records._decode_run``'s memo); other values are decoded again, a bad one refused even
    after a good one was kept."""
    from fleet.config.fleetfile import RunSettings

    run = RunSettings("t", "small_cnn", "proxy.csv", 0.9, lr_ref_batch=16, lr_ref=2e-3)
    cfg = records.encode_instruction(records.TrainInstruction(Efficiency({8: 400.0}), run))
    first = records.decode_instruction(cfg).run
    assert first == run
    again = records.decode_instruction(records.encode_instruction(
        records.TrainInstruction(Efficiency({8: 400.0}), run)
    )).run  # fmt: skip
    assert again is first  # the same wire text: decoded once
    cfg["target-accuracy"] = 0.8
    assert records.decode_instruction(cfg).run.target_accuracy == 0.8
    cfg["target-accuracy"] = 7.0
    with pytest.raises(InputError, match="target"):
        records.decode_instruction(cfg)
    cfg["target-accuracy"] = 0.9
    assert records.decode_instruction(cfg).run is first
