"""The machinery of a typed, versioned record: its fields, and the one-line refusals.

Why apart from the records (``records.py``): what a field is, how a record checks a dict and
how it refuses one (a field it does not know, with the closest known name; a missing field; a
wrong type; a number out of bounds) is written once for every record. Python 3.6, standard
library only.
"""

import difflib
import math
from typing import Any, Dict, Optional, Tuple  # noqa: F401 - used in type comments


class RecordError(ValueError):
    """A record that does not fit its type: the message is one line naming record and field."""


_KINDS = {  # kind -> (accepts, what the message says was expected)
    "int": ("an integer", None),
    "float": ("a number", None),
    "str": ("text", (str,)),
    "bool": ("true or false", (bool,)),
    "list": ("a list", (list, tuple)),
    "dict": ("an object", (dict,)),
    "any": ("a value", None),
}


class Field(object):
    """One field: its name, kind (int, float, str, bool, list, dict, any), whether it must be
    given, its default, whether null is allowed and, for numbers, its bounds."""

    __slots__ = ("name", "kind", "required", "default", "null", "lo", "hi")

    def __init__(
        self,
        name: str,
        kind: str,
        required: bool = False,
        default: Any = None,
        null: bool = True,
        lo: Optional[float] = None,
        hi: Optional[float] = None,
    ) -> None:
        if kind not in _KINDS:
            raise ValueError("unknown field kind {!r}".format(kind))
        self.name, self.kind, self.required, self.default = name, kind, required, default
        self.null, self.lo, self.hi = null, lo, hi

    def check(self, value: Any, record: str) -> Any:
        """``value`` as this field holds it, or RecordError naming the record and field."""
        if value is None:
            if self.null:
                return None
            raise RecordError("{} field '{}' must not be null".format(record, self.name))
        expected, types = _KINDS[self.kind]
        if self.kind in ("int", "float"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and self.kind == "int" and isinstance(value, float):
                ok = math.isfinite(value) and value == int(value)
            if not ok:
                raise RecordError(
                    "{} field '{}' must be {}, got {}".format(
                        record, self.name, expected, _shown(value)
                    )
                )
            value = int(value) if self.kind == "int" else float(value)
            lo = -math.inf if self.lo is None else self.lo
            hi = math.inf if self.hi is None else self.hi
            if not (math.isfinite(value) and lo <= value <= hi):
                raise RecordError(
                    "{} field '{}' must be in [{:g}, {:g}], got {!r}".format(
                        record, self.name, lo, hi, value
                    )
                )
            return value
        if types is not None and not isinstance(value, types):
            raise RecordError(
                "{} field '{}' must be {}, got {}".format(
                    record, self.name, expected, _shown(value)
                )
            )
        return list(value) if self.kind == "list" else value


def _shown(value: Any) -> str:
    text = repr(value)
    return "{} {}".format(type(value).__name__, text if len(text) <= 40 else text[:37] + "...")


def closest(name: str, known: Any, cutoff: float = 0.5) -> str:
    """The known field nearest to ``name`` (difflib), for the refusal's hint ("" when none
    is at least ``cutoff`` alike)."""
    hits = difflib.get_close_matches(str(name), list(known), n=1, cutoff=cutoff)
    return hits[0] if hits else ""


class Record(object):
    """The base of every record. A subclass sets ``NAME`` (how messages call it), ``VERSION``,
    ``FIELDS`` (a tuple of ``Field``) and ``__slots__`` (the field names); ``TOP`` says whether
    its ``to_dict`` carries ``version`` (a record that travels alone) or not (a part of one)."""

    __slots__ = ()
    NAME = "record"
    VERSION = 1
    TOP = True
    FIELDS = ()  # type: Tuple[Field, ...]

    def __init__(self, *args: Any, **values: Any) -> None:
        if len(args) > len(self.FIELDS):
            raise RecordError("{} takes at most {} fields".format(self.NAME, len(self.FIELDS)))
        for f, value in zip(self.FIELDS, args):
            if f.name in values:
                raise RecordError("{} field '{}' given twice".format(self.NAME, f.name))
            values[f.name] = value
        self._refuse_unknown(values, "")
        for f in self.FIELDS:
            if f.name in values:
                setattr(self, f.name, values[f.name])
            elif f.required:
                raise RecordError("{} needs field '{}'".format(self.NAME, f.name))
            else:
                d = f.default
                setattr(self, f.name, list(d) if isinstance(d, list) else d)

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        return tuple(f.name for f in cls.FIELDS)

    @classmethod
    def _refuse_unknown(cls, data: Dict[str, Any], where: str) -> None:
        known = cls.names()
        for key in data:
            if key not in known:
                near = closest(key, known)
                raise RecordError(
                    "{}unknown field '{}' in {} v{}{}".format(
                        where + ": " if where else "",
                        str(key)[:80],
                        cls.NAME,
                        cls.VERSION,
                        " (closest: '{}')".format(near) if near else "",
                    )
                )

    def to_dict(self) -> Dict[str, Any]:
        """Plain values (nested records as dicts), ``version`` first on a top-level record."""
        out = {"version": self.VERSION} if self.TOP else {}  # type: Dict[str, Any]
        for f in self.FIELDS:
            value = getattr(self, f.name)
            if isinstance(value, list):
                value = [v.to_dict() if isinstance(v, Record) else v for v in value]
            elif isinstance(value, Record):
                value = value.to_dict()
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> Any:
        """The record, every field checked; RecordError "<where>: <one line>" otherwise."""
        prefix = where + ": " if where else ""
        if not isinstance(data, dict):
            raise RecordError(
                "{}{} must be an object, got {}".format(prefix, cls.NAME, _shown(data))
            )
        data = dict(data)
        version = data.pop("version", cls.VERSION)
        if version != cls.VERSION or isinstance(version, bool):
            raise RecordError(
                "{}{} version {!r:.20} is not this side's version {}".format(
                    prefix, cls.NAME, version, cls.VERSION
                )
            )
        cls._refuse_unknown(data, where)
        values = {}
        for f in cls.FIELDS:
            if f.name not in data:
                if f.required:
                    raise RecordError("{}{} needs field '{}'".format(prefix, cls.NAME, f.name))
                continue
            try:
                values[f.name] = cls._checked(f, data[f.name])
            except RecordError as exc:
                raise RecordError(prefix + str(exc)) from None
        return cls(**values)

    @classmethod
    def _checked(cls, f: Field, value: Any) -> Any:
        """A subclass hook for fields holding records (``Segment`` lists)."""
        return f.check(value, cls.NAME)

    def replace(self, **values: Any) -> Any:
        """A copy with some fields changed (unknown names refused)."""
        self._refuse_unknown(values, "")
        out = dict((f.name, getattr(self, f.name)) for f in self.FIELDS)
        out.update(values)
        return type(self)(**out)

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self.names()
        )

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclasses it replaces

    def __repr__(self) -> str:
        inner = ", ".join("{}={!r}".format(n, getattr(self, n)) for n in self.names())
        return "{}({})".format(type(self).__name__, inner)
