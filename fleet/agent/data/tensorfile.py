"""Tensor files without pickle: weights, checkpoints and data sets the agent can load safely.

Why not ``torch.save``/``torch.load``: a ``.pt`` file is a pickle, and unpickling runs code. torch
>= 1.13 can refuse code with ``weights_only=True``, but JetPack 4.6 ships torch 1.10, where a
hostile weights, data or checkpoint file would run as root on the board. This format holds only
numbers and plain JSON, so loading it cannot run anything on any torch version, and a SHA-256
digest in the file makes a flipped byte a refusal instead of silently different weights.

Layout (all integers little-endian)::

    magic    8 bytes   b"PFTENS1\\n"
    digest  32 bytes   SHA-256 over everything after it (length, header, payload)
    length   8 bytes   header length in bytes (uint64)
    header   length    UTF-8 JSON object, see below
    payload  rest      every tensor's raw bytes, C order, little-endian, back to back

Header: ``{"format": "powerfleet-tensors", "version": 1, "kind": K, "tensors": [...],
"tree": T}``. ``kind`` says what the file is for (``weights``, ``checkpoint``, ``data``,
``tensors``) so a checkpoint is never loaded as weights. Each tensor entry is ``{"name": N,
"dtype": D, "shape": [..], "offset": O, "nbytes": B}`` with offsets in payload order, starting at 0
and contiguous; ``name`` is the tensor's path in the tree (``model/conv1.weight``,
``train/0``), for people and other readers. ``tree`` is the saved object in JSON where the types
JSON lacks are one-key objects: ``{"tensor": i}`` (entry i of ``tensors``), ``{"tuple": [..]}``,
``{"dict": [[key, value], ..]}`` (keys str or int; every dict is written this way, so a plain
JSON object is never data), ``{"float": "nan"|"inf"|"-inf"}``. So ``{"train": (x, y)}`` is
``{"dict": [["train", {"tuple": [{"tensor": 0}, {"tensor": 1}]}]]}``.

Bounds on loading: file size (``max_bytes``), header size, JSON nesting depth, tensor count,
and every offset and shape is checked against the payload before a byte is read as a number.
Python 3.6 and torch 1.10 compatible (numpy builds the tensors; no ``torch.frombuffer``).
"""

import hashlib
import json
import math
import os
import re
import struct
import sys
import warnings
from typing import Any, Dict, List, Optional, Tuple

MAGIC = b"PFTENS1\n"
FORMAT = "powerfleet-tensors"
VERSION = 1
KINDS = ("weights", "checkpoint", "data", "tensors")
MAX_BYTES = 8 << 30  # a data set for a board fits well within this
MAX_HEADER_BYTES = 64 << 20
MAX_DEPTH = 64
MAX_TENSORS = 1000000
_PREAMBLE = len(MAGIC) + 32 + 8

# dtype name -> (numpy dtype string, bytes per element); bfloat16 travels as int16 bits.
DTYPES = {
    "float64": ("<f8", 8),
    "float32": ("<f4", 4),
    "float16": ("<f2", 2),
    "bfloat16": ("<i2", 2),
    "int64": ("<i8", 8),
    "int32": ("<i4", 4),
    "int16": ("<i2", 2),
    "int8": ("i1", 1),
    "uint8": ("u1", 1),
    "bool": ("?", 1),
}


class TensorFileError(ValueError):
    """A tensor file is missing, damaged, tampered with or not of this format (one line)."""


# --------------------------------------------------------------------------------------------
# Saving


def save(obj: Any, path: str, kind: str = "tensors") -> None:
    """Write ``obj`` (tensors in dicts, lists and tuples of plain values) atomically to ``path``."""
    from fleet.method.profile_io import atomic_write

    data = dumps(obj, kind)
    atomic_write(path, lambda fh: fh.write(data))


def dumps(obj: Any, kind: str = "tensors") -> bytes:
    """The file's bytes for ``obj``; raises TensorFileError on a value the format cannot hold."""
    if kind not in KINDS:
        raise TensorFileError("unknown tensor file kind {!r} (known: {})".format(kind, KINDS))
    blobs = []  # type: List[bytes]
    entries = []  # type: List[Dict[str, Any]]
    tree = _encode(obj, "", blobs, entries, 0)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "tensors": entries,
        "tree": tree,
    }
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    body = struct.pack("<Q", len(head)) + head + b"".join(blobs)
    return MAGIC + hashlib.sha256(body).digest() + body


