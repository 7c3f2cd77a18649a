"""Read R's serialization format (``serialize``, ``saveRDS``, ``save``) in pure Python.

Why: two of the offline text corpora (Jane Austen's novels in ``r-cran-janeaustenr``, Moby Dick in
``r-cran-tokenizers``) ship only as R package data. Installing R to read a few megabytes of text
is out of proportion, and the format is simple. Why separate: decoding one serialized object is
independent of the lazy-load database that stores many of them (``fleet.data.rlazyload``).

What is covered (enough for package data: character vectors, lists, data frames, factors):

- the stream header of format version 2 and 3 (``X\\n`` = XDR big-endian binary, ``B\\n`` =
  native little-endian binary; ASCII ``A\\n`` is not supported), with the native encoding of v3;
- vectors: logical, integer, double, complex, character (CHARSXP with NA and encoding flags),
  raw, list (VECSXP) and expression vectors, long vectors;
- pairlists and language objects (attributes, tags), symbols, references (REFSXP) to earlier
  symbols / environments, environments (as plain objects), the special singletons (NULL, the
  global/base/empty environments, missing argument), persistent names (PERSISTSXP, what a
  lazy-load database writes for environments), S4 objects and the ALTREP compact sequences and
  wrappers that R >= 3.5 may write;
- byte code and external pointers are not supported (they never occur in package data) and raise
  :class:`RDataError`.

The values it returns are described in ``fleet.data.rvalues``.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import struct
import zlib
from builtins import int as Int  # the reader's method ``int`` shadows the type in its class
from pathlib import Path
from typing import Any

from fleet.data.rvalues import RDataError, REnvironment, RPairList, RSymbol, RVector

__all__ = ["decompress", "read_rds", "unserialize"]


# SEXP type codes (Rinternals.h) and the serialization's pseudo-types (serialize.c).
NILSXP, SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 0, 1, 2, 3, 4, 5, 6
SPECIALSXP, BUILTINSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP = 7, 8, 9, 10, 13, 14, 15
STRSXP, DOTSXP, ANYSXP, VECSXP, EXPRSXP, BCODESXP, EXTPTRSXP = 16, 17, 18, 19, 20, 21, 22
WEAKREFSXP, RAWSXP, S4SXP = 23, 24, 25
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP, MISSINGARG_SXP = 255, 254, 253, 252, 251
BASENAMESPACE_SXP, NAMESPACESXP, PACKAGESXP, PERSISTSXP = 250, 249, 248, 247
EMPTYENV_SXP, BASEENV_SXP, ATTRLANGSXP, ATTRLISTSXP, ALTREP_SXP = 242, 241, 240, 239, 238

NA_INTEGER = -(2**31)
# R's NA_real_ is a NaN whose low word is 1954; plain NaN stays NaN.
NA_REAL_LOW_WORD = 1954

IS_OBJECT_BIT, HAS_ATTR_BIT, HAS_TAG_BIT = 1 << 8, 1 << 9, 1 << 10
LATIN1_MASK, UTF8_MASK, BYTES_MASK = 1 << 2, 1 << 3, 1 << 1

VECTOR_NAMES = {
    LGLSXP: "logical",
    INTSXP: "integer",
    REALSXP: "double",
    CPLXSXP: "complex",
    STRSXP: "character",
    VECSXP: "list",
    EXPRSXP: "expression",
    RAWSXP: "raw",
}
PAIR_NAMES = {
    LISTSXP: "pairlist",
    LANGSXP: "call",
    CLOSXP: "closure",
    PROMSXP: "promise",
    DOTSXP: "dots",
}


class _Reader:
    """A cursor over one serialization stream; ``item()`` reads one SEXP recursively."""

    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.pos = 0
        self.source = source
        self.refs: list[Any] = []
        self.endian = ">"

    def fail(self, what: str) -> RDataError:
        return RDataError(f"{self.source}: {what} at byte {self.pos}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated R serialization (wanted {n} more bytes)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int(self) -> int:
        return struct.unpack(self.endian + "i", self.take(4))[0]

    def length(self) -> Int:
        n = self.int()
        if n == -1:  # long vector: two more ints, upper and lower 32 bits
            upper, lower = self.int(), self.int()
            n = (upper << 32) + (lower & 0xFFFFFFFF)
        if n < 0:
            raise self.fail(f"negative vector length {n}")
        return n

    def header(self) -> None:
        fmt = self.take(2)
        if fmt == b"X\n":
            self.endian = ">"
        elif fmt == b"B\n":
            self.endian = "<"
        elif fmt == b"A\n":
            raise self.fail("ASCII R serialization is not supported (only XDR/binary)")
        else:
            raise self.fail(f"not an R serialization (starts with {fmt!r}, expected b'X\\n')")
        version = self.int()
        self.int()  # writer's R version
        self.int()  # minimal reader R version
        if version == 3:
            self.take(self.int())  # native encoding name, e.g. b"UTF-8"
        elif version != 2:
            raise self.fail(f"unsupported serialization version {version} (expected 2 or 3)")

    # -- items --------------------------------------------------------------------------------

    def item(self) -> Any:
        flags = self.int()
        kind = flags & 0xFF
        levels = flags >> 12
        has_attr = bool(flags & HAS_ATTR_BIT)
        has_tag = bool(flags & HAS_TAG_BIT)

        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.int()
            if not 1 <= index <= len(self.refs):
                raise self.fail(f"reference {index} to an object not yet read")
            return self.refs[index - 1]
        if kind in (EMPTYENV_SXP, BASEENV_SXP, GLOBALENV_SXP, BASENAMESPACE_SXP):
            return REnvironment({242: "empty", 241: "base", 253: "global", 250: "base"}[kind])
        if kind == UNBOUNDVALUE_SXP:
            return REnvironment("unbound")
        if kind == MISSINGARG_SXP:
            return REnvironment("missing-argument")
        if kind in (PERSISTSXP, NAMESPACESXP, PACKAGESXP):
            names = self.string_vector()
            label = {PERSISTSXP: "persistent", NAMESPACESXP: "namespace", PACKAGESXP: "package"}
            env = REnvironment(label[kind], names)
            self.refs.append(env)
            return env
        if kind == SYMSXP:
            sym = RSymbol(self.item() or "")
            self.refs.append(sym)
            return sym
        if kind == ENVSXP:
            return self.environment()
        if kind in PAIR_NAMES:
            return self.pairlist(kind, has_attr, has_tag)
        if kind == ALTREP_SXP:
            return self.altrep()
        if kind == CHARSXP:
            return self.charsxp(levels)
        if kind == S4SXP:
            obj = RVector([], "S4")
        elif kind in VECTOR_NAMES:
            obj = self.vector(kind)
        elif kind in (SPECIALSXP, BUILTINSXP):
            obj = RVector([self.take(self.int()).decode("latin-1")], "builtin")
        else:
            raise self.fail(f"unsupported R object type {kind}")
        if has_attr:
            obj.attributes = self.attributes()
        return obj

    def string_vector(self) -> list[str | None]:
        if self.int() != 0:
            raise self.fail("malformed persistent-name string vector")
        return [self.item() for _ in range(self.int())]

    def charsxp(self, levels: Int) -> str | None:
        n = self.int()
        if n == -1:
            return None  # NA_character_
        raw = self.take(n)
        if levels & LATIN1_MASK:
            return raw.decode("latin-1")
        if levels & BYTES_MASK:
            return raw.decode("latin-1")
        return raw.decode("utf-8", errors="replace")

    def vector(self, kind: Int) -> RVector:
        n = self.length()
        name = VECTOR_NAMES[kind]
        items: list[Any]  # R's vector of this kind: bool, int, float, complex, str, None (NA)
        if kind in (LGLSXP, INTSXP):
            values = struct.unpack(f"{self.endian}{n}i", self.take(4 * n))
            if kind == LGLSXP:
                items = [None if v == NA_INTEGER else bool(v) for v in values]
            else:
                items = [None if v == NA_INTEGER else v for v in values]
        elif kind == REALSXP:
            items = self.doubles(n)
        elif kind == CPLXSXP:
            flat = self.doubles(2 * n)
            items = [
                None if re is None or im is None else complex(re, im)
                for re, im in zip(flat[0::2], flat[1::2], strict=True)
            ]
        elif kind == RAWSXP:
            items = list(self.take(n))
        elif kind == STRSXP:
            items = []
            for _ in range(n):
                flags = self.int()
                if flags & 0xFF != CHARSXP:
                    raise self.fail(f"character vector element of type {flags & 0xFF}")
                items.append(self.charsxp(flags >> 12))
        else:  # VECSXP, EXPRSXP
            items = [self.item() for _ in range(n)]
        return RVector(items, name)

    def doubles(self, n: Int) -> list[float | None]:
        raw = self.take(8 * n)
        values = list(struct.unpack(f"{self.endian}{n}d", raw))
        for i, v in enumerate(values):
            if math.isnan(v):
                low = struct.unpack(self.endian + "Q", raw[8 * i : 8 * i + 8])[0] & 0xFFFFFFFF
                if low == NA_REAL_LOW_WORD:
                    values[i] = None
        return values

    def attributes(self) -> dict[str, Any]:
        attrs = self.item()
        if attrs is None:
            return {}
        if not isinstance(attrs, RPairList):
            raise self.fail("attributes are not a pairlist")
        return attrs.as_dict()

    def pairlist(self, kind: Int, has_attr: bool, has_tag: bool) -> RPairList:
        """Pairlists are CONS cells: attributes, tag, CAR, then the CDR (read iteratively)."""
        out = RPairList([], PAIR_NAMES[kind])
        first = True
        while True:
            attrs = self.attributes() if has_attr else {}
            if first:
                out.attributes = attrs
                first = False
            tag = self.item() if has_tag else None
            out.append((tag, self.item()))
            # The CDR: continue the loop while it is another cell of a pairlist-like type.
            flags = self.int()
            kind = flags & 0xFF
            if kind == NILVALUE_SXP:
                return out
            if kind not in PAIR_NAMES:
                self.pos -= 4
                out.append((None, self.item()))  # dotted pair: keep the tail value
                return out
            has_attr = bool(flags & HAS_ATTR_BIT)
            has_tag = bool(flags & HAS_TAG_BIT)

    def environment(self) -> REnvironment:
        env = REnvironment("environment")
        self.refs.append(env)  # before the contents: they may refer back to it
        self.int()  # locked flag
        env.enclosure = self.item()
        frame = self.item()
        hashtab = self.item()
        attrs = self.item()
        if isinstance(frame, RPairList):
            env.frame.update(frame.as_dict())
        if isinstance(hashtab, RVector):
            for bucket in hashtab:
                if isinstance(bucket, RPairList):
                    env.frame.update(bucket.as_dict())
        if isinstance(attrs, RPairList):
            env.attributes = attrs.as_dict()
        return env

    def altrep(self) -> Any:
        """ALTREP: (class info, state, attributes); expand the classes R writes for data."""
        info = self.item()
        state = self.item()
        attrs = self.item()
        cls = str(info[0][1]) if isinstance(info, RPairList) and info else "?"
        start: float  # start and step: ints for compact_intseq
        step: float
        if cls == "compact_intseq" and isinstance(state, RVector) and len(state) == 3:
            n, start, step = (int(v) for v in state)
            obj = RVector([start + i * step for i in range(n)], "integer")
        elif cls == "compact_realseq" and isinstance(state, RVector) and len(state) == 3:
            n, start, step = int(state[0]), float(state[1]), float(state[2])
            obj = RVector([start + i * step for i in range(n)], "double")
        elif cls.startswith("wrap_") and isinstance(state, RVector) and state:
            inner = state[0]
            obj = RVector(inner, getattr(inner, "rtype", "list"))
            obj.attributes = dict(getattr(inner, "attributes", {}))
        elif cls == "deferred_string" and isinstance(state, RPairList) and state:
            inner = state[0][1]
            obj = RVector(["NA" if v is None else _r_number(v) for v in inner], "character")
        else:
            raise self.fail(f"unsupported ALTREP class {cls!r}")
        if isinstance(attrs, RPairList):
            obj.attributes.update(attrs.as_dict())
        return obj


def _r_number(v: Any) -> str:
    """How as.character() prints a number (enough for deferred integer/double strings)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


