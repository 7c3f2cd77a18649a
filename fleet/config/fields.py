"""Bounds and small field readers for untrusted tables: the fleet TOML's and the wire's.

A hostile or mistyped file must fail in milliseconds with one line naming the file, the table
and the field, instead of exhausting memory or falling back to a silent default. The bounds
(file size, devices after ``count`` expansion, string lengths, the [run] numbers' ranges) live
here; the keys and their types are declared in ``fleet.config.schema``, which the fleet loader
(``fleet.config.fleetfile``) and the instruction decoder (``clients/records.py``) both read
through, so they refuse exactly the same values. Names go through ``fleet.common.names`` (one
alphabet everywhere).
"""

from __future__ import annotations

from fleet.common.errors import InputError
from fleet.method.selection import LINEAR_OPTIMIZERS, SQRT_OPTIMIZERS

MAX_FLEET_BYTES = 4 * 1024 * 1024


MAX_DEVICES = 100_000  # after count expansion; a 1,000-device what-if is far below


MAX_TEXT = 4096  # a path, a model name, a text setting


MAX_ROUNDS = 100_000


MAX_SEED = 2**32 - 1


MAX_BATCH = 1 << 20


# What the trainer and scaled_lr know: the learning-rate rule's optimizers, in one place.
OPTIMIZERS = SQRT_OPTIMIZERS + LINEAR_OPTIMIZERS


def require_field(table: dict, key: str, where: str, kind: type | tuple[type, ...]) -> object:
    if key not in table:
        raise InputError(f"{where}: missing field '{key}'")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}: field '{key}' has the wrong type ({show_value(value)})")
    return value


def show_value(value: object) -> str:
    """A value for an error line: its repr, cut short (a 100 kB string stays one short line)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def text_field(table: dict, key: str, where: str, default: str | None = None) -> str:
    """A string field of at most MAX_TEXT characters, no control characters; ``default`` when
    absent (None: required)."""
    if key not in table and default is not None:
        return default
    value = require_field(table, key, where, str)
    assert isinstance(value, str)
    if not value or len(value) > MAX_TEXT or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(
            f"{where}: field '{key}' must be 1-{MAX_TEXT} printable characters, "
            f"got {show_value(value)}"
        )
    return value


def choice_field(table: dict, key: str, where: str, default: str, allowed) -> str:  # noqa: ANN001
    value = table.get(key, default)
    if not isinstance(value, str) or value not in allowed:
        raise InputError(
            f"{where}: {key} must be one of {', '.join(allowed)}, got {show_value(value)}"
        )
    return value