def _encode(obj: Any, name: str, blobs: List[bytes], entries: List[Dict[str, Any]], depth: int):
    if depth > MAX_DEPTH - 8:
        raise TensorFileError("object nested deeper than {} levels".format(MAX_DEPTH - 8))
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isnan(obj):
            return {"float": "nan"}
        if math.isinf(obj):
            return {"float": "inf" if obj > 0 else "-inf"}
        return float(obj)
    if isinstance(obj, (list, tuple)):
        items = [
            _encode(v, _child(name, str(i)), blobs, entries, depth + 1) for i, v in enumerate(obj)
        ]
        return {"tuple": items} if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        pairs = []
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TensorFileError("dict keys must be str or int, got {!r}".format(k))
            pairs.append([k, _encode(v, _child(name, str(k)), blobs, entries, depth + 1)])
        return {"dict": pairs}
    if _is_tensor(obj):
        return {"tensor": _add_tensor(obj, name, blobs, entries)}
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):  # numpy scalars
        return _encode(obj.item(), name, blobs, entries, depth)
    raise TensorFileError(
        "cannot store a {} at '{}' (tensors, numbers, strings, lists, tuples, dicts only)".format(
            type(obj).__name__, name or "/"
        )
    )


def _child(name: str, key: str) -> str:
    return key if not name else name + "/" + key


