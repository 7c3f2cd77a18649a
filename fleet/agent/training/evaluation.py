"""Accuracy on the held-out split, the measure every stop decision of the trainer is taken on.

Why separate: its rules (top-1 for classification, per character for sequence models, counts kept
on the device, one sync at the end) are independent of the training loop, which only asks it
for a number at each evaluation; it can be called on its own with any model and test split.
Python 3.6 + torch 1.10 compatible.
"""

from typing import Any

import torch
import torch.nn as nn

from fleet.agent.training.indexed_data import IndexedData
from fleet.agent.training.train_state import TrainerError


def evaluate(
    model: nn.Module,
    data: Any,
    batch_size: int = 256,
    device: Any = "cpu",
    task: str = "classification",
) -> float:
    """Top-1 accuracy (classification) or per-character accuracy (char, targets [b, T]).

    Counts stay on the device; one ``.item()`` at the end is the only sync.
    """
    d = data if isinstance(data, IndexedData) else IndexedData(data, "test_set")
    dev = torch.device(device)
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=dev)
    total = 0
    try:
        with torch.no_grad():
            for start in range(0, len(d), batch_size):
                idx = torch.arange(start, min(start + batch_size, len(d)))
                xb, yb = d.batch(idx)
                xb, yb = xb.to(dev), yb.to(dev)
                out = model(xb)
                if task == "char":
                    if out.dim() != 3:
                        raise TrainerError(
                            "task 'char' needs logits [b, T, V], got {}".format(list(out.shape))
                        )
                    pred = out.argmax(-1)
                else:
                    if out.dim() != 2:
                        raise TrainerError(
                            "task 'classification' needs logits [b, K], got {}; use task='char' "
                            "for sequence models".format(list(out.shape))
                        )
                    pred = out.argmax(1)
                correct += (pred == yb).sum()
                total += int(yb.numel())
    finally:
        model.train(was_training)
    return float(correct.item()) / max(1, total)
