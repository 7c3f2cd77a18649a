"""A named table of plug-ins (objectives, baselines): one entry per name, in insertion order.

Why a class of its own: the objective and baseline tables behave the same way (register once,
look up by name with a one-line error listing the known names, unregister in tests), and the
CLI, the fleet file, the wire and the reports iterate over them as plain dicts.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from fleet.common.errors import InputError

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """``name -> entry``; ``what`` names the kind of entry in error messages."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def register(self, name: str, entry: T) -> T:
        """Add an entry (a name already taken is a programming error, not user input)."""
        if name in self:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self.pop(name, None)

    def get_entry(self, name: str) -> T:
        """The named entry, or one InputError listing the known names."""
        try:
            return self[name]
        except KeyError:
            raise InputError(
                f"{self.what} must be one of {', '.join(self)}, got {name!r}"
            ) from None
