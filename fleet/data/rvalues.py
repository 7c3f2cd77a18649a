"""R values as Python objects, and the error for bytes that are not one.

R values map to Python as: ``NULL`` -> ``None``; atomic and list vectors -> :class:`RVector` (a
``list`` with ``rtype`` and ``attributes``; NA -> ``None``); symbols -> :class:`RSymbol` (a
``str``); pairlists and calls -> :class:`RPairList`; environments -> :class:`REnvironment`.
``attr`` reads an attribute and ``as_strings`` the lines of text a value holds.

Why separate: the serialization decoder (``fleet.data.rserialize``) builds these values, the
lazy-load reader (``fleet.data.rlazyload``) and the dataset builders read them; neither needs the
other to interpret a value.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RDataError",
    "REnvironment",
    "RPairList",
    "RSymbol",
    "RVector",
    "as_strings",
    "attr",
]


class RDataError(ValueError):
    """The bytes are not an R serialization this reader understands; the message says where."""


class RVector(list):
    """An R vector: its elements (NA as None) plus the R type name and attributes."""

    def __init__(self, items=(), rtype: str = "list", attributes: dict | None = None) -> None:
        super().__init__(items)
        self.rtype = rtype
        self.attributes = attributes or {}

    def __repr__(self) -> str:
        head = list.__repr__(self[:6]) if len(self) > 6 else list.__repr__(self)
        return f"RVector<{self.rtype}>[{len(self)}]{head}"


class RSymbol(str):
    """An R symbol (a name), distinct from a character string."""


class RPairList(list):
    """A pairlist or call: a list of ``(tag, value)`` pairs; ``rtype`` says which."""

    def __init__(self, items=(), rtype: str = "pairlist", attributes: dict | None = None) -> None:
        super().__init__(items)
        self.rtype = rtype
        self.attributes = attributes or {}

    def as_dict(self) -> dict[str, Any]:
        return {str(tag): value for tag, value in self}


class REnvironment:
    """An environment, or a named placeholder for one (global/base/empty/namespace/persistent)."""

    def __init__(self, kind: str, name: Any = None) -> None:
        self.kind = kind
        self.name = name
        self.frame: dict[str, Any] = {}
        self.enclosure: Any = None
        self.attributes: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"REnvironment({self.kind}, {self.name!r})"


def attr(obj: Any, name: str, default: Any = None) -> Any:
    """An R attribute of a value (``names``, ``class``, ``row.names``...), or ``default``."""
    return getattr(obj, "attributes", {}).get(name, default)


def as_strings(obj: Any, source: str = "<object>") -> list[str]:
    """The lines of text an R object holds: a character vector, a factor, or a data frame's
    ``text`` column (the shapes text packages use). NA becomes an empty string."""
    if isinstance(obj, RVector) and obj.rtype == "character":
        return ["" if s is None else s for s in obj]
    if isinstance(obj, RVector) and "factor" in (attr(obj, "class") or []):
        levels = attr(obj, "levels") or []
        return ["" if i is None else levels[i - 1] for i in obj]
    if isinstance(obj, RVector) and obj.rtype == "list":
        names = list(attr(obj, "names") or [])
        if "text" in names:
            return as_strings(obj[names.index("text")], source)
        chars = [c for c in obj if isinstance(c, RVector) and c.rtype == "character"]
        if len(chars) == 1:
            return as_strings(chars[0], source)
    kind = getattr(obj, "rtype", type(obj).__name__)
    raise RDataError(f"{source}: expected a character vector or a data frame of text, got {kind}")