def _is_tensor(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith("torch") and hasattr(obj, "dtype") and hasattr(obj, "shape")


def _add_tensor(t: Any, name: str, blobs: List[bytes], entries: List[Dict[str, Any]]) -> int:
    import torch

    dtype = str(t.dtype).replace("torch.", "")
    if dtype not in DTYPES:
        raise TensorFileError("cannot store tensor '{}' of dtype {}".format(name, dtype))
    t = t.detach().cpu().contiguous()
    if dtype == "bfloat16":
        t = t.view(torch.int16)
    arr = t.numpy()
    raw = arr.astype(DTYPES[dtype][0], copy=False).tobytes()
    offset = entries[-1]["offset"] + entries[-1]["nbytes"] if entries else 0
    entries.append(
        {
            "name": name,
            "dtype": dtype,
            "shape": [int(d) for d in t.shape],
            "offset": offset,
            "nbytes": len(raw),
        }
    )
    blobs.append(raw)
    return len(entries) - 1


# --------------------------------------------------------------------------------------------
# Loading


def load(path: str, kind: Optional[str] = None, max_bytes: int = MAX_BYTES) -> Any:
    """Read a tensor file; ``kind`` (if given) must match the file's. Never unpickles."""
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise TensorFileError(
                "{}: {} bytes, more than the {} allowed for a tensor file".format(
                    path, size, max_bytes
                )
            )
        with open(path, "rb") as fh:
            data = fh.read(size + 1)  # not max_bytes: read() allocates what it is asked for
    except TensorFileError:
        raise
    except (IOError, OSError) as exc:
        reason = exc.strerror or type(exc).__name__
        raise TensorFileError("{}: cannot read tensor file ({})".format(path, reason)) from None
    return loads(data, kind, path)


def loads(data: bytes, kind: Optional[str] = None, where: str = "<bytes>") -> Any:
    """The object in a tensor file's bytes; every problem is one TensorFileError line."""
    header, payload = _read_header(data, where)
    if kind is not None and header["kind"] != kind:
        raise TensorFileError(
            "{}: holds {} ({} expected)".format(where, _kind_words(header["kind"]), kind)
        )
    tensors = _tensors(header["tensors"], payload, where)
    return _decode(header["tree"], tensors, where, 0)


def file_kind(path: str) -> str:
    """The ``kind`` in a tensor file's header (checked like a full load, tensors not built)."""
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise TensorFileError("{}: {} bytes, more than a tensor file may hold".format(path, size))
    with open(path, "rb") as fh:
        data = fh.read(size + 1)
    return _read_header(data, path)[0]["kind"]


def _kind_words(kind: str) -> str:
    return {"weights": "model weights", "checkpoint": "a training checkpoint",
            "data": "a data set"}.get(kind, "tensors")  # fmt: skip


def legacy_hint(where: str) -> str:
    return (
        "{}: an old torch.save (pickle) file; powerfleet never unpickles, because a pickle can "
        "run code. Convert it on a trusted machine with torch >= 1.13: "
        "python -m fleet.agent.data.tensorfile convert OLD NEW".format(where)
    )


def _read_header(data: bytes, where: str) -> Tuple[Dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        if data[:4] == b"PK\x03\x04" or data[:1] == b"\x80":
            raise TensorFileError(legacy_hint(where))
        raise TensorFileError("{}: not a powerfleet tensor file (bad magic bytes)".format(where))
    if len(data) < _PREAMBLE:
        raise TensorFileError("{}: truncated tensor file ({} bytes)".format(where, len(data)))
    digest = data[len(MAGIC) : len(MAGIC) + 32]
    body = data[len(MAGIC) + 32 :]
    if hashlib.sha256(body).digest() != digest:
        raise TensorFileError(
            "{}: digest mismatch: the file is damaged or was changed after it was written".format(
                where
            )
        )
    (hlen,) = struct.unpack("<Q", body[:8])
    if hlen > MAX_HEADER_BYTES or 8 + hlen > len(body):
        raise TensorFileError("{}: header length {} is out of bounds".format(where, hlen))
    raw_head = body[8 : 8 + hlen]
    try:
        text = raw_head.decode("utf-8")
    except UnicodeDecodeError:
        raise TensorFileError("{}: header is not UTF-8".format(where)) from None
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise TensorFileError(
            "{}: header nested {} levels deep (at most {})".format(where, depth, MAX_DEPTH)
        )
    try:
        header = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise TensorFileError("{}: header is not valid JSON ({})".format(where, exc)) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TensorFileError("{}: not a powerfleet tensor file header".format(where))
    if header.get("version") != VERSION:
        raise TensorFileError(
            "{}: tensor file version {!r}, this agent reads version {}".format(
                where, header.get("version"), VERSION
            )
        )
    if header.get("kind") not in KINDS:
        raise TensorFileError("{}: unknown kind {!r}".format(where, header.get("kind")))
    if not isinstance(header.get("tensors"), list) or "tree" not in header:
        raise TensorFileError("{}: header lacks 'tensors' or 'tree'".format(where))
    return header, body[8 + hlen :]


def _no_constant(name: str) -> Any:
    raise ValueError("{} is not allowed".format(name))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """Deepest bracket nesting in JSON text, without parsing it (strings skipped).

    Why: Python's JSON parser recurses per level, so a hostile document of 100,000 brackets
    raises RecursionError (or worse) before any check can run; counting first is linear and safe.
    """
    depth = deepest = 0
    for m in _BRACKETS.finditer(_STRING.sub('""', text)):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def _tensors(entries: List[Any], payload: bytes, where: str) -> List[Any]:
    import numpy as np
    import torch

    if len(entries) > MAX_TENSORS:
        raise TensorFileError(
            "{}: {} tensors (at most {})".format(where, len(entries), MAX_TENSORS)
        )
    out = []
    expected_offset = 0
    for i, e in enumerate(entries):
        label = "{}: tensor #{}".format(where, i)
        if not isinstance(e, dict):
            raise TensorFileError("{} is not an object".format(label))
        name, dtype, shape = e.get("name"), e.get("dtype"), e.get("shape")
        offset, nbytes = e.get("offset"), e.get("nbytes")
        if isinstance(name, str):
            label = "{} ('{}')".format(label, name[:80])
        if dtype not in DTYPES:
            raise TensorFileError("{}: unknown dtype {!r}".format(label, dtype))
        if not isinstance(shape, list) or len(shape) > 32 or not all(_uint(d) for d in shape):
            raise TensorFileError("{}: shape {!r} is not a list of sizes".format(label, shape))
        count = 1
        for d in shape:
            count *= d
        if not _uint(offset) or not _uint(nbytes) or offset != expected_offset:
            raise TensorFileError(
                "{}: offset {!r} (expected {})".format(label, offset, expected_offset)
            )
        if nbytes != count * DTYPES[dtype][1] or offset + nbytes > len(payload):
            raise TensorFileError(
                "{}: {!r} bytes do not hold shape {} of {} within the payload".format(
                    label, nbytes, shape, dtype
                )
            )
        expected_offset += nbytes
        arr = np.frombuffer(payload, dtype=DTYPES[dtype][0], count=count, offset=offset)
        arr = arr.reshape(shape).astype(arr.dtype.newbyteorder("="), copy=True)
        t = torch.from_numpy(arr)
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        out.append(t)
    if expected_offset != len(payload):
        raise TensorFileError(
            "{}: payload has {} bytes, the header accounts for {}".format(
                where, len(payload), expected_offset
            )
        )
    return out


def _uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 62)


def _decode(node: Any, tensors: List[Any], where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise TensorFileError("{}: tree nested too deep".format(where))
    if node is None or isinstance(node, (bool, int, str)):
        return node
    if isinstance(node, float):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors, where, depth + 1) for v in node]
    if isinstance(node, dict) and len(node) == 1:
        ((tag, value),) = node.items()
        if tag == "tensor" and _uint(value) and value < len(tensors):
            return tensors[value]
        if tag == "tuple" and isinstance(value, list):
            return tuple(_decode(v, tensors, where, depth + 1) for v in value)
        if tag == "float" and value in ("nan", "inf", "-inf"):
            return float(value)
        if tag == "dict" and isinstance(value, list):
            out = {}
            for pair in value:
                if (
                    not isinstance(pair, list)
                    or len(pair) != 2
                    or isinstance(pair[0], bool)
                    or not isinstance(pair[0], (str, int))
                ):
                    raise TensorFileError(
                        "{}: a dict entry is not a [key, value] pair".format(where)
                    )
                if pair[0] in out:
                    raise TensorFileError("{}: duplicate key {!r}".format(where, pair[0]))
                out[pair[0]] = _decode(pair[1], tensors, where, depth + 1)
            return out
    raise TensorFileError("{}: unexpected element in the tree: {}".format(where, str(node)[:80]))