# -- public API -------------------------------------------------------------------------------


def decompress(data: bytes, source: str = "<bytes>") -> bytes:
    """Undo whatever compression R put around a serialization (gzip, bzip2, xz or none)."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:3] == b"BZh":
            return bz2.decompress(data)
        if data[:6] == b"\xfd7zXZ\x00":
            return lzma.decompress(data)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise RDataError(f"{source}: corrupt compressed data ({exc})") from None
    return data


def unserialize(data: bytes, source: str = "<bytes>") -> Any:
    """One R object from serialized bytes (compressed or not), as documented in the module."""
    data = decompress(data, source)
    if data[:5] in (b"RDX2\n", b"RDX3\n"):  # save() file: a pairlist of name -> value
        reader = _Reader(data[5:], source)
        reader.header()
        obj = reader.item()
        return obj.as_dict() if isinstance(obj, RPairList) else obj
    reader = _Reader(data, source)
    reader.header()
    try:
        return reader.item()
    except RecursionError:
        raise reader.fail("object nested too deeply") from None
    except (struct.error, UnicodeDecodeError) as exc:
        raise reader.fail(f"malformed R serialization ({exc})") from None


def read_rds(path: str | Path) -> Any:
    """Read an ``.rds`` (or ``.rda``/``.RData``) file."""
    path = Path(path)
    return unserialize(path.read_bytes(), str(path))
