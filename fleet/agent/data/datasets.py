"""The dataset registry and loader on the device: which prepared datasets exist, where the cache
lives, and ``load_dataset``, which turns a prepared name or a path into train/test tensors.

Why here: the device fine-tunes on its own data, under Python 3.6 + torch 1.10 (JetPack 4.6), so
the readers stick to the standard library and numpy, and import torch only where tensors are
made. The coordinator prepares the offline corpora (``powerfleet data prepare NAME``, see
``fleet.data.prepare``) into a cache folder that can be copied to the board as is. This module
only recognises a source and applies the split rules; the formats are decoded by
``fleet.agent.data.imagefiles`` and ``fleet.agent.data.cifar``, text by
``fleet.agent.data.textdata`` and
``fleet.agent.data.vocab``, the index rules live in ``fleet.agent.data.splits``.

Sources ``load_dataset`` accepts (a prepared name, or a path):

- a prepared dataset name (``fashion-mnist``, ``mnist-5k``, ``austen``, ``shakespeare``,
  ``mobydick``), looked up in ``data_dir`` (default ``$POWERFLEET_DATA`` or
  ``~/.cache/powerfleet/data``); its folder holds ``prepared.json`` (the completion marker).
  A bare known name always means the cache; write ``./austen`` for a local folder of that name;
- a folder of IDX files: ``train-images-idx3-ubyte[.gz]`` + ``train-labels-idx1-ubyte[.gz]`` and
  ``test-``/``t10k-`` ones (an official split), or ``images-idx3-ubyte[.gz]`` +
  ``labels-idx1-ubyte[.gz]`` (one set);
- a CIFAR-10/100 python folder (``data_batch_1..5`` + ``test_batch``, or ``train`` + ``test``
  with fine/coarse labels), or one batch file;
- an image folder, one subfolder per class (optionally under ``train/`` and ``test/``), images
  as PGM/PPM (decoded in pure Python), ``.npy`` arrays, or PNG/JPEG/BMP (needs Pillow);
- a ``.npz`` with ``x``/``y`` (or ``x_train``/``y_train``/``x_test``/``y_test``) arrays;
- a UTF-8 ``.txt`` file, or a folder of them (one document each).

Splits follow the paper (section 5.1). Images: a dataset with an official train/test split
keeps it when no ``subset`` is asked for; otherwise the samples are pooled, ``subset`` of them
drawn (seeded), and split 80/20 (seeded) -- "each dataset (subset) is divided into training and
testing sets with an 80/20 split". Text: each document is split contiguously, its first 90 % to
train and its last 10 % to test, so test text is never seen in training.

Images come back as float32 ``[N, C, H, W]`` scaled to [0, 1] (``/255``); ``standardize=True``
also subtracts the per-channel mean and divides by the per-channel std of the *train* split
(whichever split is returned), the usual recipe that keeps test statistics out of training.
Labels are int64 ``[N]``.

Text is mapped onto the fixed 96-character vocabulary (``fleet.agent.data.vocab``) and comes back as
next-character windows ``x[N, T]``, ``y[N, T]`` of length ``seq_len`` (64)
(``fleet.agent.data.textdata``).

Every unreadable input raises :class:`DatasetError` with one line naming the file and what was
expected.
"""

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fleet.agent.data.cifar import cifar_classes, cifar_files, read_cifar_batch
from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.imagefiles import (
    idx_pair,
    npz_sets,
    read_bytes,
    read_idx_set,
    read_image_folder,
)
from fleet.agent.data.splits import split_indices, subset
from fleet.agent.data.textdata import SEQ_LEN, read_text, split_text, text_windows
from fleet.agent.data.vocab import Vocab, build_vocab, encode
from fleet.method.envvars import env_folder

KNOWN_DATASETS = {
    "fashion-mnist": "image",
    "mnist-5k": "image",
    "austen": "text",
    "shakespeare": "text",
    "mobydick": "text",
}
MANIFEST = "prepared.json"
DATA_ENV = "POWERFLEET_DATA"
IMAGE_TEST_FRACTION = 0.2


