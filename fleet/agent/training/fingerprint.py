"""What makes two fine-tunes the same run: a fingerprint a checkpoint must match to be resumed.

Why separate: resuming a checkpoint of another run would silently mix two experiments, so the
fingerprint (model structure and initial weights, data sizes and a hash of its first/last samples,
and the run's settings) is written into every checkpoint and compared field by field on load;
the hashing is its own concern, apart from the loop and the file. Python 3.6 + torch 1.10
compatible.
"""

import hashlib
import json
from typing import Any, Dict, List, Sequence

import torch
import torch.nn as nn

from fleet.agent.training.indexed_data import IndexedData

HASH_ITEMS = 8  # first/last samples hashed into the data fingerprint


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    try:
        return t.numpy().tobytes()
    except (TypeError, RuntimeError):  # bfloat16 and friends have no numpy dtype
        return t.to(torch.float64).numpy().tobytes()


def _tensor_digest(tensors: Sequence[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(_tensor_bytes(t))
    return h.hexdigest()[:16]


def data_fingerprint(data: IndexedData) -> Dict[str, Any]:
    """Size, sample shape/dtype and a hash of the first and last few samples."""
    k = min(HASH_ITEMS, data.n)
    idx = list(range(k)) + [i for i in range(data.n - k, data.n) if i >= k]
    xs, ys = data.batch(torch.tensor(idx, dtype=torch.long))
    return {
        "size": data.n,
        "shape": list(xs.shape[1:]),
        "dtype": str(xs.dtype).replace("torch.", ""),
        "head_tail": _tensor_digest([xs, ys]),
    }


def run_fingerprint(
    model: nn.Module,
    train: IndexedData,
    test: IndexedData,
    settings: Dict[str, Any],
) -> Dict[str, Any]:
    """What makes two runs the same run; a checkpoint resumes only a run with an equal one."""
    state = model.state_dict()
    structure = json.dumps([[k, list(v.shape), str(v.dtype)] for k, v in state.items()])
    fp = {
        "model": type(model).__name__,
        "params": hashlib.sha256(structure.encode()).hexdigest()[:16],
        "init_weights": _tensor_digest(list(state.values())),
        "train": data_fingerprint(train),
        "test": data_fingerprint(test),
    }  # type: Dict[str, Any]
    fp.update(settings)
    return fp


def fingerprint_diff(saved: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """Each field where a saved fingerprint differs from this run's, as one phrase."""
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    diffs.append(
                        "{}.{} is {} there, {} here".format(key, sub, a.get(sub), b.get(sub))
                    )
        else:
            diffs.append("{} is {} there, {} here".format(key, a, b))
    return diffs
