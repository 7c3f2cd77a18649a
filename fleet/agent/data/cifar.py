"""CIFAR-10/100 python pickles read on the device, through an unpickler that builds plain
containers and numpy arrays only.

Why separate: a pickle can run code, so this reader is the one place that decides what a data
file may reconstruct; it also knows the CIFAR folder layouts (``data_batch_1..5`` + ``test_batch``
for CIFAR-10, ``train`` + ``test`` with fine/coarse labels for CIFAR-100) and their meta files.
"""

import io
import os
import pickle
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.imagefiles import read_bytes

# --------------------------------------------------------------------------------------------
# CIFAR-10/100 python pickles: dict with b"data" uint8 [N, 3072] (RRR..GGG..BBB.. per image)
# and b"labels" (CIFAR-10) or b"fine_labels"/b"coarse_labels" (CIFAR-100).

_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _DataUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a data file must not run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_GLOBALS:
            return super(_DataUnpickler, self).find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path: str) -> Any:
    raw = read_bytes(path)
    try:
        return _DataUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # pickle raises many types on garbage; all mean the same here
        raise DatasetError(
            f"{path}: not a CIFAR python pickle ({type(exc).__name__}: {exc})"
        ) from None


def _str_keys(obj: Any) -> Dict[str, Any]:
    out = {}
    for k, v in obj.items():
        out[k.decode("latin-1") if isinstance(k, bytes) else str(k)] = v
    return out


def read_cifar_batch(path: str, labels: str = "fine") -> Tuple[np.ndarray, np.ndarray]:
    """One CIFAR batch file as (uint8 [N, 3, 32, 32], int64 [N]); ``labels`` picks CIFAR-100's
    ``fine`` (100 classes) or ``coarse`` (20 superclasses) labels."""
    expected = "a pickled dict with b'data' (uint8 [N, 3072]) and b'labels' or b'fine_labels'"
    obj = _unpickle(path)
    if not isinstance(obj, dict):
        raise DatasetError(
            f"{path}: not a CIFAR batch (got {type(obj).__name__}; expected {expected})"
        )
    d = _str_keys(obj)
    key = "labels" if "labels" in d else labels + "_labels"
    if "data" not in d or key not in d:
        raise DatasetError(f"{path}: not a CIFAR batch (keys {sorted(d)}; expected {expected})")
    data = d["data"]
    if isinstance(data, (bytes, bytearray)):
        data = np.frombuffer(data, dtype=np.uint8)
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.size % 3072:
        raise DatasetError(
            f"{path}: CIFAR data is {data.dtype} of shape {list(data.shape)}, expected {expected}"
        )
    x = data.reshape(-1, 3, 32, 32)
    try:
        y = np.asarray(d[key], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise DatasetError(f"{path}: CIFAR {key} are not integers") from None
    if y.shape[0] != x.shape[0]:
        raise DatasetError(f"{path}: {y.shape[0]} CIFAR {key} for {x.shape[0]} images")
    return np.ascontiguousarray(x), y


def cifar_files(folder: str) -> Optional[Tuple[List[str], List[str], Optional[str]]]:
    """(train files, test files, meta file) of a CIFAR folder, or None if it is not one."""
    batches = sorted(
        f for f in os.listdir(folder) if f.startswith("data_batch_") and not f.endswith(".meta")
    )
    if batches and os.path.isfile(os.path.join(folder, "test_batch")):
        meta = os.path.join(folder, "batches.meta")
        train = [os.path.join(folder, f) for f in batches]
        return train, [os.path.join(folder, "test_batch")], meta if os.path.isfile(meta) else None
    train_file, test_file = os.path.join(folder, "train"), os.path.join(folder, "test")
    if os.path.isfile(train_file) and os.path.isfile(test_file):
        meta = os.path.join(folder, "meta")
        return [train_file], [test_file], meta if os.path.isfile(meta) else None
    return None


def cifar_classes(meta: Optional[str], labels: str) -> Optional[List[str]]:
    if meta is None:
        return None
    obj = _unpickle(meta)
    if not isinstance(obj, dict):
        raise DatasetError(f"{meta}: not a CIFAR meta file (expected a pickled dict)")
    d = _str_keys(obj)
    names = d.get("label_names") or d.get(labels + "_label_names")
    if not names:
        return None
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]
