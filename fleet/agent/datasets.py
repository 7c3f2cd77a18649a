"""Dataset readers that run on the device: IDX, CIFAR pickles, image folders, plain text.

Why here: the device fine-tunes on its own data, under Python 3.6 + torch 1.10 (JetPack 4.6), so
the readers stick to the standard library and numpy, and import torch only where tensors are
made. The coordinator prepares the offline corpora (``powerfleet data prepare NAME``, see
``fleet.data.prepare``) into a cache folder that can be copied to the board as is.

Sources ``load_dataset`` accepts (a prepared name, or a path):

- a prepared dataset name (``fashion-mnist``, ``mnist-5k``, ``austen``, ``shakespeare``,
  ``mobydick``), looked up in ``data_dir`` (default ``$POWERFLEET_DATA`` or
  ``~/.cache/powerfleet/data``); its folder holds ``prepared.json`` (the completion marker).
  A bare known name always means the cache; write ``./austen`` for a local folder of that name;
- a folder of IDX files: ``train-images-idx3-ubyte[.gz]`` + ``train-labels-idx1-ubyte[.gz]`` and
  ``test-``/``t10k-`` ones (an official split), or ``images-idx3-ubyte[.gz]`` +
  ``labels-idx1-ubyte[.gz]`` (one set);
- a CIFAR-10/100 python folder (``data_batch_1..5`` + ``test_batch``, or ``train`` + ``test``
  with fine/coarse labels), or one batch file;
- an image folder, one subfolder per class (optionally under ``train/`` and ``test/``), images
  as PGM/PPM (decoded here), ``.npy`` arrays, or PNG/JPEG/BMP (needs Pillow);
- a ``.npz`` with ``x``/``y`` (or ``x_train``/``y_train``/``x_test``/``y_test``) arrays;
- a UTF-8 ``.txt`` file, or a folder of them (one document each).

Splits follow the paper (section 5.1). Images: a dataset with an official train/test split
keeps it when no ``subset`` is asked for; otherwise the samples are pooled, ``subset`` of them
drawn (seeded), and split 80/20 (seeded) -- "each dataset (subset) is divided into training and
testing sets with an 80/20 split". Text: each document is split contiguously, its first 90 % to
train and its last 10 % to test, so test text is never seen in training.

Images come back as float32 ``[N, C, H, W]`` scaled to [0, 1] (``/255``); ``standardize=True``
also subtracts the per-channel mean and divides by the per-channel std of the *train* split
(whichever split is returned), the usual recipe that keeps test statistics out of training.
Labels are int64 ``[N]``.

Text is reduced to a fixed 96-character vocabulary: newline plus printable ASCII (space, 52
letters, 10 digits, 32 punctuation marks), the paper's "English letters, digits, punctuation,
spaces and new lines". ``normalize_text`` maps the rest: CR/CRLF -> newline, tabs and other
spaces -> space, typographic quotes/dashes/ellipsis -> their ASCII spelling, accented letters ->
the base letter (e -> e, ae-ligature -> ``ae``), and drops everything else (control characters,
other scripts, the BOM). A fixed vocabulary keeps token ids stable between pre-training and
fine-tuning corpora. Text comes back as windows ``x[N, T]``, ``y[N, T]`` (int64, y is x shifted by
one character) of length ``seq_len`` (64) taken every ``seq_len`` characters;
``CharSequenceDataset`` gives every offset lazily instead.

Every unreadable input raises :class:`DatasetError` with one line naming the file and what was
expected.
"""

import gzip
import io
import json
import os
import pickle
import struct
import unicodedata
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

KNOWN_DATASETS = {
    "fashion-mnist": "image",
    "mnist-5k": "image",
    "austen": "text",
    "shakespeare": "text",
    "mobydick": "text",
}
MANIFEST = "prepared.json"
DATA_ENV = "POWERFLEET_DATA"
IMAGE_TEST_FRACTION = 0.2
TEXT_TEST_FRACTION = 0.1
SEQ_LEN = 64
IMAGE_EXTENSIONS = (".pgm", ".ppm", ".pnm", ".npy", ".png", ".jpg", ".jpeg", ".bmp")


class DatasetError(ValueError):
    """A dataset cannot be read: one line naming the file and what was expected."""


