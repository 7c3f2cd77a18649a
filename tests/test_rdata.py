"""The R serialization / lazy-load reader, on R objects whose XDR bytes are written by hand here."""

from __future__ import annotations

import bz2
import gzip
import struct
import zlib
from pathlib import Path

import pytest

from fleet.data.rlazyload import LazyLoadDB
from fleet.data.rserialize import read_rds, unserialize
from fleet.data.rvalues import RDataError, as_strings, attr

# -- a tiny R serializer (XDR, the layout of R's serialize.c) ----------------------------------

NA_INT = -(2**31)
NA_REAL = struct.pack(">II", 0x7FF00000, 1954)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def flags(kind: int, *, obj: bool = False, attr: bool = False, tag: bool = False, levels=0):
    return i32(kind | obj << 8 | attr << 9 | tag << 10 | levels << 12)


def header(version: int = 3) -> bytes:
    out = b"X\n" + i32(version) + i32(0x040301) + i32(0x030500)
    return out + (i32(5) + b"UTF-8" if version == 3 else b"")


def charsxp(s: str | None, encoding: str = "utf-8") -> bytes:
    if s is None:
        return flags(9) + i32(-1)
    raw = s.encode(encoding)
    levels = 64 if s.isascii() else (4 if encoding == "latin-1" else 8)
    return flags(9, levels=levels) + i32(len(raw)) + raw


def strsxp(items, attrs: bytes | None = None, obj: bool = False) -> bytes:
    body = i32(len(items)) + b"".join(charsxp(s) for s in items)
    return flags(16, attr=attrs is not None, obj=obj) + body + (attrs or b"")


def intsxp(items, attrs: bytes | None = None) -> bytes:
    body = i32(len(items)) + b"".join(i32(NA_INT if v is None else v) for v in items)
    return flags(13, attr=attrs is not None) + body + (attrs or b"")


def realsxp(items) -> bytes:
    body = b"".join(NA_REAL if v is None else struct.pack(">d", v) for v in items)
    return flags(14) + i32(len(items)) + body


def lglsxp(items) -> bytes:
    return flags(10) + i32(len(items)) + b"".join(i32(NA_INT if v is None else v) for v in items)


def vecsxp(items, attrs: bytes | None = None, obj: bool = False) -> bytes:
    return (
        flags(19, attr=attrs is not None, obj=obj)
        + i32(len(items))
        + b"".join(items)
        + (attrs or b"")
    )


def symbol(name: str) -> bytes:
    return flags(1) + charsxp(name)


def ref(index: int) -> bytes:
    return i32(index << 8 | 255)


def pairlist(cells) -> bytes:
    """cells: [(tag bytes (a symbol or a ref), value bytes)]; ends with R_NilValue."""
    return b"".join(flags(2, tag=True) + tag + value for tag, value in cells) + flags(254)


def serialize(item: bytes, version: int = 3) -> bytes:
    return header(version) + item


def data_frame() -> bytes:
    """data.frame(text = c("It is a truth", NA, "universally acknowledged"), line = 1:3),
    with the symbol `names` written once and referenced afterwards (REFSXP 1)."""
    text = strsxp(["It is a truth", None, "universally acknowledged"])
    line = intsxp([1, 2, 3])
    attrs = pairlist(
        [
            (symbol("names"), strsxp(["text", "line"])),
            (symbol("class"), strsxp(["data.frame"])),
            (symbol("row.names"), intsxp([None, -3])),
        ]
    )
    return vecsxp([text, line], attrs=attrs, obj=True)


# -- unserialize ----------------------------------------------------------------------------


def test_character_vector_with_na_utf8_and_latin1():
    obj = unserialize(
        serialize(
            flags(16)
            + i32(4)
            + charsxp("plain")
            + charsxp(None)
            + charsxp("café")
            + charsxp("Zoë", "latin-1")
        )
    )
    assert obj.rtype == "character"
    assert list(obj) == ["plain", None, "café", "Zoë"]
    assert as_strings(obj) == ["plain", "", "café", "Zoë"]


def test_numeric_logical_and_na_values_version_2():
    vec = vecsxp([intsxp([1, None, -7]), realsxp([1.5, None, float("nan")]), lglsxp([1, 0, None])])
    obj = unserialize(serialize(vec, version=2))
    ints, reals, lgls = obj
    assert list(ints) == [1, None, -7] and ints.rtype == "integer"
    assert reals[0] == 1.5 and reals[1] is None and reals[2] != reals[2]  # NA vs NaN
    assert list(lgls) == [True, False, None]


def test_data_frame_attributes_symbols_and_references():
    obj = unserialize(serialize(data_frame()))
    assert attr(obj, "names") == ["text", "line"]
    assert attr(obj, "class") == ["data.frame"]
    assert list(attr(obj, "row.names")) == [None, -3]
    assert as_strings(obj) == ["It is a truth", "", "universally acknowledged"]
    # A second list whose names attribute refers back to the symbol `names` (reference 1).
    nested = vecsxp(
        [data_frame(), vecsxp([strsxp(["x"])], attrs=pairlist([(ref(1), strsxp(["only"]))]))]
    )
    outer = unserialize(serialize(nested))
    assert attr(outer[1], "names") == ["only"]


