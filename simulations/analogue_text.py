"""The text task's offline analogue, scaled to fit 2 CPU cores (issue 13).

The paper (section 5.1) fine-tunes a 6-layer, 6-head, 256-d character transformer (sequence 64,
AdamW), pre-trained on WikiText-2, on Austen and Dickens novels to 62 % / 61 % next-character
accuracy, and estimates r on tiny Shakespeare. Trained many times over (datasets x batch sizes x
seeds), that model needs a GPU. Here the same study runs in minutes on a CPU:

- model ``char_transformer_small`` (``fleet/agent/models/registry.py``): the paper's architecture
with
  2 layers, 4 heads and a 64-d embedding, sequence length 64 (about 116k parameters instead of
  4.8M);
- pre-training: Shakespeare's plays at even positions of the sorted play list (a stand-in for
  WikiText-2: public English text that none of the fine-tuning sets contain);
- proxy and targets, each a contiguous excerpt from the middle of its corpus, split 90/10 as
  the paper does: ``shakespeare-proxy`` (the plays at odd positions), ``austen`` (the six
  novels) and ``mobydick`` (Melville, standing in for Dickens, which no offline package holds);
- targets: next-character accuracies the small model reaches in a few thousand samples, per
  dataset (the paper's 62 %/61 % are out of reach for 116k parameters trained for seconds);
- then every dataset is the proxy for every other on the modeled Jetson *transformer* profiles
  (the paper's 6-layer model's time and power): Fig. 5/6's extra time-to-accuracy.

What differs from the paper is the model's size, the data's size and the accuracy targets; the
method (pre-train, samples-to-accuracy per batch size with the square-root learning-rate rule,
choose (b, f) with the proxy's r) is the same code that serves the fleet. The efficiency files
land in ``simulations/efficiency/trained/`` with their provenance in the header comments. Docs:
``docs/architecture.md``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.agent.data import datasets
from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.textdata import read_text
from fleet.common.errors import InputError
from fleet.training.estimate import EstimateSpec, default_cache_dir, estimate, write_outputs

HERE = Path(__file__).resolve().parent
PROFILE_MODEL = "transformer"  # the boards' modeled profiles: the paper's 6-layer model
BUDGETS = (4.5, 7.0, None)
DEVICES = ("nano", "tx2nx")
COMMAND = "powerfleet experiment analogue --task text"


@dataclass(frozen=True)
class TextAnalogueConfig:
    """Everything that determines the study's numbers (and its caches' keys)."""

    model: str = "char_transformer_small"
    # (dataset, target next-character accuracy); the first is the paper's proxy
    targets: tuple[tuple[str, float], ...] = (
        ("shakespeare-proxy", 0.39),
        ("austen", 0.39),
        ("mobydick", 0.365),
    )
    chars: int = 160_000  # per fine-tuning dataset: 90 % train, 10 % test
    pretrain_chars: int = 1_000_000
    pretrain_epochs: float = 1.0
    pretrain_batch: int = 32
    pretrain_lr: float = 2e-3
    batch_sizes: tuple[int, ...] = (4, 8, 16, 32, 64, 128)
    seeds: int = 3
    optimizer: str = "adamw"
    lr_ref_batch: int = 32
    lr_ref: float = 1e-3
    eval_every_samples: int = 128
    max_samples: int = 8_000

    def key(self) -> str:
        """Everything: names the run in the efficiency files' headers."""
        return _digest(dataclasses.asdict(self))

    def data_key(self) -> str:
        """What the derived text depends on: the sizes (and the dataset list)."""
        return _digest([self.chars, self.pretrain_chars, self.names])

    def pretrain_key(self) -> str:
        """What the pre-trained weights depend on: a changed target does not re-pretrain."""
        fields = ("model", "pretrain_chars", "pretrain_epochs", "pretrain_batch", "pretrain_lr")
        return _digest([self.data_key(), self.optimizer, *(getattr(self, f) for f in fields)])

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.targets]

    def target(self, name: str) -> float:
        return dict(self.targets)[name]


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


