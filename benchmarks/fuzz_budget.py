"""Fuzz target family: the live budget file (watts or ``none``) a board re-reads.

Separate because its reader lives in the kernel the board runs (``fleet.method.budget``) and its
inputs are one line.
"""

from __future__ import annotations

import importlib
import os

from benchmarks.fuzz_harness import Format, classify_call, finite
from benchmarks.fuzz_mutators import HOSTILE, mutate


def budget_format(tmp: str):
    """A live budget file (watts or ``none``): fuzzed when this tree has a reader for it."""
    reader = None
    try:
        reader = importlib.import_module("fleet.method.budget").read_budget_file
    except (ImportError, AttributeError):
        pass

    class Fmt(Format):
        name = "budget file"
        available = reader is not None
        why_skipped = "no budget-file reader in this tree yet"

        def run_one(self, rng, limit_s):
            seed = rng.choice([b"7.5\n", b"none\n", b"4\n"])
            pool = [lambda r, d: r.choice(HOSTILE).encode("utf-8", "replace") + b"\n"]
            data = mutate(rng, seed, pool)
            path = os.path.join(tmp, "budget")
            with open(path, "wb") as fh:
                fh.write(data)

            def check(v):
                if v is None:
                    return None
                return None if finite(v) and v > 0 else f"budget {v} accepted"

            return (*classify_call(lambda: reader(path), check, limit_s), data)

    return Fmt()
