"""Device-side dataset readers (fleet.agent.data.datasets) on tiny files written in tmp folders."""

from __future__ import annotations

import gzip
import os
import pickle
import string
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fleet.agent.data.cifar import read_cifar_batch
from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.datasets import load_dataset
from fleet.agent.data.imagefiles import read_idx, read_image, write_idx
from fleet.agent.data.splits import split_indices, subset
from fleet.agent.data.textdata import CharSequenceDataset, split_text, text_windows
from fleet.agent.data.vocab import VOCAB_CHARS, build_vocab, decode, encode, normalize_text

# -- IDX --------------------------------------------------------------------------------------


def idx_bytes(arr: np.ndarray, code: int) -> bytes:
    """The IDX layout written independently of write_idx: 0,0,type,ndim, BE dims, BE data."""
    be = arr.astype(arr.dtype.newbyteorder(">"))
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + be.tobytes()


def images(n: int = 10, h: int = 4, w: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, size=(n, h, w)).astype(np.uint8)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip_matches_the_real_header_layout(tmp_path: Path, gz: bool):
    x = images()
    path = tmp_path / ("x.idx3" + (".gz" if gz else ""))
    write_idx(str(path), x)
    raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    assert raw == idx_bytes(x, 0x08)
    assert raw[:4] == b"\x00\x00\x08\x03" and raw[4:8] == struct.pack(">I", 10)
    np.testing.assert_array_equal(read_idx(str(path)), x)


@pytest.mark.parametrize(
    "dtype, code", [(np.int16, 0x0B), (np.int32, 0x0C), (np.float32, 0x0D), (np.float64, 0x0E)]
)
def test_idx_big_endian_types(tmp_path: Path, dtype, code: int):
    arr = (np.arange(12).reshape(3, 4) * -3).astype(dtype)
    (tmp_path / "a.idx").write_bytes(idx_bytes(arr, code))
    out = read_idx(str(tmp_path / "a.idx"))
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


def test_idx_gzip_byte_identical_across_writes(tmp_path: Path):
    write_idx(str(tmp_path / "a.gz"), images())
    write_idx(str(tmp_path / "b.gz"), images())
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:-1], "truncated IDX file"),
        (lambda b: b[:6], "truncated IDX header"),
        (lambda b: b[:2], "truncated IDX file"),
        (lambda b: b + b"\x00", "unexpected bytes after"),
        (lambda b: b"\x08\x03" + b[2:], "not an IDX file"),
        (lambda b: b[:2] + b"\x07" + b[3:], "not an IDX file"),
        (lambda b: gzip.compress(b)[:-12], "truncated or corrupt gzip"),
    ],
)
def test_idx_damage_is_one_line_naming_the_file(tmp_path: Path, mutate, message: str):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(mutate(idx_bytes(images(), 0x08)))
    with pytest.raises(DatasetError, match=message) as info:
        read_idx(str(path))
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def write_idx_folder(folder: Path, n_train: int = 20, n_test: int = 5, single: bool = False):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(1)
    if single:
        write_idx(str(folder / "images-idx3-ubyte.gz"), images(n_train, 28, 28))
        write_idx(str(folder / "labels-idx1-ubyte.gz"), (np.arange(n_train) % 10).astype(np.uint8))
        return
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(str(folder / f"{prefix}-images-idx3-ubyte.gz"), images(n, 28, 28, n))
        write_idx(
            str(folder / f"{prefix}-labels-idx1-ubyte"), rng.randint(0, 10, n).astype(np.uint8)
        )


def test_idx_folder_keeps_the_official_split(tmp_path: Path):
    write_idx_folder(tmp_path / "fm")
    train = load_dataset(str(tmp_path / "fm"), split="train")
    test = load_dataset(str(tmp_path / "fm"), split="test")
    assert train.x.shape == (20, 1, 28, 28) and test.x.shape == (5, 1, 28, 28)
    assert train.x.dtype == torch.float32 and train.y.dtype == torch.int64
    assert 0.0 <= float(train.x.min()) and float(train.x.max()) <= 1.0
    expected = read_idx(str(tmp_path / "fm" / "train-images-idx3-ubyte.gz"))
    np.testing.assert_allclose(train.x[:, 0].numpy() * 255, expected, atol=1e-3)