def default_data_dir() -> str:
    """Where prepared datasets live: ``$POWERFLEET_DATA`` or ``~/.cache/powerfleet/data``; an
    unusable ``$POWERFLEET_DATA`` is an InputError naming it (``fleet.method.envvars``)."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "powerfleet", "data")
    return env_folder(DATA_ENV, default)


# --------------------------------------------------------------------------------------------
# load_dataset


class LoadedDataset(object):
    """What ``load_dataset`` returns: tensors plus what is needed to interpret them.

    ``x``/``y``: images float32 [N, C, H, W] / int64 [N]; text int64 [N, T] / [N, T].
    ``classes``: class names (images); ``vocab`` and ``ids`` (the split's whole id stream): text.
    """

    def __init__(
        self,
        name: str,
        kind: str,
        split: str,
        x: Any,
        y: Any,
        source: str,
        classes: Optional[List[str]] = None,
        vocab: Optional[Vocab] = None,
        ids: Any = None,
        mean: Optional[List[float]] = None,
        std: Optional[List[float]] = None,
    ) -> None:
        self.name, self.kind, self.split, self.source = name, kind, split, source
        self.x, self.y = x, y
        self.classes, self.vocab, self.ids = classes, vocab, ids
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_classes(self) -> int:
        if self.kind == "text":
            return len(self.vocab) if self.vocab is not None else 0
        return len(self.classes) if self.classes else int(self.y.max()) + 1 if len(self) else 0

    def __repr__(self) -> str:
        return (
            f"LoadedDataset({self.name!r}, {self.kind}, split={self.split}, "
            f"x={list(self.x.shape)}, y={list(self.y.shape)})"
        )


def prepared_path(name: str, data_dir: Optional[str] = None) -> str:
    """The folder of a prepared dataset, or DatasetError naming the command that prepares it."""
    root = data_dir or default_data_dir()
    folder = os.path.join(root, name)
    if not os.path.isfile(os.path.join(folder, MANIFEST)):
        where = "" if data_dir is None else f" --data-dir {data_dir}"
        raise DatasetError(
            f"dataset {name!r} is not prepared in {root}: run `powerfleet data prepare "
            f"{name}{where}` (then copy {folder} to the device if it trains there)"
        )
    return folder


def read_manifest(folder: str) -> Dict[str, Any]:
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise DatasetError(f"{path}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise DatasetError(f"{path}: corrupt manifest (expected a JSON object)")
    return manifest


def load_dataset(
    name_or_path: str,
    data_dir: Optional[str] = None,
    split: str = "train",
    subset: Optional[int] = None,
    seed: int = 0,
    standardize: bool = False,
    seq_len: int = SEQ_LEN,
    labels: str = "fine",
) -> LoadedDataset:
    """Load one split of a prepared dataset or a dataset on disk as tensors.

    ``split``: ``train``, ``test`` or ``all``. ``subset``: images -- how many samples to draw
    (seeded) before the 80/20 split; text -- how many windows to keep (seeded) of the split.
    ``labels``: CIFAR-100's ``fine`` or ``coarse`` labels. See the module docstring.
    """
    if split not in ("train", "test", "all"):
        raise DatasetError(f"split must be train, test or all, got {split!r}")
    if name_or_path in KNOWN_DATASETS:  # a bare known name means the cache ("./austen": a path)
        folder = prepared_path(name_or_path, data_dir)
        name = name_or_path
    elif os.path.exists(name_or_path):
        folder = name_or_path
        name = os.path.basename(os.path.normpath(name_or_path))
    else:
        raise DatasetError(
            f"{name_or_path}: no such file or folder, and not a known dataset "
            f"({', '.join(sorted(KNOWN_DATASETS))})"
        )
    manifest = read_manifest(folder) if os.path.isdir(folder) else {}
    if _is_text(folder, manifest):
        return _load_text(name, folder, manifest, split, subset, seed, seq_len)
    sets, classes = _image_sets(folder, manifest, labels)
    return _load_images(name, folder, sets, classes, split, subset, seed, standardize)


def _is_text(path: str, manifest: Dict[str, Any]) -> bool:
    if manifest:
        return manifest.get("kind") == "text"
    if os.path.isfile(path):
        return path.endswith(".txt")
    entries = os.listdir(path)
    return any(e.endswith(".txt") for e in entries) and not any(
        os.path.isdir(os.path.join(path, e)) for e in entries
    )


def _image_sets(
    path: str, manifest: Dict[str, Any], labels: str
) -> Tuple[Dict[str, Tuple[np.ndarray, np.ndarray]], Optional[List[str]]]:
    """{"train": (x, y), "test": (x, y)} for an official split, or {"all": (x, y)}."""
    classes = manifest.get("classes")
    if os.path.isfile(path):
        if path.endswith(".npz"):
            return npz_sets(path), classes
        if read_bytes(path)[:2] == b"\x00\x00":
            raise DatasetError(
                f"{path}: an IDX file alone has no labels; pass the folder holding the "
                "images-idx3-ubyte and labels-idx1-ubyte files"
            )
        x, y = read_cifar_batch(path, labels)
        return {"all": (x, y)}, classes
    train = idx_pair(path, ["train-"])
    test = idx_pair(path, ["test-", "t10k-"])
    if train and test:
        return {"train": read_idx_set(*train), "test": read_idx_set(*test)}, classes
    pair = idx_pair(path, [""]) or train or test
    if pair:
        return {"all": read_idx_set(*pair)}, classes
    cifar = cifar_files(path)
    if cifar:
        parts = {}
        for key, files in (("train", cifar[0]), ("test", cifar[1])):
            batches = [read_cifar_batch(f, labels) for f in files]
            parts[key] = (
                np.concatenate([b[0] for b in batches]),
                np.concatenate([b[1] for b in batches]),
            )
        return parts, classes or cifar_classes(cifar[2], labels)
    npz = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
    if len(npz) == 1:
        return npz_sets(os.path.join(path, npz[0])), classes
    sub = [d for d in ("train", "test") if os.path.isdir(os.path.join(path, d))]
    if sub == ["train", "test"]:
        xtr, ytr, cls = read_image_folder(os.path.join(path, "train"))
        xte, yte, cls_test = read_image_folder(os.path.join(path, "test"))
        if cls != cls_test:
            raise DatasetError(f"{path}: train/ and test/ have different class folders")
        return {"train": (xtr, ytr), "test": (xte, yte)}, cls
    x, y, cls = read_image_folder(path)
    return {"all": (x, y)}, cls


def _load_images(
    name: str,
    source: str,
    sets: Dict[str, Tuple[np.ndarray, np.ndarray]],
    classes: Optional[List[str]],
    split: str,
    k: Optional[int],
    seed: int,
    standardize: bool,
) -> LoadedDataset:
    import torch

    if "all" not in sets and k is None:  # official split, kept as is
        train, test = sets["train"], sets["test"]
    else:
        if "all" in sets:
            x, y = sets["all"]
        else:
            x = np.concatenate([sets["train"][0], sets["test"][0]])
            y = np.concatenate([sets["train"][1], sets["test"][1]])
        if k is not None:
            if k > len(y):
                raise DatasetError(f"{source}: subset of {k} requested, it has {len(y)} images")
            keep = subset(len(y), k, seed)
            x, y = x[keep], y[keep]
        tr, te = split_indices(len(y), IMAGE_TEST_FRACTION, seed)
        train, test = (x[tr], y[tr]), (x[te], y[te])
    if split == "all":
        chosen = (np.concatenate([train[0], test[0]]), np.concatenate([train[1], test[1]]))
    else:
        chosen = train if split == "train" else test
    xt = torch.from_numpy(chosen[0].astype(np.float32) / np.float32(255.0))
    mean = std = None
    if standardize:
        ref = train[0].astype(np.float64) / 255.0
        m = ref.mean(axis=(0, 2, 3))
        s = np.maximum(ref.std(axis=(0, 2, 3)), 1e-6)
        xt = (xt - torch.from_numpy(m.astype(np.float32))[None, :, None, None]) / torch.from_numpy(
            s.astype(np.float32)
        )[None, :, None, None]
        mean, std = [float(v) for v in m], [float(v) for v in s]
    yt = torch.from_numpy(np.ascontiguousarray(chosen[1], dtype=np.int64))
    return LoadedDataset(name, "image", split, xt, yt, source, classes=classes, mean=mean, std=std)


def _text_documents(path: str, manifest: Dict[str, Any]) -> List[str]:
    if os.path.isfile(path):
        return [read_text(path)]
    docs = manifest.get("documents")
    if docs is None:
        docs = sorted(f for f in os.listdir(path) if f.endswith(".txt"))
    if not docs:
        raise DatasetError(f"{path}: no .txt documents found")
    return [read_text(os.path.join(path, d)) for d in docs]


def _load_text(
    name: str,
    source: str,
    manifest: Dict[str, Any],
    split: str,
    k: Optional[int],
    seed: int,
    seq_len: int,
) -> LoadedDataset:
    import torch

    vocab = build_vocab()
    text = split_text(_text_documents(source, manifest), split)
    ids = encode(text, vocab)
    x, y = text_windows(ids, seq_len)
    if k is not None:
        if k > len(x):
            raise DatasetError(
                f"{source}: subset of {k} windows requested, the {split} split has {len(x)} "
                f"windows of {seq_len} characters"
            )
        keep = subset(len(x), k, seed)
        x, y = x[keep], y[keep]
    return LoadedDataset(
        name,
        "text",
        split,
        torch.from_numpy(np.ascontiguousarray(x)),
        torch.from_numpy(np.ascontiguousarray(y)),
        source,
        vocab=vocab,
        ids=torch.from_numpy(ids),
    )