# which prepared corpus each derived dataset comes from, and which of its documents
SOURCES = {
    "pretrain": ("shakespeare", "even"),
    "shakespeare-proxy": ("shakespeare", "odd"),
    "austen": ("austen", "all"),
    "mobydick": ("mobydick", "all"),
}


def model_shape(model: str) -> dict[str, int]:
    """Layers, heads, embedding and parameters of the model as built (for the report)."""
    from fleet.agent.models.registry import build_model, count_parameters

    m: Any = build_model(model, seed=0)  # a TinyGPT: its attributes are the model's own
    return {
        "layers": len(m.blocks),
        "heads": m.blocks[0].attn.n_heads,
        "d_model": m.tok_emb.embedding_dim,
        "seq_len": m.seq_len,
        "params": count_parameters(m),
    }


def _corpus(name: str, which: str, data_dir: str | None) -> str:
    """One prepared corpus's documents (all, or those at even/odd positions), joined."""
    try:
        folder = Path(datasets.prepared_path(name, data_dir))
        manifest = datasets.read_manifest(str(folder))
    except DatasetError as exc:
        raise InputError(str(exc)) from None
    docs = list(manifest.get("documents") or [])
    if not docs:
        raise InputError(f"{folder}: prepared.json lists no documents (powerfleet data prepare)")
    docs.sort()
    if which == "even":
        docs = docs[0::2]
    elif which == "odd":
        docs = docs[1::2]
    try:
        return "\n".join(read_text(str(folder / d)) for d in docs)
    except DatasetError as exc:
        raise InputError(str(exc)) from None


def middle_excerpt(text: str, chars: int) -> str:
    """``chars`` characters from the middle of ``text``, starting at a line start.

    The middle, not the start: a book's opening (title page, Moby Dick's extracts) is the least
    typical part of it.
    """
    if len(text) <= chars:
        return text
    start = (len(text) - chars) // 2
    nl = text.find("\n", start - 1, start + 1000)  # start itself may begin a line
    start = nl + 1 if nl >= 0 else start
    return text[start : start + chars]


def derive_texts(config: TextAnalogueConfig, data_dir: str | None) -> dict[str, str]:
    """The pre-training set, the proxy and the targets as one-document text folders.

    They live beside the prepared corpora, under a folder named by the configuration's key, so a
    changed size never reuses stale text (the estimate cache is keyed by the dataset's path).
    """
    root = Path(datasets.default_data_dir() if data_dir is None else data_dir)
    out = {}
    for name in ["pretrain", *config.names]:
        if name not in SOURCES:
            raise InputError(f"text analogue: unknown dataset {name!r} (known: {list(SOURCES)})")
        corpus, which = SOURCES[name]
        dest = root / "analogue-text" / config.data_key() / name
        path = dest / f"{name}.txt"
        if not path.exists():
            size = config.pretrain_chars if name == "pretrain" else config.chars
            text = middle_excerpt(_corpus(corpus, which, data_dir), size)
            dest.mkdir(parents=True, exist_ok=True)
            from fleet.method.profile_io import atomic_write_text

            atomic_write_text(str(path), text)
        out[name] = str(dest)
    return out


def provenance(config: TextAnalogueConfig, name: str, shape: dict[str, int]) -> list[str]:
    """The header lines that say how an efficiency file was made (prepended to estimate's)."""
    corpus, which = SOURCES[name]
    docs = {"all": "all documents", "even": "even-position plays", "odd": "odd-position plays"}
    return [
        f"made by: {COMMAND} --seeds {config.seeds} (simulations/analogue_text.py), "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}",
        f"config: model={config.model} ({shape['layers']} layers, {shape['heads']} heads, "
        f"d_model {shape['d_model']}, seq {shape['seq_len']}, {shape['params']:,} params; the "
        "paper's is 6 layers, 6 heads, 256-d)",
        f"data: {name} = {config.chars:,} chars from the middle of {corpus} ({docs[which]}), "
        f"90/10 train/test; pre-trained on {config.pretrain_chars:,} chars of shakespeare "
        f"(even-position plays), {config.pretrain_epochs:g} epoch(s) at b={config.pretrain_batch}",
        f"run: batch sizes {','.join(map(str, config.batch_sizes))}, seeds {config.seeds}, "
        f"target next-char accuracy {config.target(name):g}, eval every "
        f"{config.eval_every_samples} samples, cap {config.max_samples:,} samples, "
        f"config key {config.key()}",
    ]