def test_idx_single_set_is_split_80_20_and_subset_first(tmp_path: Path):
    write_idx_folder(tmp_path / "m", n_train=50, single=True)
    tr = load_dataset(str(tmp_path / "m"), split="train")
    te = load_dataset(str(tmp_path / "m"), split="test")
    assert (len(tr), len(te)) == (40, 10)
    sub = load_dataset(str(tmp_path / "m"), split="train", subset=20, seed=3)
    assert len(sub) == 16 and len(load_dataset(str(tmp_path / "m"), split="test", subset=20)) == 4
    every = load_dataset(str(tmp_path / "m"), split="all")
    assert len(every) == 50


def test_idx_label_count_mismatch(tmp_path: Path):
    write_idx_folder(tmp_path / "m", n_train=10, single=True)
    write_idx(str(tmp_path / "m" / "labels-idx1-ubyte.gz"), np.zeros(9, dtype=np.uint8))
    with pytest.raises(DatasetError, match="9 labels for 10 images"):
        load_dataset(str(tmp_path / "m"))


def test_standardize_uses_train_statistics(tmp_path: Path):
    write_idx_folder(tmp_path / "m", n_train=50, single=True)
    tr = load_dataset(str(tmp_path / "m"), split="train", standardize=True)
    te = load_dataset(str(tmp_path / "m"), split="test", standardize=True)
    assert abs(float(tr.x.mean())) < 1e-4 and abs(float(tr.x.std()) - 1) < 1e-2
    assert te.mean == tr.mean and te.std == tr.std


# -- CIFAR ------------------------------------------------------------------------------------


def cifar_batch(n: int, seed: int, fine: bool = False) -> dict:
    rng = np.random.RandomState(seed)
    d = {
        b"batch_label": b"training batch",
        b"data": rng.randint(0, 256, (n, 3072)).astype(np.uint8),
    }
    if fine:
        d[b"fine_labels"] = list(rng.randint(0, 100, n))
        d[b"coarse_labels"] = list(rng.randint(0, 20, n))
    else:
        d[b"labels"] = [int(v) for v in rng.randint(0, 10, n)]
    d[b"filenames"] = [b"img_%d.png" % i for i in range(n)]
    return d


def dump(path: Path, obj) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=2))
    return path


def test_cifar10_folder(tmp_path: Path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    batches = [dump(root / f"data_batch_{i}", cifar_batch(4, i)) for i in (1, 2)]
    dump(root / "test_batch", cifar_batch(3, 9))
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse"]
    dump(root / "batches.meta", {b"label_names": names + [b"ship", b"truck"]})
    tr = load_dataset(str(root), split="train")
    te = load_dataset(str(root), split="test")
    assert tr.x.shape == (8, 3, 32, 32) and te.x.shape == (3, 3, 32, 32)
    assert tr.classes[0] == "airplane" and len(tr.classes) == 10
    first = cifar_batch(4, 1)
    # Row layout: 1024 red, 1024 green, 1024 blue, each row-major 32x32.
    assert tr.x[0, 1, 0, 5] * 255 == pytest.approx(first[b"data"][0, 1024 + 5], abs=1e-3)
    assert tr.y.tolist()[:4] == first[b"labels"]
    x, y = read_cifar_batch(str(batches[1]))
    assert x.shape == (4, 3, 32, 32) and y.dtype == np.int64


def test_cifar100_fine_and_coarse(tmp_path: Path):
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    dump(root / "train", cifar_batch(5, 1, fine=True))
    dump(root / "test", cifar_batch(2, 2, fine=True))
    fine = load_dataset(str(root), split="train")
    coarse = load_dataset(str(root), split="train", labels="coarse")
    assert fine.y.tolist() == cifar_batch(5, 1, fine=True)[b"fine_labels"]
    assert coarse.y.tolist() == cifar_batch(5, 1, fine=True)[b"coarse_labels"]


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "payload, message",
    [
        (pickle.dumps({b"batch": 1}), "not a CIFAR batch"),
        (pickle.dumps([1, 2, 3]), "not a CIFAR batch"),
        (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), "3072"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "1 CIFAR labels"),
        (pickle.dumps(Evil()), "refusing to load"),
        (b"\x80\x02}q\x00(U\x04data", "not a CIFAR python pickle"),
        (b"this is not a pickle", "not a CIFAR python pickle"),
    ],
)
def test_bad_cifar_pickles(tmp_path: Path, payload: bytes, message: str):
    path = tmp_path / "data_batch_1"
    path.write_bytes(payload)
    with pytest.raises(DatasetError, match=message) as info:
        read_cifar_batch(str(path))
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


# -- image folders ----------------------------------------------------------------------------


