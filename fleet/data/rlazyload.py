"""Read an R lazy-load database (the way R packages store their data) in pure Python.

A lazy-load database is a pair ``NAME.rdx`` / ``NAME.rdb``. The ``.rdx`` file is one serialized
object (gzip-compressed as ``saveRDS`` writes it, or a 4-byte length + zlib block) -- a list with
``variables`` (a named list of ``c(offset, length)`` integer pairs into ``.rdb``), ``references``
and ``compressed``. Each ``.rdb`` entry is a 4-byte big-endian uncompressed length followed by a
zlib stream (``compressed = TRUE``), or by a type byte and then the data (``'Z'`` zlib, ``'2'``
bzip2, ``'X'`` xz, ``'0'`` stored) for ``compressed = 2/3``.

Why separate: the database is an index plus compressed blocks; each block is one serialized
object, decoded by ``fleet.data.rserialize``.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from pathlib import Path
from typing import Any

from fleet.data.rserialize import unserialize
from fleet.data.rvalues import RDataError, RVector, attr

__all__ = ["LazyLoadDB"]


class LazyLoadDB:
    """An R lazy-load database (``NAME.rdx`` index + ``NAME.rdb`` data), read on demand.

    ``LazyLoadDB("pkg/data/Rdata")`` (or the path of either file); ``names()`` lists the
    objects, ``load(name)`` unserializes one.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        base = path.with_suffix("") if path.suffix in (".rdx", ".rdb") else path
        self.rdx = base.with_name(base.name + ".rdx")
        self.rdb = base.with_name(base.name + ".rdb")
        for p in (self.rdx, self.rdb):
            if not p.is_file():
                raise RDataError(f"{p}: missing (an R lazy-load database needs .rdx and .rdb)")
        index = _read_index(self.rdx)
        if not isinstance(index, RVector) or index.rtype != "list":
            raise RDataError(f"{self.rdx}: not a lazy-load index (expected a list)")
        parts = dict(zip(attr(index, "names") or [], index, strict=False))
        if "variables" not in parts:
            raise RDataError(f"{self.rdx}: not a lazy-load index (no 'variables' entry)")
        self.variables = _offsets(parts["variables"], self.rdx)
        self.references = _offsets(parts.get("references"), self.rdx)
        compressed = parts.get("compressed")
        self.compressed = compressed[0] if isinstance(compressed, RVector) and compressed else 1

    def names(self) -> list[str]:
        return list(self.variables)

    def __contains__(self, name: str) -> bool:
        return name in self.variables

    def raw(self, name: str) -> bytes:
        """The decompressed serialization of one object."""
        if name not in self.variables:
            raise KeyError(f"{self.rdb}: no object {name!r} (has {', '.join(self.variables)})")
        offset, length = self.variables[name]
        with open(self.rdb, "rb") as f:
            f.seek(offset)
            block = f.read(length)
        where = f"{self.rdb}[{name}]"
        if len(block) != length or length < 5:
            raise RDataError(f"{where}: truncated (wanted {length} bytes at offset {offset})")
        return _inflate_block(block, where)

    def load(self, name: str) -> Any:
        return unserialize(self.raw(name), f"{self.rdb}[{name}]")


def _read_index(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] in (b"\x1f\x8b", b"BZ") or data[:6] == b"\xfd7zXZ\x00" or data[:2] == b"X\n":
        return unserialize(data, str(path))
    return unserialize(_inflate_block(data, str(path)), str(path))


def _inflate_block(block: bytes, where: str) -> bytes:
    """A lazy-load block: 4-byte big-endian length, optional type byte, compressed data."""
    expected = struct.unpack(">I", block[:4])[0]
    body = block[4:]
    try:
        if body[:1] == b"x":  # a zlib header (compressed = TRUE)
            out = zlib.decompress(body)
        elif body[:1] == b"Z":
            out = zlib.decompress(body[1:])
        elif body[:1] == b"2":
            out = bz2.decompress(body[1:])
        elif body[:1] == b"X":
            out = lzma.decompress(body[1:])
        elif body[:1] == b"0":
            out = body[1:]
        else:
            raise RDataError(f"{where}: unknown compression type byte {body[:1]!r}")
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        if isinstance(exc, RDataError):
            raise
        raise RDataError(f"{where}: corrupt compressed block ({exc})") from None
    if len(out) != expected:
        raise RDataError(f"{where}: inflated to {len(out)} bytes, header says {expected}")
    return out


def _offsets(obj: Any, source: Path) -> dict[str, tuple[int, int]]:
    if obj is None:
        return {}
    names = attr(obj, "names") or []
    out = {}
    for name, pair in zip(names, obj, strict=False):
        if not isinstance(pair, RVector) or len(pair) != 2:
            raise RDataError(f"{source}: entry {name!r} is not an (offset, length) pair")
        out[name] = (int(pair[0]), int(pair[1]))
    return out