# --------------------------------------------------------------------------------------------
# Converting old files (an explicit, trusted step on a machine whose torch refuses code)


def convert(src: str, dst: str, kind: str = "tensors") -> None:
    """Rewrite an old ``torch.save`` file as a tensor file, with torch's code-refusing loader.

    Only where torch has ``weights_only`` (>= 1.13): on older torch there is no safe way to read a
    pickle, so this refuses rather than unpickle.
    """
    import inspect

    import torch

    if "weights_only" not in inspect.signature(torch.load).parameters:
        raise TensorFileError(
            "torch {} cannot read a pickle without running it; convert on a machine with "
            "torch >= 1.13".format(torch.__version__)
        )
    try:
        with warnings.catch_warnings():  # torch's advice on pickle protocols is noise here
            warnings.simplefilter("ignore")
            obj = torch.load(src, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types on bad files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise TensorFileError("{}: torch refused it: {}".format(src, first)) from None
    save(obj, dst, kind)


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m fleet.agent.data.tensorfile",
        description="Convert an old torch.save file into a powerfleet tensor file, or check one.",
    )
    sub = p.add_subparsers(dest="action")
    c = sub.add_parser("convert", help="OLD.pt -> NEW (torch >= 1.13, weights_only)")
    c.add_argument("src")
    c.add_argument("dst")
    c.add_argument("--kind", default="tensors", choices=KINDS)
    v = sub.add_parser("check", help="verify a tensor file's digest and structure")
    v.add_argument("path")
    args = p.parse_args(argv)
    try:
        if args.action == "convert":
            convert(args.src, args.dst, args.kind)
            sys.stdout.write("wrote {}\n".format(args.dst))
        elif args.action == "check":
            load(args.path)
            sys.stdout.write("{}: ok ({})\n".format(args.path, file_kind(args.path)))
        else:
            p.print_usage(sys.stderr)
            return 2
    except TensorFileError as exc:
        sys.stderr.write("error: {}\n".format(exc))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