def pgm(path: Path, img: np.ndarray, ascii_: bool = False) -> None:
    h, w = img.shape
    if ascii_:
        body = " ".join(str(v) for v in img.ravel()).encode()
        path.write_bytes(b"P2\n# a comment\n%d %d\n255\n" % (w, h) + body + b"\n")
    else:
        path.write_bytes(b"P5\n%d %d\n255\n" % (w, h) + img.tobytes())


def ppm(path: Path, img: np.ndarray) -> None:  # img: H, W, 3
    h, w, _ = img.shape
    path.write_bytes(b"P6 %d %d 255\n" % (w, h) + img.tobytes())


def test_image_folder_pgm_ppm_npy(tmp_path: Path):
    rng = np.random.RandomState(0)
    for cls in ("cat", "dog"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
    gray = rng.randint(0, 256, (6, 5)).astype(np.uint8)
    rgb = rng.randint(0, 256, (6, 5, 3)).astype(np.uint8)
    pgm(tmp_path / "imgs" / "cat" / "a.pgm", gray)
    pgm(tmp_path / "imgs" / "cat" / "b.pgm", gray, ascii_=True)
    ppm(tmp_path / "imgs" / "dog" / "c.ppm", rgb)
    np.save(tmp_path / "imgs" / "dog" / "d.npy", rgb)
    (tmp_path / "imgs" / "dog" / "notes.txt").write_text("ignored")
    ds = load_dataset(str(tmp_path / "imgs"), split="all")
    assert ds.classes == ["cat", "dog"] and ds.y.tolist() == [0, 0, 1, 1]
    assert ds.x.shape == (4, 3, 6, 5)  # gray promoted to 3 channels next to colour images
    x = (ds.x * 255).round().to(torch.uint8).numpy()
    for i in (0, 1):
        for c in range(3):
            np.testing.assert_array_equal(x[i, c], gray)
    np.testing.assert_array_equal(x[2].transpose(1, 2, 0), rgb)
    np.testing.assert_array_equal(x[3].transpose(1, 2, 0), rgb)
    assert read_image(str(tmp_path / "imgs" / "cat" / "a.pgm")).shape == (1, 6, 5)


def test_image_folder_errors(tmp_path: Path):
    (tmp_path / "a" / "x").mkdir(parents=True)
    pgm(tmp_path / "a" / "x" / "1.pgm", np.zeros((4, 4), np.uint8))
    pgm(tmp_path / "a" / "x" / "2.pgm", np.zeros((5, 4), np.uint8))
    with pytest.raises(DatasetError, match="2.pgm: image is 4x5, expected 4x4"):
        load_dataset(str(tmp_path / "a"))
    bad = tmp_path / "t.pgm"
    bad.write_bytes(b"P5\n4 4\n255\n" + b"\x00" * 10)
    with pytest.raises(DatasetError, match="truncated image data"):
        read_image(str(bad))
    bad.write_bytes(b"GIF89a")
    with pytest.raises(DatasetError, match="not a PGM/PPM image"):
        read_image(str(bad))
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(DatasetError, match="no images found"):
        load_dataset(str(tmp_path / "empty"))


def test_png_with_pillow_and_clear_error_without(tmp_path: Path, monkeypatch):
    pil = pytest.importorskip("PIL.Image")
    img = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    pil.fromarray(img).save(tmp_path / "a.png")
    np.testing.assert_array_equal(read_image(str(tmp_path / "a.png"))[0], img)
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now raises ImportError
    with pytest.raises(DatasetError, match="needs Pillow"):
        read_image(str(tmp_path / "a.png"))


def test_npz_with_official_split(tmp_path: Path):
    np.savez(
        tmp_path / "d.npz",
        x_train=images(8, 4, 4),
        y_train=np.arange(8),
        x_test=images(2, 4, 4),
        y_test=np.arange(2),
    )
    assert load_dataset(str(tmp_path / "d.npz"), split="test").x.shape == (2, 1, 4, 4)


# -- splits -----------------------------------------------------------------------------------


def test_split_indices_deterministic_disjoint_80_20():
    tr, te = split_indices(1000, 0.2, seed=7)
    tr2, te2 = split_indices(1000, 0.2, seed=7)
    np.testing.assert_array_equal(tr, tr2)
    np.testing.assert_array_equal(te, te2)
    assert (len(tr), len(te)) == (800, 200)
    assert not set(tr.tolist()) & set(te.tolist())
    assert sorted(tr.tolist() + te.tolist()) == list(range(1000))
    assert not np.array_equal(te, split_indices(1000, 0.2, seed=8)[1])
    assert [len(p) for p in split_indices(101, 0.1, 0)] == [91, 10]


def test_subset_deterministic_sorted_unique():
    a = subset(100, 25, seed=1)
    np.testing.assert_array_equal(a, subset(100, 25, seed=1))
    assert len(set(a.tolist())) == 25 and list(a) == sorted(a) and a.max() < 100
    assert not np.array_equal(a, subset(100, 25, seed=2))
    with pytest.raises(DatasetError, match="subset of 101"):
        subset(100, 101)


# -- text -------------------------------------------------------------------------------------


def test_vocab_is_letters_digits_punctuation_space_newline():
    allowed = string.ascii_letters + string.digits + string.punctuation + " \n"
    assert len(VOCAB_CHARS) == 96 and set(VOCAB_CHARS) == set(allowed)
    vocab = build_vocab("anything")
    assert len(vocab) == 96 and vocab.chars == VOCAB_CHARS
    small = build_vocab("abba, cab!", fixed=False)
    assert small.chars == " !,abc"


def test_normalize_maps_or_drops_everything_else():
    text = "“Café”—naïve\tŒuvre…\r\nline2\rline3 £5 日本 \u00a0end\ufeff"
    out = normalize_text(text)
    assert out == '"Cafe"--naive OEuvre...\nline2\nline3 5   end'
    assert set(out) <= set(VOCAB_CHARS)


def test_encode_decode_round_trip_and_windows():
    vocab = build_vocab()
    ids = encode("Hello,\nworld ☃!", vocab)
    assert ids.dtype == np.int64 and decode(ids, vocab) == "Hello,\nworld !"
    stream = np.arange(200, dtype=np.int64)
    x, y = text_windows(stream, seq_len=64)
    assert x.shape == y.shape == (3, 64)
    np.testing.assert_array_equal(y, x + 1)
    assert x[1, 0] == 64
    ds = CharSequenceDataset(stream, seq_len=64)
    assert len(ds) == 200 - 64
    xi, yi = ds[10]
    assert xi.dtype == torch.int64 and xi.tolist() == list(range(10, 74))
    assert yi.tolist() == list(range(11, 75))
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_text_split_is_contiguous_90_10_per_document():
    docs = ["a" * 90 + "b" * 10, "c" * 45 + "d" * 5]
    assert split_text(docs, "train") == "a" * 90 + "\n\n" + "c" * 45
    assert split_text(docs, "test") == "b" * 10 + "\n\n" + "d" * 5


def test_text_folder_loads_windows(tmp_path: Path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "one.txt").write_text("It is a truth universally acknowledged. " * 40)
    (tmp_path / "t" / "two.txt").write_text("Call me Ishmael. " * 80)
    tr = load_dataset(str(tmp_path / "t"), split="train", seq_len=32)
    te = load_dataset(str(tmp_path / "t"), split="test", seq_len=32)
    assert tr.kind == "text" and tr.x.shape[1] == 32 and tr.x.dtype == torch.int64
    assert torch.equal(tr.x[:, 1:], tr.y[:, :-1])
    assert len(te.ids) < len(tr.ids) / 5
    assert decode(te.ids[:10].tolist(), te.vocab) == decode(te.ids.tolist(), te.vocab)[:10]
    one = load_dataset(str(tmp_path / "t" / "two.txt"), split="train", subset=3, seed=1)
    assert one.x.shape == (3, 64)
    with pytest.raises(DatasetError, match="two.txt: subset of 3 windows requested"):
        load_dataset(str(tmp_path / "t" / "two.txt"), split="test", subset=3)


def test_not_utf8_text(tmp_path: Path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9")
    with pytest.raises(DatasetError, match="bad.txt: not UTF-8"):
        load_dataset(str(tmp_path / "bad.txt"))


# -- names and the cache ----------------------------------------------------------------------


def test_not_prepared_names_the_command(tmp_path: Path):
    with pytest.raises(DatasetError) as info:
        load_dataset("austen", data_dir=str(tmp_path))
    msg = str(info.value)
    assert "powerfleet data prepare austen" in msg and str(tmp_path) in msg and "\n" not in msg


def test_default_data_dir_from_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("POWERFLEET_DATA", str(tmp_path / "cache"))
    with pytest.raises(DatasetError, match="prepare mnist-5k`"):
        load_dataset("mnist-5k")


def test_unknown_name(tmp_path: Path):
    with pytest.raises(DatasetError, match="not a known dataset"):
        load_dataset("imagenet-21k", data_dir=str(tmp_path))
    with pytest.raises(DatasetError, match="split must be"):
        load_dataset(str(tmp_path), split="validation")
