"""Where a key stands in a TOML file's text, for errors that say FILE:LINE.

Why apart from the schema (``schema.py``): tomllib gives values, not lines; finding the line of
``key = ...`` in the n-th ``[table]`` or ``[[table]]`` is a reading of the text, the same for
every table the schema checks.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def key_line(text: str, table: str | None, index: int, key: str) -> int | None:
    """The 1-based line of ``key = ...`` in the ``index``-th (0-based) ``[table]`` or
    ``[[table]]`` of ``text`` (``table`` None: the top level, where a table's own header
    counts as its key), or None when it cannot be found (an inline table, say)."""
    assign = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*=")
    inside, seen = table is None, -1
    for n, line in enumerate(text.splitlines(), start=1):
        head = _HEADER.match(line)
        if head:
            name = head.group(1).strip("\"'")
            if table is None:
                if name == key or name.startswith(key + "."):
                    return n
                inside = False
                continue
            if name == table:
                seen += 1
                inside = seen == index
            elif inside:
                inside = False
                if seen >= index:
                    return None
            continue
        if inside and assign.match(line):
            return n
    return None


def locator(path: object, text: str, table: str | None, index: int, label: str):  # noqa: ANN201
    """A ``key -> "FILE:LINE: label"`` function for the errors of one table."""

    def where(key: str) -> str:
        line = key_line(text, table, index, key)
        place = f"{path}:{line}" if line is not None else f"{path}"
        return f"{place}: {label}" if label else place

    return where
