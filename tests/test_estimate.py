"""Coordinator-side pretraining and estimation on a tiny real-format dataset (IDX files)."""

import json

import numpy as np
import pytest

from fleet.agent.data.imagefiles import write_idx
from fleet.core.efficiency import load_efficiency
from tests.conftest import run_cli


def tiny_idx(folder, n=400, seed=0, flip=False):
    """Two classes a small CNN separates quickly: bright top half vs bright bottom half.

    ``flip`` swaps the labels: weights pre-trained on it start the proxy below the target.
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.uint8)
    x = rng.integers(0, 60, (n, 12, 12)).astype(np.uint8)
    for i, label in enumerate(y):
        rows = slice(0, 6) if label == 0 else slice(6, 12)
        x[i, rows] += 150
    folder.mkdir(parents=True)
    write_idx(str(folder / "images-idx3-ubyte.gz"), x)
    write_idx(str(folder / "labels-idx1-ubyte.gz"), (1 - y) if flip else y)
    return folder


@pytest.mark.slow
def test_pretrain_then_estimate_writes_a_valid_efficiency_file(tmp_path):
    data = tiny_idx(tmp_path / "tiny")
    public = tiny_idx(tmp_path / "public", seed=1, flip=True)
    weights = tmp_path / "w.pt"
    p = run_cli(
        "pretrain",
        "--model",
        "small_cnn",
        "--dataset",
        str(public),
        "--epochs",
        "0.1",
        "--batch-size",
        "16",
        "--out",
        str(weights),
        "--json",
    )
    assert p.returncode == 0, p.stderr
    meta = json.loads(p.stdout)
    assert meta["input_shape"] == "1x12x12" and meta["num_classes"] == 2
    out = tmp_path / "eff.csv"
    args = [
        "estimate",
        "--model",
        "small_cnn",
        "--dataset",
        str(data),
        "--weights",
        str(weights),
        "--batch-sizes",
        "4,16",
        "--seeds",
        "2",
        "--target-accuracy",
        "0.9",
        "--lr-ref",
        "1e-3",
        "--lr-ref-batch",
        "16",
        "--eval-every",
        "32",
        "--max-samples",
        "3200",
        "--workers",
        "2",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(out),
        "--json",
    ]
    e = run_cli(*args)
    assert e.returncode == 0, e.stderr
    res = json.loads(e.stdout)
    assert res["cached"] is False and res["unreached"] == []
    eff = load_efficiency(out)
    assert eff.batch_sizes == [4, 16]
    assert eff.metadata["source"] == "trained"
    runs = (tmp_path / "eff.runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 2 * 2
    # the mean over seeds is what the file says, and every sample count is on the eval cadence
    for b in (4, 16):
        counts = [int(r.split(",")[4]) for r in runs[1:] if r.startswith(f"{b},")]
        assert eff.samples[b] == sum(counts) / len(counts)
        assert all(c % 32 == 0 for c in counts)
    # a second call is served from the cache, identical
    again = run_cli(*args)
    assert json.loads(again.stdout)["cached"] is True
    assert load_efficiency(out).samples == eff.samples


@pytest.mark.slow
def test_unreachable_target_is_marked_not_reached(tmp_path):
    data = tiny_idx(tmp_path / "tiny")
    out = tmp_path / "eff.csv"
    e = run_cli(
        "estimate",
        "--model",
        "small_cnn",
        "--dataset",
        str(data),
        "--batch-sizes",
        "8",
        "--seeds",
        "1",
        "--target-accuracy",
        "1.0",
        "--eval-every",
        "64",
        "--max-samples",
        "16",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(out),
    )
    assert e.returncode == 1
    assert load_efficiency(out).unreached == [8]
    assert "not reached" in e.stdout


@pytest.mark.slow
def test_not_prepared_dataset_says_which_command(tmp_path):
    e = run_cli(
        "estimate",
        "--model",
        "small_cnn",
        "--dataset",
        "mnist-5k",
        "--data-dir",
        str(tmp_path / "empty"),
        "--target-accuracy",
        "0.9",
        "--out",
        str(tmp_path / "e.csv"),
    )
    assert e.returncode == 2 and "powerfleet data prepare mnist-5k" in e.stderr
    assert "Traceback" not in e.stderr
