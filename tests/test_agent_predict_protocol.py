"""The agent's profile command in predict mode: probes the design, returns the full grid."""

from __future__ import annotations

import pytest

from fleet.agent.prediction.design import design_probes
from fleet.method.profile_io import read_rows
from tests.test_agent_protocol import BATCHES, FREQS, Agent, replay_csv

pytestmark = pytest.mark.integration


def test_profile_predict_over_the_protocol(tmp_path):
    agent = Agent(replay_csv(tmp_path / "replay.csv"), work_dir=tmp_path)
    try:
        out = tmp_path / "predicted.csv"
        events, prof = agent.call(
            id=1, cmd="profile", model="resnet18", batch_sizes=BATCHES, predict=True,
            out=str(out),
        )  # fmt: skip
        assert prof["ok"] is True
        design = design_probes(BATCHES, FREQS)
        assert prof["probes"] == len(design) < prof["grid_size"] == len(BATCHES) * len(FREQS)
        assert events[-1]["done"] == len(design)
        rows = {(r["batch_size"], float(r["freq_mhz"])): r for r in prof["rows"]}
        assert len(rows) == prof["grid_size"]
        assert {k for k, r in rows.items() if r["source"] != "predicted"} == set(design)
        _, file_rows, comments = read_rows(str(out))
        assert len(file_rows) == prof["grid_size"] and "plan=predict" in comments
        _, bad = agent.call(id=2, cmd="profile", model="resnet18", predict=True, max_probes=3)
        assert bad["ok"] is False and "too few" in bad["error"]
    finally:
        agent.kill()
