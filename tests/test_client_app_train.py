"""The ClientApp's real-learning mode as a plain function (no Flower processes)."""

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from clients import records
from clients.client_app import simulated_round
from fleet.agent.models.registry import build_model
from fleet.config.fleetfile import RunSettings
from fleet.core.efficiency import Efficiency
from tests.test_estimate import tiny_idx
from tests.test_learning import HEADER


@pytest.mark.slow
def test_federated_device_trains_and_sends_fine_tuned_weights(tmp_path):
    data = tiny_idx(tmp_path / "tiny")
    prof = tmp_path / "p.csv"
    prof.write_text(
        HEADER + "\n8,307.2,0.08,4.0,3.0,jetson-nano\n16,307.2,0.12,4.4,3.6,jetson-nano\n"
    )
    model = build_model("small_cnn", num_classes=2, input_shape="1x12x12", seed=0)
    sent = ArrayRecord(model.state_dict())
    run = RunSettings(
        "t", "small_cnn", "proxy.csv", 0.9, mode="federated", lr_ref_batch=16, lr_ref=2e-3
    )
    ins = records.TrainInstruction(Efficiency({8: 400.0, 16: 900.0}, source="proxy.csv"), run)
    content = RecordDict({records.ARRAYS: sent, records.CONFIG: records.encode_instruction(ins)})
    node = {
        "device-name": "nano-t",
        "device-type": "jetson-nano",
        "budget-w": 5.0,
        "profile": str(prof),
        "data": str(data),
        "learning": "train",
    }
    reply = simulated_round(node, content)
    row = records.decode_reply(
        reply.metric_records[records.METRICS], reply.config_records[records.REPORT]
    )
    assert row["status"] == "ok" and row["learning"] == "train"
    assert row["batch_size"] == 8 and row["accuracy"] >= 0.9
    assert row["time_s"] == row["samples"] * 0.08 / 8  # the device's clock, not this CPU's
    back = reply.array_records[records.ARRAYS].to_torch_state_dict()
    before = sent.to_torch_state_dict()
    assert set(back) == set(before)
    assert any(not np.allclose(back[k].numpy(), before[k].numpy()) for k in back)
