"""The trainer's view of a data set: batches by index from tensors or from a map-style Dataset.

Why separate: training, evaluation and the run's fingerprint all read data the same way, whatever
the caller passed (plain ``(x, y)`` tensors, a TensorDataset, or any Dataset of ``(x, y)`` items);
this one wrapper checks the input once and gathers batches by index. Python 3.6 + torch 1.10
compatible.
"""

from typing import Any, Optional, Tuple  # noqa: F401 - Optional in type comments

import torch

from fleet.agent.training.train_state import TrainerError


class IndexedData(object):
    """Batches by index from tensors (one gather) or from a Dataset (stack of items)."""

    def __init__(self, data: Any, what: str) -> None:
        self.what = what
        self.x = None  # type: Optional[torch.Tensor]
        self.y = None  # type: Optional[torch.Tensor]
        self.dataset = None  # type: Any
        tensors = getattr(data, "tensors", None)  # TensorDataset
        if tensors is not None and len(tensors) == 2:
            data = tensors
        if isinstance(data, (tuple, list)):
            if len(data) != 2 or not all(isinstance(t, torch.Tensor) for t in data):
                raise TrainerError("{} must be (inputs, targets) tensors or a Dataset".format(what))
            self.x, self.y = data[0], data[1]
            if self.x.shape[0] != self.y.shape[0]:
                raise TrainerError(
                    "{}: {} inputs but {} targets".format(what, self.x.shape[0], self.y.shape[0])
                )
            self.n = int(self.x.shape[0])
        elif hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            self.dataset = data
            self.n = len(data)
        else:
            raise TrainerError("{} must be (inputs, targets) tensors or a Dataset".format(what))
        if self.n < 1:
            raise TrainerError("{} is empty".format(what))

    def __len__(self) -> int:
        return self.n

    def index_on_data_device(self, idx: torch.Tensor) -> torch.Tensor:
        """The permutation where the tensors live, so a step's gather needs no copy of it."""
        if self.x is not None and idx.device != self.x.device:
            return idx.to(self.x.device)
        return idx

    def batch(self, idx: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.x is not None and self.y is not None:
            if idx.device != self.x.device:
                idx = idx.to(self.x.device)
            return self.x.index_select(0, idx), self.y.index_select(0, idx)
        items = [self.dataset[i] for i in idx.tolist()]
        xs = torch.stack([torch.as_tensor(it[0]) for it in items])
        ys = torch.stack([torch.as_tensor(it[1]) for it in items])
        return xs, ys
