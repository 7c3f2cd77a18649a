"""Deterministic subsets and splits of a dataset, the same on every numpy version.

Why separate: the image loader (seeded subset, then a seeded 80/20 split) and the text readers
(each document cut contiguously, 90/10) share these index rules; kept apart, the rules are
stated once and tested on their own.
"""

from typing import Tuple

import numpy as np

from fleet.agent.data.dataerror import DatasetError

# --------------------------------------------------------------------------------------------
# Deterministic subsets and splits (numpy's legacy RandomState: same stream on every version).


def split_indices(n: int, test_fraction: float, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Shuffle ``range(n)`` with ``seed`` and cut it: (train, test) sorted int64 index arrays,
    disjoint, covering ``range(n)``, ``round(n * test_fraction)`` in test."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    perm = np.random.RandomState(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)


def subset(n: int, k: int, seed: int = 0) -> np.ndarray:
    """``k`` distinct indices from ``range(n)``, chosen with ``seed``, sorted (int64)."""
    if not 0 <= k <= n:
        raise DatasetError(f"subset of {k} requested from {n} samples")
    perm = np.random.RandomState(seed).permutation(n)
    return np.sort(perm[:k]).astype(np.int64)


def contiguous_split(length: int, test_fraction: float) -> int:
    """Where a sequence is cut so the last ``test_fraction`` of it is the test part."""
    return length - int(round(length * test_fraction))