def test_named_list_null_and_factor():
    levels = pairlist(
        [(symbol("levels"), strsxp(["a", "b"])), (symbol("class"), strsxp(["factor"]))]
    )
    factor = intsxp([2, 1, None], attrs=levels)
    obj = unserialize(
        serialize(vecsxp([factor, flags(254)], attrs=pairlist([(ref(2), strsxp(["f", "n"]))])))
    )
    assert obj[1] is None
    assert as_strings(obj[0]) == ["b", "a", ""]


def test_gzip_and_bzip2_compressed_streams(tmp_path: Path):
    raw = serialize(strsxp(["x", "y"]))
    (tmp_path / "a.rds").write_bytes(gzip.compress(raw))
    (tmp_path / "b.rds").write_bytes(bz2.compress(raw))
    assert list(read_rds(tmp_path / "a.rds")) == ["x", "y"]
    assert list(read_rds(tmp_path / "b.rds")) == ["x", "y"]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"RDX9 nonsense", "not an R serialization"),
        (b"A\n2\n", "ASCII"),
        (header()[:-3], "truncated"),
        (header() + flags(16) + i32(2) + charsxp("only one"), "truncated"),
        (header(7), "unsupported serialization version"),
        (header() + flags(21), "unsupported R object type 21"),
        (header() + ref(3), "reference 3"),
        (gzip.compress(serialize(strsxp(["x"])), mtime=0)[:-9], "corrupt compressed data"),
    ],
)
def test_bad_streams_raise_one_line_errors(data: bytes, message: str):
    with pytest.raises(RDataError, match=message) as info:
        unserialize(data, source="obj.rds")
    assert str(info.value).startswith("obj.rds") and "\n" not in str(info.value)


def test_as_strings_rejects_non_text():
    with pytest.raises(RDataError, match="expected a character vector"):
        as_strings(unserialize(serialize(intsxp([1]))), "x.rds")


# -- lazy-load databases --------------------------------------------------------------------


def write_lazyload(base: Path, objects: dict[str, bytes], kind: str = "zlib") -> None:
    """NAME.rdb (length-prefixed compressed blocks) + NAME.rdx (gzip'd index), as R writes."""
    blocks, offsets, pos = [], {}, 0
    for name, payload in objects.items():
        if kind == "zlib":
            block = struct.pack(">I", len(payload)) + zlib.compress(payload)
        else:  # compressed = 2: a type byte then bzip2 data
            block = struct.pack(">I", len(payload)) + b"2" + bz2.compress(payload)
        offsets[name] = (pos, len(block))
        blocks.append(block)
        pos += len(block)
    base.with_name(base.name + ".rdb").write_bytes(b"".join(blocks))
    variables = vecsxp(
        [intsxp(list(v)) for v in offsets.values()],
        attrs=pairlist([(symbol("names"), strsxp(list(offsets)))]),
    )
    index = vecsxp(
        [variables, vecsxp([]), lglsxp([1]) if kind == "zlib" else intsxp([2])],
        attrs=pairlist([(ref(1), strsxp(["variables", "references", "compressed"]))]),
    )
    base.with_name(base.name + ".rdx").write_bytes(gzip.compress(serialize(index)))


@pytest.mark.parametrize("kind", ["zlib", "bzip2"])
def test_lazyload_round_trip(tmp_path: Path, kind: str):
    novel = serialize(strsxp(["CHAPTER I", "", "It is a truth universally acknowledged"]))
    frame = serialize(data_frame())
    write_lazyload(tmp_path / "Rdata", {"novel": novel, "frame": frame}, kind)
    for path in (tmp_path / "Rdata", tmp_path / "Rdata.rdx", tmp_path / "Rdata.rdb"):
        db = LazyLoadDB(path)
        assert db.names() == ["novel", "frame"] and "novel" in db
    assert as_strings(db.load("novel"))[2] == "It is a truth universally acknowledged"
    assert as_strings(db.load("frame"))[0] == "It is a truth"
    with pytest.raises(KeyError, match="no object 'missing'"):
        db.load("missing")


def test_lazyload_damage_is_reported(tmp_path: Path):
    write_lazyload(tmp_path / "Rdata", {"novel": serialize(strsxp(["a", "b"]))})
    rdb = tmp_path / "Rdata.rdb"
    good = rdb.read_bytes()
    rdb.write_bytes(good[:-4])
    with pytest.raises(RDataError, match="truncated"):
        LazyLoadDB(tmp_path / "Rdata").load("novel")
    rdb.write_bytes(good[:4] + b"x" + b"\x00" * (len(good) - 5))
    with pytest.raises(RDataError, match="corrupt compressed block"):
        LazyLoadDB(tmp_path / "Rdata").load("novel")
    (tmp_path / "Rdata.rdb").unlink()
    with pytest.raises(RDataError, match="missing"):
        LazyLoadDB(tmp_path / "Rdata")
