"""The wire of what the fleet learnt: each device's own efficiency in a train instruction.

Why apart from ``records.py``: the coordinator's efficiency store (``fleet.trust.efficiency_store``)
ships every device its posterior samples-to-target next round; the instruction carries them as
one JSON object, ``{device: {"batch_sizes", "samples_to_accuracy", "std", "learned_from"}}``, and
every entry is checked like the shipped vector before a device trains with it.
"""

from __future__ import annotations

import json
from typing import Any

from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency

MAX_TEXT = 16 * 1024 * 1024
MAX_BATCH_SIZES = 4096
MAX_SOURCE = 1024


def learned_efficiency(raw: dict[str, Any], source: str) -> Efficiency:
    """A device's learnt efficiency from the instruction (checked like the shipped vector)."""
    bs, ns, sd = raw.get("batch_sizes"), raw.get("samples_to_accuracy"), raw.get("std")
    named = raw.get("source")
    if isinstance(named, str) and named:
        source = named[:MAX_SOURCE]
    if not isinstance(bs, list) or not isinstance(ns, list):  # decode_efficiencies checked it
        raise InputError("expected 'batch_sizes' and 'samples_to_accuracy' lists")
    eff = Efficiency.from_vector(bs, ns, source=source)
    if isinstance(sd, list) and len(sd) == len(bs):
        eff.std = {
            int(b): float(v)
            for b, v in zip(bs, sd, strict=True)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e15
        }
    eff.metadata = {"source": "learned", "learned_from": str(raw.get("learned_from", ""))[:200]}
    return eff


def encode_efficiencies(shipments: dict[str, Efficiency]) -> str:
    """Each device's learnt efficiency as the instruction's JSON (``EFFICIENCIES``)."""
    return json.dumps(
        {
            name: {
                "batch_sizes": eff.batch_sizes,
                "samples_to_accuracy": [eff.samples[b] for b in eff.batch_sizes],
                "std": [eff.std.get(b, 0.0) for b in eff.batch_sizes],
                "learned_from": eff.metadata.get("learned_from", ""),
                "source": eff.source,
            }
            for name, eff in shipments.items()
        }
    )


def decode_efficiencies(raw: object, where: str, key: str) -> dict[str, dict[str, Any]]:
    """The per-device learnt efficiencies, every entry checked (a bad one names its device)."""
    if not isinstance(raw, str) or len(raw) > MAX_TEXT:
        raise InputError(f"{where}: '{key}' must be JSON text of at most {MAX_TEXT} chars")
    got = json.loads(raw)
    if not isinstance(got, dict):
        raise InputError(f"{where}: '{key}' is not a JSON object")
    for name, entry in got.items():
        if not isinstance(entry, dict):
            raise InputError(f"{where}: '{key}' entry {str(name)[:64]!r}: not an object")
        bs, ns = entry.get("batch_sizes"), entry.get("samples_to_accuracy")
        if not isinstance(bs, list) or not isinstance(ns, list) or len(bs) > MAX_BATCH_SIZES:
            raise InputError(
                f"{where}: '{key}' entry {str(name)[:64]!r}: expected 'batch_sizes' and "
                "'samples_to_accuracy' lists"
            )
        try:
            learned_efficiency(entry, "check")
        except InputError as exc:
            raise InputError(f"{where}: '{key}' entry {str(name)[:64]!r}: {exc}") from None
    return got
