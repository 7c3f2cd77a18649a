"""Text datasets on the device: UTF-8 documents, their contiguous train/test split, and the
next-character windows the character models train on.

Each document is split contiguously, its first 90 % to train and its last 10 % to test, so test
text is never seen in training. Text comes back as windows ``x[N, T]``, ``y[N, T]`` (int64, y is
x shifted by one character) of length ``seq_len`` (64) taken every ``seq_len`` characters;
``CharSequenceDataset`` gives every offset lazily instead.

Why separate: reading and windowing text is independent of the image readers and of the
vocabulary policy (``fleet.agent.data.vocab``), which it only consumes as ids.
"""

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.splits import contiguous_split

TEXT_TEST_FRACTION = 0.1
SEQ_LEN = 64


def text_windows(
    ids: np.ndarray, seq_len: int = SEQ_LEN, stride: Optional[int] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Inputs ``x[N, T]`` and next-character targets ``y[N, T]`` every ``stride`` characters
    (default ``seq_len``: non-overlapping, so every character is a target once)."""
    stride = stride or seq_len
    if seq_len < 1 or stride < 1:
        raise ValueError("seq_len and stride must be >= 1")
    n = (len(ids) - 1 - seq_len) // stride + 1 if len(ids) > seq_len else 0
    starts = np.arange(n, dtype=np.int64) * stride
    offsets = starts[:, None] + np.arange(seq_len, dtype=np.int64)[None, :]
    return ids[offsets], ids[offsets + 1]


class CharSequenceDataset(object):
    """Windows of a character-id stream for a torch ``DataLoader``: item ``i`` is
    ``(x[T], y[T])`` LongTensors starting at ``i * stride`` (default stride 1: every offset)."""

    def __init__(self, ids: Any, seq_len: int = SEQ_LEN, stride: int = 1) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.seq_len = seq_len
        self.stride = stride
        self.n = (len(self.ids) - 1 - seq_len) // stride + 1 if len(self.ids) > seq_len else 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tuple[Any, Any]:
        import torch

        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"window {i} out of range ({self.n} windows)")
        s = i * self.stride
        x = torch.from_numpy(self.ids[s : s + self.seq_len].copy())
        y = torch.from_numpy(self.ids[s + 1 : s + 1 + self.seq_len].copy())
        return x, y


def read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None


def split_text(
    documents: Sequence[str], split: str, test_fraction: float = TEXT_TEST_FRACTION
) -> str:
    """Each document cut contiguously (first 90 % train, last 10 % test), parts joined by a
    blank line; ``split="all"`` keeps every document whole."""
    parts = []
    for doc in documents:
        cut = contiguous_split(len(doc), test_fraction)
        parts.append(doc if split == "all" else doc[:cut] if split == "train" else doc[cut:])
    return "\n\n".join(p for p in parts if p)