def _prepend_comments(path: Path, lines: list[str]) -> None:
    from fleet.method.profile_io import atomic_write_text

    head = "".join(f"# {line}\n" for line in lines)
    atomic_write_text(str(path), head + path.read_text())


def run_text_study(
    data_dir: str | None,
    out_dir: Path,
    config: TextAnalogueConfig = TextAnalogueConfig(),
    efficiency_dir: Path = HERE / "efficiency" / "trained",
    profiles_dir: Path = HERE / "profiles",
    workers: int | None = None,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Pre-train, estimate every dataset's samples-to-accuracy, build the sensitivity matrices.

    Weights and estimates are cached (keyed by the configuration): a rerun rebuilds the report
    without training. Returns what the report needs, timings included.
    """
    from fleet.reports.experiment import proxy_sensitivity
    from fleet.training.pretrain import pretrain

    t0 = time.time()
    paths = derive_texts(config, data_dir)
    shape = model_shape(config.model)
    cache = cache_dir or (default_cache_dir().parent / "analogue-text")
    weights = cache / f"{config.model}-{config.pretrain_key()}.pft"
    if not weights.exists():
        meta = pretrain(
            config.model,
            paths["pretrain"],
            str(weights),
            data_dir,
            epochs=config.pretrain_epochs,
            batch_size=config.pretrain_batch,
            lr=config.pretrain_lr,
            optimizer=config.optimizer,
        )
        log(f"pretrained: next-char accuracy {meta['accuracy']:.3f}")
    from fleet.agent.data import tensorfile

    pre = tensorfile.load(str(weights))["meta"]  # what pre-training reached and cost, cached
    effs, train_s = {}, 0.0
    for name in config.names:
        spec = EstimateSpec(
            model=config.model,
            proxy=paths[name],
            batch_sizes=config.batch_sizes,
            target_accuracy=config.target(name),
            seeds=config.seeds,
            weights=str(weights),
            optimizer=config.optimizer,
            lr_ref_batch=config.lr_ref_batch,
            lr_ref=config.lr_ref,
            eval_every_samples=config.eval_every_samples,
            max_samples=config.max_samples,
            data_dir=data_dir,
        )
        eff, runs, cached = estimate(spec, workers, cache / "estimates")
        path = efficiency_dir / f"{config.model}_{name}.csv"
        efficiency_dir.mkdir(parents=True, exist_ok=True)
        write_outputs(eff, runs, spec, str(path))
        _prepend_comments(path, provenance(config, name, shape))
        effs[name] = path
        train_s += sum(r.train_time_s for r in runs)
        log(f"{name}: {[eff.samples[b] for b in eff.batch_sizes]} (cached={cached})")
    sens = [
        proxy_sensitivity(
            PROFILE_MODEL,
            device,
            config.names,
            profiles_dir,
            efficiency_dir,
            BUDGETS,
            efficiency_model=config.model,
        )
        for device in DEVICES
    ]
    return {
        "config": dataclasses.asdict(config),
        "model_shape": shape,
        "sensitivity": sens,
        "choices": proxy_choices(config, profiles_dir, efficiency_dir),
        "efficiency": {k: str(v) for k, v in effs.items()},
        "pretrain": {k: pre[k] for k in ("accuracy", "samples", "train_time_s")},
        "train_s": train_s,
        "wall_s": time.time() - t0,
    }


def proxy_choices(
    config: TextAnalogueConfig, profiles_dir: Path, efficiency_dir: Path
) -> dict[str, dict[str, dict[str, list[object] | None]]]:
    """(b, f) each dataset's r picks per device and budget: why a proxy costs what it costs."""
    from fleet.common.errors import InfeasibleError
    from fleet.core.efficiency import load_efficiency
    from fleet.core.profile import load_profile
    from fleet.core.selection import SelectionIndex

    out: dict[str, dict[str, dict[str, list[object] | None]]] = {}
    for device in DEVICES:
        index = SelectionIndex(load_profile(profiles_dir / f"{device}_{PROFILE_MODEL}.csv"))
        per: dict[str, dict[str, list[object] | None]] = {}
        for budget in BUDGETS:
            label = "none" if budget is None else f"{budget:g}"
            per[label] = {}
            for name in config.names:
                eff = load_efficiency(efficiency_dir / f"{config.model}_{name}.csv")
                try:
                    c = index.select(eff, budget)
                    per[label][name] = [c.batch_size, c.freq_mhz]
                except InfeasibleError:
                    per[label][name] = None
        out[device] = per
    return out


def report_markdown(res: dict[str, Any], out_dir: Path) -> str:
    """docs/analogue/text/report.md: the configuration, r per dataset, Fig. 5/6 and a summary."""
    from fleet.reports.markdown import sensitivity_section

    cfg = TextAnalogueConfig(
        **{
            **res["config"],
            "targets": tuple(tuple(t) for t in res["config"]["targets"]),
            "batch_sizes": tuple(res["config"]["batch_sizes"]),
        }
    )
    shape: dict[str, int] = res["model_shape"]
    pre: dict[str, float] = res["pretrain"]
    runs, secs = _training_runs(res["efficiency"])
    targets = ", ".join(f"{n} {t:g}" for n, t in cfg.targets)
    lines = [
        "# Offline text analogue: proxy sensitivity with real training, scaled to a CPU",
        "",
        f"Generated by `{COMMAND} --seeds {cfg.seeds}` (`simulations/analogue_text.py`, config "
        f"key `{cfg.key()}`): {runs} fine-tuning runs, {secs / 60:.1f} CPU-minutes of "
        f"fine-tuning plus {pre['train_time_s'] / 60:.1f} of pre-training. Rerunning it reads the "
        "cached weights and estimates and rewrites this report in seconds.",
        "",
        "## Configuration, and how it differs from the paper's",
        "",
        "| | paper (section 5.1) | here |",
        "|---|---|---|",
        f"| model | char transformer, 6 layers, 6 heads, d_model 256, seq 64 | "
        f"`{cfg.model}`: {shape['layers']} layers, {shape['heads']} heads, d_model "
        f"{shape['d_model']}, seq {shape['seq_len']} ({shape['params']:,} parameters) |",
        f"| pre-training | WikiText-2 | {cfg.pretrain_chars:,} chars of Shakespeare's plays at "
        f"even positions of the sorted list, {cfg.pretrain_epochs:g} epoch at "
        f"b={cfg.pretrain_batch}, AdamW lr {cfg.pretrain_lr:g} (next-char accuracy "
        f"{pre['accuracy']:.3f} after {int(pre['samples']):,} windows) |",
        "| proxy | tiny Shakespeare | `shakespeare-proxy`: the plays at odd positions "
        "(none seen in pre-training) |",
        "| targets | Austen (3 novels), Dickens (8 works) | `austen` (6 novels), `mobydick` "
        "(Melville: no offline package holds Dickens) |",
        f"| data size | whole texts, 90/10 split | {cfg.chars:,} chars from the middle of each "
        f"corpus, 90/10 split ({int(cfg.chars * 0.9) // 64:,} train / "
        f"{int(cfg.chars * 0.1) // 64:,} test windows of 64) |",
        f"| target accuracy | Austen 0.62, Dickens 0.61 | {targets} (about 1,000-4,000 "
        "samples for the small model) |",
        f"| batch sizes | 4-128 | {', '.join(map(str, cfg.batch_sizes))} |",
        f"| optimizer | AdamW | AdamW, lr {cfg.lr_ref:g} at b={cfg.lr_ref_batch}, square-root "
        f"scaling; evaluation every {cfg.eval_every_samples} samples, cap "
        f"{cfg.max_samples:,} |",
        f"| seeds | 3 | {cfg.seeds} |",
        "| device side | Jetson Nano / TX2 NX, measured | the modeled `transformer` profiles "
        "(the paper's 6-layer model's time and power); only r comes from the small model |",
        "",
        "## Samples to target accuracy per batch size (mean over seeds) and r = N/max N",
        "",
    ]
    from simulations.analogue import efficiency_table

    lines += efficiency_table(res["efficiency"], cfg.target)
    lines += ["", *summary_table(res, cfg.names[0]), ""]
    lines += [
        "## Every dataset as the proxy for every other (Fig. 5/6)",
        "",
        "Extra time-to-accuracy (%) choosing (b, f) with the row's r, training on the column's "
        "data.",
        "",
    ]
    for s in res["sensitivity"]:
        lines += sensitivity_section(s, out_dir, f"### {s['device']}")
    return "\n".join(lines) + "\n"


def summary_table(res: dict[str, Any], proxy: str) -> list[str]:
    """The paper's question in one table: the proxy's extra time on each target."""
    sens = {s["device"]: s for s in res["sensitivity"]}
    choices: dict = res["choices"]
    names = list(next(iter(sens.values()))["datasets"])
    targets = [n for n in names if n != proxy]
    lines = [
        f"## Extra time-to-accuracy from choosing with {proxy}'s r",
        "",
        "(b, f MHz) picked with the proxy's r vs with the target's own; extra time = the "
        "proxy's pick costed on the target over the target's own pick, minus one.",
        "",
        "| device | budget | "
        + " | ".join(f"{t}: extra time" for t in targets)
        + " | "
        + " | ".join(f"pick: {n}" for n in names)
        + " |",
        "|---" * (2 + len(targets) + len(names)) + "|",
    ]
    label = {"4.5": "4.5 W", "7": "7 W", "none": "none"}
    for device, s in sens.items():
        for key, mat in s["matrices"].items():
            row = mat[names.index(proxy)]
            extra = [
                "—" if row[names.index(t)] is None else f"{row[names.index(t)]:+.1f} %"
                for t in targets
            ]
            picks = []
            for n in names:
                c = choices[device][key][n]
                picks.append("infeasible" if c is None else f"{c[0]} @ {c[1]:g}")
            lines.append(
                f"| {device} | {label.get(key, key)} | " + " | ".join(extra + picks) + " |"
            )
    return lines


def _training_runs(efficiency: dict[str, str]) -> tuple[int, float]:
    """(runs, CPU-seconds) from the per-run CSVs: a report rebuilt from the cache still says
    what producing it cost."""
    import csv

    n, secs = 0, 0.0
    for path in efficiency.values():
        runs = Path(str(Path(path).with_suffix("")) + ".runs.csv")
        if runs.exists():
            with runs.open() as fh:
                for row in csv.DictReader(fh):
                    n += 1
                    secs += float(row["train_time_s"])
    return n, secs


def write_report(res: dict[str, Any], out_dir: Path) -> Path:
    """report.md and analogue.json (no machine paths, no timings: they are committed)."""
    from fleet.method.profile_io import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    text = report_markdown(res, out_dir)
    atomic_write_text(str(out_dir / "report.md"), text)
    portable = {
        "config": res["config"],
        "model_shape": res["model_shape"],
        "sensitivity": res["sensitivity"],
        "choices": res["choices"],
        "efficiency": {k: _rel(v) for k, v in res["efficiency"].items()},
    }
    atomic_write_text(str(out_dir / "analogue.json"), json.dumps(portable, indent=1) + "\n")
    return out_dir / "report.md"


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def run_cli(args: object) -> int:
    """``powerfleet experiment analogue --task text``: the study, then the report."""
    import sys

    seeds = getattr(args, "seeds", 5)
    config = (
        TextAnalogueConfig()
        if seeds == 5
        else dataclasses.replace(TextAnalogueConfig(), seeds=seeds)
    )
    if config.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {config.seeds}")
    out = getattr(args, "out", None)
    out_dir = Path(out or "docs/analogue/text")
    res = run_text_study(
        getattr(args, "data_dir", None),
        out_dir,
        config,
        workers=getattr(args, "workers", None),
        log=lambda m: print(m, file=sys.stderr),
    )
    path = write_report(res, out_dir)
    print(f"wrote {path} ({res['wall_s']:.0f} s)")
    return 0