def default_data_dir() -> str:
    """Where prepared datasets live: ``$POWERFLEET_DATA`` or ``~/.cache/powerfleet/data``."""
    env = os.environ.get(DATA_ENV)
    if env:
        return os.path.expanduser(env)
    return os.path.join(os.path.expanduser("~"), ".cache", "powerfleet", "data")


# --------------------------------------------------------------------------------------------
# IDX (the MNIST file format): magic 0x00 0x00 TYPE NDIM, NDIM big-endian uint32 sizes, data.

IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_CODES = {"uint8": 0x08, "int8": 0x09, "int16": 0x0B, "int32": 0x0C}
IDX_CODES.update({"float32": 0x0D, "float64": 0x0E})


def _read_bytes(path: str) -> bytes:
    """A file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, expected a file") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetError(f"{path}: truncated or corrupt gzip data ({exc})") from None
    return raw


def read_idx(path: str, ndim: Optional[int] = None) -> np.ndarray:
    """An IDX file (plain or gzip) as a native-endian numpy array of its declared shape."""
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DatasetError(f"{path}: truncated IDX file ({len(raw)} bytes, expected a header)")
    code, dims = raw[2], raw[3]
    if raw[:2] != b"\x00\x00" or code not in IDX_TYPES or dims == 0:
        raise DatasetError(
            f"{path}: not an IDX file (magic 0x{raw[:4].hex()}, expected 0x0000TTDD with "
            "type TT in 08/09/0b/0c/0d/0e and DD dimensions, e.g. 0x00000803 for images)"
        )
    if ndim is not None and dims != ndim:
        raise DatasetError(f"{path}: IDX file has {dims} dimensions, expected {ndim}")
    start = 4 + 4 * dims
    if len(raw) < start:
        raise DatasetError(f"{path}: truncated IDX header ({len(raw)} bytes, expected {start})")
    shape = struct.unpack(">" + "I" * dims, raw[4:start])
    dtype = np.dtype(IDX_TYPES[code])
    count = int(np.prod(shape, dtype=np.int64))
    want = count * dtype.itemsize
    have = len(raw) - start
    if have < want:
        raise DatasetError(
            f"{path}: truncated IDX file ({have} data bytes, expected {want} for shape "
            f"{list(shape)})"
        )
    if have > want:
        raise DatasetError(
            f"{path}: {have - want} unexpected bytes after the IDX data of shape {list(shape)}"
        )
    arr = np.frombuffer(raw, dtype=dtype, count=count, offset=start).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))


def write_idx(path: str, array: np.ndarray) -> None:
    """Write an IDX file (gzip when ``path`` ends in ``.gz``, byte-identical for equal input)."""
    arr = np.asarray(array)
    name = arr.dtype.name
    if name not in IDX_CODES or arr.ndim == 0 or arr.ndim > 255:
        raise DatasetError(f"{path}: cannot write a {name} array of {arr.ndim} dims as IDX")
    header = bytes([0, 0, IDX_CODES[name], arr.ndim]) + struct.pack(
        ">" + "I" * arr.ndim, *arr.shape
    )
    body = arr.astype(np.dtype(IDX_TYPES[IDX_CODES[name]]), copy=False).tobytes()
    if path.endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
            gz.write(header)
            gz.write(body)
        data = buf.getvalue()
    else:
        data = header + body
    with open(path, "wb") as fh:
        fh.write(data)


def _find(folder: str, stems: Sequence[str]) -> Optional[str]:
    for stem in stems:
        for suffix in ("", ".gz"):
            p = os.path.join(folder, stem + suffix)
            if os.path.isfile(p):
                return p
    return None


def _idx_pair(folder: str, prefixes: Sequence[str]) -> Optional[Tuple[str, str]]:
    images = _find(folder, [p + "images-idx3-ubyte" for p in prefixes])
    labels = _find(folder, [p + "labels-idx1-ubyte" for p in prefixes])
    if images is None and labels is None:
        return None
    if images is None or labels is None:
        missing = "images-idx3-ubyte" if images is None else "labels-idx1-ubyte"
        raise DatasetError(f"{folder}: has IDX {prefixes[0] or 'set'} files but no {missing}")
    return images, labels


def read_idx_set(images_path: str, labels_path: str) -> Tuple[np.ndarray, np.ndarray]:
    """An images/labels IDX pair as (uint8 [N, C, H, W], int64 [N])."""
    x = read_idx(images_path)
    y = read_idx(labels_path, ndim=1)
    if x.ndim == 3:
        x = x[:, None, :, :]
    elif x.ndim == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)  # stored N, H, W, C
    elif x.ndim != 4:
        raise DatasetError(f"{images_path}: IDX images have shape {list(x.shape)}, expected 3-D")
    if x.shape[0] != y.shape[0]:
        raise DatasetError(
            f"{labels_path}: {y.shape[0]} labels for {x.shape[0]} images in {images_path}"
        )
    return _as_uint8(x, images_path), y.astype(np.int64)


def _as_uint8(x: np.ndarray, path: str) -> np.ndarray:
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    if x.dtype.kind == "f" and x.size and float(x.min()) >= 0.0 and float(x.max()) <= 1.0:
        return np.ascontiguousarray(np.round(x * 255.0).astype(np.uint8))
    raise DatasetError(f"{path}: images are {x.dtype}, expected uint8 (or floats in [0, 1])")


# --------------------------------------------------------------------------------------------
# CIFAR-10/100 python pickles: dict with b"data" uint8 [N, 3072] (RRR..GGG..BBB.. per image)
# and b"labels" (CIFAR-10) or b"fine_labels"/b"coarse_labels" (CIFAR-100).

_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _DataUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a data file must not run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_GLOBALS:
            return super(_DataUnpickler, self).find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path: str) -> Any:
    raw = _read_bytes(path)
    try:
        return _DataUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # pickle raises many types on garbage; all mean the same here
        raise DatasetError(
            f"{path}: not a CIFAR python pickle ({type(exc).__name__}: {exc})"
        ) from None


def _str_keys(obj: Any) -> Dict[str, Any]:
    out = {}
    for k, v in obj.items():
        out[k.decode("latin-1") if isinstance(k, bytes) else str(k)] = v
    return out


def read_cifar_batch(path: str, labels: str = "fine") -> Tuple[np.ndarray, np.ndarray]:
    """One CIFAR batch file as (uint8 [N, 3, 32, 32], int64 [N]); ``labels`` picks CIFAR-100's
    ``fine`` (100 classes) or ``coarse`` (20 superclasses) labels."""
    expected = "a pickled dict with b'data' (uint8 [N, 3072]) and b'labels' or b'fine_labels'"
    obj = _unpickle(path)
    if not isinstance(obj, dict):
        raise DatasetError(
            f"{path}: not a CIFAR batch (got {type(obj).__name__}; expected {expected})"
        )
    d = _str_keys(obj)
    key = "labels" if "labels" in d else labels + "_labels"
    if "data" not in d or key not in d:
        raise DatasetError(f"{path}: not a CIFAR batch (keys {sorted(d)}; expected {expected})")
    data = d["data"]
    if isinstance(data, (bytes, bytearray)):
        data = np.frombuffer(data, dtype=np.uint8)
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.size % 3072:
        raise DatasetError(
            f"{path}: CIFAR data is {data.dtype} of shape {list(data.shape)}, expected {expected}"
        )
    x = data.reshape(-1, 3, 32, 32)
    try:
        y = np.asarray(d[key], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise DatasetError(f"{path}: CIFAR {key} are not integers") from None
    if y.shape[0] != x.shape[0]:
        raise DatasetError(f"{path}: {y.shape[0]} CIFAR {key} for {x.shape[0]} images")
    return np.ascontiguousarray(x), y


def _cifar_files(folder: str) -> Optional[Tuple[List[str], List[str], Optional[str]]]:
    """(train files, test files, meta file) of a CIFAR folder, or None if it is not one."""
    batches = sorted(
        f for f in os.listdir(folder) if f.startswith("data_batch_") and not f.endswith(".meta")
    )
    if batches and os.path.isfile(os.path.join(folder, "test_batch")):
        meta = os.path.join(folder, "batches.meta")
        train = [os.path.join(folder, f) for f in batches]
        return train, [os.path.join(folder, "test_batch")], meta if os.path.isfile(meta) else None
    train, test = os.path.join(folder, "train"), os.path.join(folder, "test")
    if os.path.isfile(train) and os.path.isfile(test):
        meta = os.path.join(folder, "meta")
        return [train], [test], meta if os.path.isfile(meta) else None
    return None


def _cifar_classes(meta: Optional[str], labels: str) -> Optional[List[str]]:
    if meta is None:
        return None
    obj = _unpickle(meta)
    if not isinstance(obj, dict):
        raise DatasetError(f"{meta}: not a CIFAR meta file (expected a pickled dict)")
    d = _str_keys(obj)
    names = d.get("label_names") or d.get(labels + "_label_names")
    if not names:
        return None
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


# --------------------------------------------------------------------------------------------
# Image folders: ROOT/CLASS/IMAGE (or ROOT/train/CLASS/IMAGE + ROOT/test/CLASS/IMAGE).


def _pnm_tokens(raw: bytes, path: str, count: int) -> Tuple[List[int], int]:
    """The first ``count`` whitespace-separated header numbers and the offset after them."""
    values, pos, n = [], 2, len(raw)
    while len(values) < count:
        while pos < n and (raw[pos : pos + 1].isspace() or raw[pos : pos + 1] == b"#"):
            if raw[pos : pos + 1] == b"#":
                while pos < n and raw[pos : pos + 1] not in (b"\n", b"\r"):
                    pos += 1
            else:
                pos += 1
        start = pos
        while pos < n and raw[pos : pos + 1].isdigit():
            pos += 1
        if start == pos:
            raise DatasetError(f"{path}: truncated or malformed PGM/PPM header")
        values.append(int(raw[start:pos]))
    return values, pos


def read_pnm(path: str) -> np.ndarray:
    """A PGM (P2/P5) or PPM (P3/P6) image as uint8 [C, H, W] (16-bit values are rescaled)."""
    raw = _read_bytes(path)
    magic = raw[:2]
    if magic not in (b"P2", b"P3", b"P5", b"P6"):
        raise DatasetError(f"{path}: not a PGM/PPM image (magic {magic!r}, expected P2/P3/P5/P6)")
    (width, height, maxval), pos = _pnm_tokens(raw, path, 3)
    if width <= 0 or height <= 0 or not 0 < maxval < 65536:
        raise DatasetError(f"{path}: bad PGM/PPM header ({width}x{height}, maxval {maxval})")
    channels = 3 if magic in (b"P3", b"P6") else 1
    count = width * height * channels
    if magic in (b"P5", b"P6"):
        dtype = np.dtype("u1") if maxval < 256 else np.dtype(">u2")
        body = raw[pos + 1 : pos + 1 + count * dtype.itemsize]  # one whitespace after maxval
        if len(body) < count * dtype.itemsize:
            raise DatasetError(
                f"{path}: truncated image data ({len(body)} bytes, expected "
                f"{count * dtype.itemsize} for {width}x{height}x{channels})"
            )
        pixels = np.frombuffer(body, dtype=dtype).astype(np.int64)
    else:
        parts = raw[pos:].split()
        if len(parts) < count:
            raise DatasetError(f"{path}: truncated image data ({len(parts)} of {count} values)")
        try:
            pixels = np.array([int(v) for v in parts[:count]], dtype=np.int64)
        except ValueError:
            raise DatasetError(f"{path}: non-numeric pixel value in an ASCII PGM/PPM") from None
    if maxval != 255:
        pixels = (pixels * 255 + maxval // 2) // maxval
    img = np.clip(pixels, 0, 255).astype(np.uint8).reshape(height, width, channels)
    return np.ascontiguousarray(img.transpose(2, 0, 1))


def read_image(path: str) -> np.ndarray:
    """One image file as uint8 [C, H, W] (C = 1 gray or 3 colour)."""
    ext = os.path.splitext(path)[1].lower()
    if ext in (".pgm", ".ppm", ".pnm"):
        return read_pnm(path)
    if ext == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: not a numpy .npy image ({exc})") from None
        if arr.ndim == 2:
            arr = arr[None]
        elif arr.ndim == 3 and arr.shape[-1] in (1, 3) and arr.shape[0] not in (1, 3):
            arr = arr.transpose(2, 0, 1)
        if arr.ndim != 3 or arr.shape[0] not in (1, 3):
            raise DatasetError(
                f"{path}: .npy image of shape {list(arr.shape)}, expected HxW, "
                "HxWxC or CxHxW with C in 1, 3"
            )
        return _as_uint8(arr, path)
    try:
        from PIL import Image  # optional: only PNG/JPEG/BMP need it
    except ImportError:
        raise DatasetError(
            f"{path}: decoding {ext or 'this'} images needs Pillow (pip install pillow); "
            "or convert the folder to PGM/PPM or .npy"
        ) from None
    try:
        with Image.open(path) as im:
            if im.mode not in ("L", "RGB"):
                im = im.convert("L" if im.mode in ("1", "I", "I;16", "F", "LA") else "RGB")
            arr = np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError) as exc:
        raise DatasetError(f"{path}: unreadable image ({exc})") from None
    if arr.ndim == 2:
        return np.ascontiguousarray(arr[None])
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def read_image_folder(root: str) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """ROOT/CLASS/* as (uint8 [N, C, H, W], int64 [N], class names in sorted order).

    All images must share one height and width; gray images are repeated to three channels
    when the folder mixes gray and colour.
    """
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        for f in sorted(os.listdir(folder)):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                files.append(os.path.join(folder, f))
                labels.append(label)
    if not files:
        raise DatasetError(
            f"{root}: no images found (expected one subfolder per class holding "
            f"{'/'.join(e[1:] for e in IMAGE_EXTENSIONS)} files)"
        )
    images = [read_image(f) for f in files]
    height, width = images[0].shape[1:]
    for f, img in zip(files, images):
        if img.shape[1:] != (height, width):
            raise DatasetError(
                f"{f}: image is {img.shape[2]}x{img.shape[1]}, expected {width}x{height} "
                f"like {files[0]} (resize the folder to one size)"
            )
    channels = max(img.shape[0] for img in images)
    x = np.stack([np.repeat(img, channels // img.shape[0], axis=0) for img in images])
    return x, np.asarray(labels, dtype=np.int64), classes


# --------------------------------------------------------------------------------------------
# Deterministic subsets and splits (numpy's legacy RandomState: same stream on every version).


def split_indices(n: int, test_fraction: float, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Shuffle ``range(n)`` with ``seed`` and cut it: (train, test) sorted int64 index arrays,
    disjoint, covering ``range(n)``, ``round(n * test_fraction)`` in test."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    perm = np.random.RandomState(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)


def subset(n: int, k: int, seed: int = 0) -> np.ndarray:
    """``k`` distinct indices from ``range(n)``, chosen with ``seed``, sorted (int64)."""
    if not 0 <= k <= n:
        raise DatasetError(f"subset of {k} requested from {n} samples")
    perm = np.random.RandomState(seed).permutation(n)
    return np.sort(perm[:k]).astype(np.int64)


def contiguous_split(length: int, test_fraction: float) -> int:
    """Where a sequence is cut so the last ``test_fraction`` of it is the test part."""
    return length - int(round(length * test_fraction))


# --------------------------------------------------------------------------------------------
# Text: fixed 96-character vocabulary (newline + printable ASCII).

VOCAB_CHARS = "\n" + "".join(chr(c) for c in range(32, 127))

_REPLACEMENTS = {
    "\r": "\n",
    "\t": " ",
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
    "\u00ab": '"',
    "\u00bb": '"',
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2212": "-",
    "\u2014": "--",
    "\u2015": "--",
    "\u2026": "...",
    "\u00e6": "ae",
    "\u00c6": "AE",
    "\u0153": "oe",
    "\u0152": "OE",
    "\u00df": "ss",
    "\u00f8": "o",
    "\u00d8": "O",
    "\u0142": "l",
    "\u0141": "L",
}


def _translation(chars: Any) -> Dict[int, Optional[str]]:
    table = {}  # type: Dict[int, Optional[str]]
    allowed = set(VOCAB_CHARS)
    for ch in chars:
        if ch in allowed:
            continue
        if ch in _REPLACEMENTS:
            table[ord(ch)] = _REPLACEMENTS[ch]
        elif ch.isspace():
            table[ord(ch)] = " "
        else:
            base = "".join(c for c in unicodedata.normalize("NFKD", ch) if c in allowed)
            table[ord(ch)] = base if base and not base.isspace() else None
    return table


def normalize_text(text: str) -> str:
    """Map text onto the 96-character vocabulary (see the module docstring for the rules)."""
    text = text.replace("\r\n", "\n")
    return text.translate(_translation(set(text)))


class Vocab(object):
    """Characters <-> ids. ``chars[i]`` is the character with id ``i``."""

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.table = np.full(256, -1, dtype=np.int64)
        for i, c in enumerate(chars):
            self.table[ord(c)] = i

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"Vocab({len(self.chars)} chars)"


def build_vocab(text: Optional[str] = None, fixed: bool = True) -> Vocab:
    """The vocabulary: the fixed 96 characters (default; ids independent of the text), or with
    ``fixed=False`` only those of them that occur in ``text`` after normalisation."""
    if fixed or text is None:
        return Vocab(VOCAB_CHARS)
    present = set(normalize_text(text))
    return Vocab("".join(c for c in VOCAB_CHARS if c in present))


def encode(text: str, vocab: Vocab) -> np.ndarray:
    """Normalised text as int64 ids; characters outside ``vocab`` are dropped."""
    data = normalize_text(text).encode("ascii")
    ids = vocab.table[np.frombuffer(data, dtype=np.uint8)]
    return ids[ids >= 0]


def decode(ids: Any, vocab: Vocab) -> str:
    return "".join(vocab.chars[int(i)] for i in ids)


def text_windows(
    ids: np.ndarray, seq_len: int = SEQ_LEN, stride: Optional[int] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Inputs ``x[N, T]`` and next-character targets ``y[N, T]`` every ``stride`` characters
    (default ``seq_len``: non-overlapping, so every character is a target once)."""
    stride = stride or seq_len
    if seq_len < 1 or stride < 1:
        raise ValueError("seq_len and stride must be >= 1")
    n = (len(ids) - 1 - seq_len) // stride + 1 if len(ids) > seq_len else 0
    starts = np.arange(n, dtype=np.int64) * stride
    offsets = starts[:, None] + np.arange(seq_len, dtype=np.int64)[None, :]
    return ids[offsets], ids[offsets + 1]


class CharSequenceDataset(object):
    """Windows of a character-id stream for a torch ``DataLoader``: item ``i`` is
    ``(x[T], y[T])`` LongTensors starting at ``i * stride`` (default stride 1: every offset)."""

    def __init__(self, ids: Any, seq_len: int = SEQ_LEN, stride: int = 1) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.seq_len = seq_len
        self.stride = stride
        self.n = (len(self.ids) - 1 - seq_len) // stride + 1 if len(self.ids) > seq_len else 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tuple[Any, Any]:
        import torch

        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"window {i} out of range ({self.n} windows)")
        s = i * self.stride
        x = torch.from_numpy(self.ids[s : s + self.seq_len].copy())
        y = torch.from_numpy(self.ids[s + 1 : s + 1 + self.seq_len].copy())
        return x, y


def read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None


def split_text(
    documents: Sequence[str], split: str, test_fraction: float = TEXT_TEST_FRACTION
) -> str:
    """Each document cut contiguously (first 90 % train, last 10 % test), parts joined by a
    blank line; ``split="all"`` keeps every document whole."""
    parts = []
    for doc in documents:
        cut = contiguous_split(len(doc), test_fraction)
        parts.append(doc if split == "all" else doc[:cut] if split == "train" else doc[cut:])
    return "\n\n".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------
# load_dataset


class LoadedDataset(object):
    """What ``load_dataset`` returns: tensors plus what is needed to interpret them.

    ``x``/``y``: images float32 [N, C, H, W] / int64 [N]; text int64 [N, T] / [N, T].
    ``classes``: class names (images); ``vocab`` and ``ids`` (the split's whole id stream): text.
    """

    def __init__(
        self,
        name: str,
        kind: str,
        split: str,
        x: Any,
        y: Any,
        source: str,
        classes: Optional[List[str]] = None,
        vocab: Optional[Vocab] = None,
        ids: Any = None,
        mean: Optional[List[float]] = None,
        std: Optional[List[float]] = None,
    ) -> None:
        self.name, self.kind, self.split, self.source = name, kind, split, source
        self.x, self.y = x, y
        self.classes, self.vocab, self.ids = classes, vocab, ids
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_classes(self) -> int:
        if self.kind == "text":
            return len(self.vocab) if self.vocab is not None else 0
        return len(self.classes) if self.classes else int(self.y.max()) + 1 if len(self) else 0

    def __repr__(self) -> str:
        return (
            f"LoadedDataset({self.name!r}, {self.kind}, split={self.split}, "
            f"x={list(self.x.shape)}, y={list(self.y.shape)})"
        )


def prepared_path(name: str, data_dir: Optional[str] = None) -> str:
    """The folder of a prepared dataset, or DatasetError naming the command that prepares it."""
    root = data_dir or default_data_dir()
    folder = os.path.join(root, name)
    if not os.path.isfile(os.path.join(folder, MANIFEST)):
        where = "" if data_dir is None else f" --data-dir {data_dir}"
        raise DatasetError(
            f"dataset {name!r} is not prepared in {root}: run `powerfleet data prepare "
            f"{name}{where}` (then copy {folder} to the device if it trains there)"
        )
    return folder


def read_manifest(folder: str) -> Dict[str, Any]:
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise DatasetError(f"{path}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise DatasetError(f"{path}: corrupt manifest (expected a JSON object)")
    return manifest


def load_dataset(
    name_or_path: str,
    data_dir: Optional[str] = None,
    split: str = "train",
    subset: Optional[int] = None,
    seed: int = 0,
    standardize: bool = False,
    seq_len: int = SEQ_LEN,
    labels: str = "fine",
) -> LoadedDataset:
    """Load one split of a prepared dataset or a dataset on disk as tensors.

    ``split``: ``train``, ``test`` or ``all``. ``subset``: images -- how many samples to draw
    (seeded) before the 80/20 split; text -- how many windows to keep (seeded) of the split.
    ``labels``: CIFAR-100's ``fine`` or ``coarse`` labels. See the module docstring.
    """
    if split not in ("train", "test", "all"):
        raise DatasetError(f"split must be train, test or all, got {split!r}")
    if name_or_path in KNOWN_DATASETS:  # a bare known name means the cache ("./austen": a path)
        folder = prepared_path(name_or_path, data_dir)
        name = name_or_path
    elif os.path.exists(name_or_path):
        folder = name_or_path
        name = os.path.basename(os.path.normpath(name_or_path))
    else:
        raise DatasetError(
            f"{name_or_path}: no such file or folder, and not a known dataset "
            f"({', '.join(sorted(KNOWN_DATASETS))})"
        )
    manifest = read_manifest(folder) if os.path.isdir(folder) else {}
    if _is_text(folder, manifest):
        return _load_text(name, folder, manifest, split, subset, seed, seq_len)
    sets, classes = _image_sets(folder, manifest, labels)
    return _load_images(name, folder, sets, classes, split, subset, seed, standardize)


def _is_text(path: str, manifest: Dict[str, Any]) -> bool:
    if manifest:
        return manifest.get("kind") == "text"
    if os.path.isfile(path):
        return path.endswith(".txt")
    entries = os.listdir(path)
    return any(e.endswith(".txt") for e in entries) and not any(
        os.path.isdir(os.path.join(path, e)) for e in entries
    )


def _image_sets(
    path: str, manifest: Dict[str, Any], labels: str
) -> Tuple[Dict[str, Tuple[np.ndarray, np.ndarray]], Optional[List[str]]]:
    """{"train": (x, y), "test": (x, y)} for an official split, or {"all": (x, y)}."""
    classes = manifest.get("classes")
    if os.path.isfile(path):
        if path.endswith(".npz"):
            return _npz_sets(path), classes
        if _read_bytes(path)[:2] == b"\x00\x00":
            raise DatasetError(
                f"{path}: an IDX file alone has no labels; pass the folder holding the "
                "images-idx3-ubyte and labels-idx1-ubyte files"
            )
        x, y = read_cifar_batch(path, labels)
        return {"all": (x, y)}, classes
    train = _idx_pair(path, ["train-"])
    test = _idx_pair(path, ["test-", "t10k-"])
    if train and test:
        return {"train": read_idx_set(*train), "test": read_idx_set(*test)}, classes
    single = _idx_pair(path, [""])
    if single or train or test:
        pair = single or train or test
        return {"all": read_idx_set(*pair)}, classes
    cifar = _cifar_files(path)
    if cifar:
        parts = {}
        for key, files in (("train", cifar[0]), ("test", cifar[1])):
            batches = [read_cifar_batch(f, labels) for f in files]
            parts[key] = (
                np.concatenate([b[0] for b in batches]),
                np.concatenate([b[1] for b in batches]),
            )
        return parts, classes or _cifar_classes(cifar[2], labels)
    npz = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
    if len(npz) == 1:
        return _npz_sets(os.path.join(path, npz[0])), classes
    sub = [d for d in ("train", "test") if os.path.isdir(os.path.join(path, d))]
    if sub == ["train", "test"]:
        xtr, ytr, cls = read_image_folder(os.path.join(path, "train"))
        xte, yte, cls_test = read_image_folder(os.path.join(path, "test"))
        if cls != cls_test:
            raise DatasetError(f"{path}: train/ and test/ have different class folders")
        return {"train": (xtr, ytr), "test": (xte, yte)}, cls
    x, y, cls = read_image_folder(path)
    return {"all": (x, y)}, cls


def _npz_sets(path: str) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zlib.error) as exc:
        raise DatasetError(f"{path}: not a readable .npz ({exc})") from None

    def pair(xk: str, yk: str) -> Tuple[np.ndarray, np.ndarray]:
        x = arrays[xk]
        if x.ndim == 3:
            x = x[:, None]
        elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
            x = x.transpose(0, 3, 1, 2)
        y = arrays[yk].reshape(-1).astype(np.int64)
        if x.ndim != 4 or x.shape[0] != y.shape[0]:
            raise DatasetError(
                f"{path}: {xk} {list(x.shape)} and {yk} {list(y.shape)} do not match"
            )
        return _as_uint8(x, path), y

    if all(k in arrays for k in ("x_train", "y_train", "x_test", "y_test")):
        return {"train": pair("x_train", "y_train"), "test": pair("x_test", "y_test")}
    if "x" in arrays and "y" in arrays:
        return {"all": pair("x", "y")}
    raise DatasetError(
        f"{path}: .npz has {sorted(arrays)}, expected x/y or x_train/y_train/x_test/y_test"
    )


def _load_images(
    name: str,
    source: str,
    sets: Dict[str, Tuple[np.ndarray, np.ndarray]],
    classes: Optional[List[str]],
    split: str,
    k: Optional[int],
    seed: int,
    standardize: bool,
) -> LoadedDataset:
    import torch

    if "all" not in sets and k is None:  # official split, kept as is
        train, test = sets["train"], sets["test"]
    else:
        if "all" in sets:
            x, y = sets["all"]
        else:
            x = np.concatenate([sets["train"][0], sets["test"][0]])
            y = np.concatenate([sets["train"][1], sets["test"][1]])
        if k is not None:
            if k > len(y):
                raise DatasetError(f"{source}: subset of {k} requested, it has {len(y)} images")
            keep = subset(len(y), k, seed)
            x, y = x[keep], y[keep]
        tr, te = split_indices(len(y), IMAGE_TEST_FRACTION, seed)
        train, test = (x[tr], y[tr]), (x[te], y[te])
    if split == "all":
        chosen = (np.concatenate([train[0], test[0]]), np.concatenate([train[1], test[1]]))
    else:
        chosen = train if split == "train" else test
    x = torch.from_numpy(chosen[0].astype(np.float32) / np.float32(255.0))
    mean = std = None
    if standardize:
        ref = train[0].astype(np.float64) / 255.0
        m = ref.mean(axis=(0, 2, 3))
        s = np.maximum(ref.std(axis=(0, 2, 3)), 1e-6)
        x = (x - torch.from_numpy(m.astype(np.float32))[None, :, None, None]) / torch.from_numpy(
            s.astype(np.float32)
        )[None, :, None, None]
        mean, std = [float(v) for v in m], [float(v) for v in s]
    y = torch.from_numpy(np.ascontiguousarray(chosen[1], dtype=np.int64))
    return LoadedDataset(name, "image", split, x, y, source, classes=classes, mean=mean, std=std)


def _text_documents(path: str, manifest: Dict[str, Any]) -> List[str]:
    if os.path.isfile(path):
        return [read_text(path)]
    docs = manifest.get("documents")
    if docs is None:
        docs = sorted(f for f in os.listdir(path) if f.endswith(".txt"))
    if not docs:
        raise DatasetError(f"{path}: no .txt documents found")
    return [read_text(os.path.join(path, d)) for d in docs]


def _load_text(
    name: str,
    source: str,
    manifest: Dict[str, Any],
    split: str,
    k: Optional[int],
    seed: int,
    seq_len: int,
) -> LoadedDataset:
    import torch

    vocab = build_vocab()
    text = split_text(_text_documents(source, manifest), split)
    ids = encode(text, vocab)
    x, y = text_windows(ids, seq_len)
    if k is not None:
        if k > len(x):
            raise DatasetError(
                f"{source}: subset of {k} windows requested, the {split} split has {len(x)} "
                f"windows of {seq_len} characters"
            )
        keep = subset(len(x), k, seed)
        x, y = x[keep], y[keep]
    return LoadedDataset(
        name,
        "text",
        split,
        torch.from_numpy(np.ascontiguousarray(x)),
        torch.from_numpy(np.ascontiguousarray(y)),
        source,
        vocab=vocab,
        ids=torch.from_numpy(ids),
    )
