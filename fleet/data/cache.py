"""The dataset cache on disk: where it lives, its layout, and whether a dataset in it is complete.

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

Why separate: the layout and its checks are the contract with the device readers
(``fleet.agent.data.datasets``), independent of how a dataset is fetched; ``fleet.data.prepare``
builds into it atomically under :func:`lock`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from fleet.agent.data.datasets import MANIFEST, default_data_dir

FORMAT_VERSION = 1


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    return Path(data_dir if data_dir is not None else default_data_dir()).expanduser()


def verify(folder: Path) -> bool:
    """True when ``folder`` holds a complete dataset: marker present, every file's checksum ok."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("format") != FORMAT_VERSION or not files:
            return False
        for rel, meta in files.items():
            p = folder / rel
            if p.stat().st_size != meta["bytes"] or sha256(p) != meta["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return True


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def lock(path: Path) -> Iterator[None]:
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
