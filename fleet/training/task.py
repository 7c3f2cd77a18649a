"""A training task on the coordinator side: a dataset's splits and the model built to fit them.

Pre-training, proxy estimation and a simulated device that trains for real all start the same
way: load the train/test splits, tell images from text, and build the model with the data's
input shape and class count (vocabulary for text), optionally from a weights file. One place
does it, so the three cannot disagree about what "the model for this data" is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.common.errors import InputError


@dataclass(frozen=True)
class Task:
    train: tuple[Any, Any]  # (inputs, targets) tensors
    test: tuple[Any, Any]
    kind: str  # "classification" | "char" (the trainer's task names)
    classes: int  # classes, or the vocabulary size for text
    input_shape: str  # per-sample, e.g. "1x28x28" or "64"


def load_task(
    dataset: str, data_dir: str | None = None, subset: int | None = None, seed: int = 0
) -> Task:
    """Both splits of a prepared dataset (or a path); a dataset problem is one InputError."""
    from fleet.agent.data import datasets
    from fleet.agent.data.dataerror import DatasetError

    try:
        train = datasets.load_dataset(dataset, data_dir, "train", subset=subset, seed=seed)
        test = datasets.load_dataset(dataset, data_dir, "test", subset=subset, seed=seed)
    except DatasetError as exc:
        raise InputError(str(exc)) from None
    vocab = train.vocab
    return Task(
        (train.x, train.y),
        (test.x, test.y),
        "char" if vocab is not None else "classification",
        len(vocab) if vocab is not None else train.num_classes,
        "x".join(str(d) for d in train.x.shape[1:]),
    )


def build_for(task: Task, model_name: str, seed: int = 0, weights: Any = None):
    """The model for this task; ``weights`` is a state_dict or a weights file path."""
    from fleet.agent.models.registry import build_model, canonical_name

    try:
        name = canonical_name(model_name)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    kw = {"vocab_size": task.classes} if task.kind == "char" else {"num_classes": task.classes}
    try:  # a text model on images (or the reverse) is the user's pairing, said in one line
        model = build_model(name, input_shape=task.input_shape, seed=seed, **kw)
    except ValueError as exc:
        data = "text" if task.kind == "char" else "images"
        raise InputError(f"model {name} does not fit this dataset ({data}, {task.input_shape}): "
                         f"{exc}") from None  # fmt: skip
    if weights is not None:
        state = read_weights(weights) if isinstance(weights, str) else weights
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0][:160]
            where = weights if isinstance(weights, str) else "the weights"
            raise InputError(f"{where}: does not fit model {name}: {first}") from None
    return model


def read_weights(path: str) -> dict[str, Any]:
    """A state_dict file, bare or as written by ``powerfleet pretrain`` ({state_dict, meta})."""
    from fleet.agent.data import tensorfile

    if not Path(path).exists():
        raise InputError(f"{path}: weights file not found (make it with powerfleet pretrain)")
    try:
        state = tensorfile.load(path)
    except tensorfile.TensorFileError as exc:
        raise InputError(str(exc)) from None
    if not isinstance(state, dict):
        raise InputError(f"{path}: expected a state_dict (powerfleet pretrain)")
    return state.get("state_dict", state)


def write_weights(state: dict[str, Any], path: str) -> None:
    """The one place a weights file is written (atomically: a crash never leaves half a file).

    Every weights file the coordinator or a client writes goes through here and every one it
    reads through ``read_weights``, so the file format changes in one pair of functions.
    """
    from fleet.agent.data import tensorfile

    tensorfile.save({k: v.detach().cpu() for k, v in state.items()}, path, "weights")


def run_weights_path(run: Any, fleet_path: str) -> str | None:
    """The fleet's ``[run] weights`` file (``powerfleet pretrain``'s output), absolute, resolved
    as the fleet file's reader checked it (``fleet.config.fleetfile.weights_file``)."""
    from fleet.config.fleetfile import weights_file

    return weights_file(run.weights, fleet_path)


def initial_weights(fleet: Any) -> dict[str, Any]:
    """The weights the coordinator ships in round 1, as a state_dict.

    ``[run] weights`` when the fleet names them (pre-trained, the paper's starting point);
    otherwise a seeded fresh model built for the task: the input shape and classes come from
    the first device that trains for real (its ``data``), since a model's default shape (3x32x32)
    does not fit 1x28x28 data. A fleet that only replays traces gets the model's default.
    """
    run = fleet.run
    path = run_weights_path(run, fleet.path)
    if path is not None:
        return read_weights(path)
    data_dir = run.data_dir or None
    for spec in fleet.devices:
        if spec.learning == "train" and spec.data:
            task = load_task(spec.data, data_dir, seed=run.seed)  # all of it: classes from labels
            return build_for(task, run.model, run.seed).state_dict()
    from fleet.agent.models.registry import build_model

    try:
        return build_model(run.model, seed=run.seed).state_dict()
    except ValueError as exc:
        raise InputError(f"[run] model: {exc}") from None
