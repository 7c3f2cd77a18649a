"""Image file formats read on the device: IDX (read and write), PGM/PPM, ``.npy`` and
PNG/JPEG/BMP images, image folders (one subfolder per class) and ``.npz`` arrays.

Why separate: decoding bytes into uint8 ``[N, C, H, W]`` arrays is one job, independent of where
the files come from (the prepared cache or a folder on disk) and of how the loader splits them
(``fleet.agent.data.datasets``). Standard library and numpy only (Python 3.6); Pillow is optional
and
imported only for PNG/JPEG/BMP. Every unreadable input raises :class:`DatasetError` with one line
naming the file and what was expected.
"""

import gzip
import io
import os
import struct
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fleet.agent.data.dataerror import DatasetError

IMAGE_EXTENSIONS = (".pgm", ".ppm", ".pnm", ".npy", ".png", ".jpg", ".jpeg", ".bmp")

# --------------------------------------------------------------------------------------------
# IDX (the MNIST file format): magic 0x00 0x00 TYPE NDIM, NDIM big-endian uint32 sizes, data.

IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_CODES = {"uint8": 0x08, "int8": 0x09, "int16": 0x0B, "int32": 0x0C}
IDX_CODES.update({"float32": 0x0D, "float64": 0x0E})


def read_bytes(path: str) -> bytes:
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
    raw = read_bytes(path)
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


def idx_pair(folder: str, prefixes: Sequence[str]) -> Optional[Tuple[str, str]]:
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
# Image folders: ROOT/CLASS/IMAGE (or ROOT/train/CLASS/IMAGE + ROOT/test/CLASS/IMAGE).


def _pnm_tokens(raw: bytes, path: str, count: int) -> Tuple[List[int], int]:
    """The first ``count`` whitespace-separated header numbers and the offset after them."""
    values: List[int] = []
    pos, n = 2, len(raw)
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
    raw = read_bytes(path)
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
            img: Image.Image = im
            if im.mode not in ("L", "RGB"):
                img = im.convert("L" if im.mode in ("1", "I", "I;16", "F", "LA") else "RGB")
            arr = np.asarray(img, dtype=np.uint8)
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
# .npz arrays: x/y (one set) or x_train/y_train/x_test/y_test (an official split).


def npz_sets(path: str) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """{"train": (x, y), "test": (x, y)} or {"all": (x, y)} from an .npz, images as uint8."""
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
