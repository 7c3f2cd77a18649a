"""The CPU-scale text analogue: the small model, and the whole study on tiny generated text.

No real corpora here: three fake prepared corpora (a few KB of seeded pseudo-English) go
through the same derive -> pre-train -> estimate -> efficiency file -> sensitivity -> report path
that ``powerfleet experiment analogue --task text`` runs on the real ones.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from fleet.agent.models.registry import build_model, count_parameters
from fleet.core.efficiency import load_efficiency
from simulations.analogue_text import (
    TextAnalogueConfig,
    middle_excerpt,
    model_shape,
    run_text_study,
    write_report,
)

ROOT = Path(__file__).resolve().parent.parent


def test_small_transformer_is_the_scaled_configuration():
    shape = model_shape("char_transformer_small")
    assert shape == {
        "layers": 2,
        "heads": 4,
        "d_model": 64,
        "seq_len": 64,
        # per block: 2 LayerNorms (4*64) + qkv (64*192+192) + proj (64*64+64) + MLP
        # (64*256+256 + 256*64+64); embeddings 96*64 + 64*64; final LayerNorm 128; head 64*96
        "params": 2 * (4 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64)
        + 96 * 64
        + 64 * 64
        + 128
        + 64 * 96,
    }
    model = build_model("char_transformer_small", vocab_size=96, seed=0)
    x = torch.randint(0, 96, (3, 64))
    assert model(x).shape == (3, 64, 96)
    # the caller's options still win (one layer fewer)
    one = build_model("char_transformer_small", vocab_size=96, seed=0, n_layers=1)
    assert count_parameters(model) - count_parameters(one) == (
        4 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64
    )


def test_middle_excerpt_starts_at_a_line_in_the_middle():
    text = "".join(f"line {i:04d}\n" for i in range(1000))  # 10 chars a line
    part = middle_excerpt(text, 100)
    assert len(part) == 100 and part.startswith("line 0495\n")
    assert middle_excerpt("short", 100) == "short"


def _fake_corpus(root: Path, name: str, docs: dict[str, str]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for doc, text in docs.items():
        (folder / doc).write_text(text)
    manifest = {"name": name, "kind": "text", "documents": sorted(docs)}
    (folder / "prepared.json").write_text(json.dumps(manifest))


def _prose(seed: int, chars: int, words: list[str]) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    while n < chars:
        line = " ".join(rng.choice(words) for _ in range(8)) + ".\n"
        out.append(line)
        n += len(line)
    return "".join(out)


@pytest.mark.slow
def test_study_on_tiny_text_writes_valid_efficiency_files_and_report(tmp_path):
    data = tmp_path / "data"
    words = ["the", "and", "of", "to", "whale", "sea", "lady", "king"]
    _fake_corpus(data, "shakespeare", {f"play{i}.txt": _prose(i, 8000, words) for i in range(4)})
    _fake_corpus(data, "austen", {"emma.txt": _prose(10, 8000, words)})
    _fake_corpus(data, "mobydick", {"mobydick.txt": _prose(11, 8000, words)})
    config = TextAnalogueConfig(
        targets=(("shakespeare-proxy", 0.45), ("austen", 0.45), ("mobydick", 0.45)),
        chars=6400,
        pretrain_chars=1400,  # one step: the fine-tuning has something to learn
        pretrain_epochs=1.0,
        pretrain_batch=16,
        batch_sizes=(4, 8),
        seeds=1,
        lr_ref=5e-3,
        eval_every_samples=32,
        max_samples=1500,
    )
    eff_dir = tmp_path / "eff"

    def study() -> dict:
        return run_text_study(
            str(data),
            tmp_path / "out",
            config,
            efficiency_dir=eff_dir,
            workers=1,
            cache_dir=tmp_path / "cache",
            log=lambda m: None,
        )

    res = study()
    for name in config.names:
        path = eff_dir / f"char_transformer_small_{name}.csv"
        eff = load_efficiency(path)
        assert eff.batch_sizes == [4, 8]
        assert eff.metadata == {
            "model": "char_transformer_small",
            "dataset": name,
            "target_accuracy": "0.45",
            "source": "trained",
        }
        assert set(eff.reached) == {4, 8}
        head = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
        assert head[0].startswith("# made by: powerfleet experiment analogue --task text")
        assert "2 layers, 4 heads, d_model 64, seq 64" in head[1]
        assert f"config key {config.key()}" in head[3]
        assert any("source=trained" in ln for ln in head)
        runs = Path(str(path.with_suffix("")) + ".runs.csv").read_text().splitlines()
        assert len(runs) == 1 + 2  # header + 2 batch sizes x 1 seed
    # the proxy for itself costs nothing extra, on both boards and every budget
    for s in res["sensitivity"]:
        for mat in s["matrices"].values():
            assert [mat[i][i] for i in range(3)] == [0.0, 0.0, 0.0]
    report = write_report(res, tmp_path / "out").read_text()
    assert "| model | char transformer, 6 layers, 6 heads, d_model 256, seq 64 |" in report
    assert "## Extra time-to-accuracy from choosing with shakespeare-proxy's r" in report
    assert report.count("| nano | ") == 3 and report.count("| tx2nx | ") == 3
    saved = json.loads((tmp_path / "out" / "analogue.json").read_text())
    assert saved["model_shape"]["layers"] == 2 and len(saved["sensitivity"]) == 2
    # a rerun reads the cache: no new weights, the same numbers
    again = study()
    assert again["sensitivity"] == res["sensitivity"]


def test_cli_text_task_reports_bad_input_in_one_line(tmp_path, capsys):
    from fleet.cli import main

    code = main(["experiment", "analogue", "--task", "text", "--seeds", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--seeds must be >= 1, got 0" in err[0]
    # a data folder without the corpora: one line naming the command that prepares them
    code = main(["experiment", "analogue", "--task", "text", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "powerfleet data prepare shakespeare" in err[0]
