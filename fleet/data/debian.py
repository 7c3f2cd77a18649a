"""The Debian route: ``apt-get download`` a package and ``dpkg-deb -x`` it (no install).

Why separate: one module per package source; this one knows apt's failure modes (a stale package
list is refreshed once, as root only).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from fleet.data.step import PrepareError, Report
from fleet.data.tools import run_tool

_apt_updated = False


def apt_fetch(dataset: str, package: str, work: Path, report: Report) -> tuple[Path, str]:
    """``apt-get download`` the package and ``dpkg-deb -x`` it (no install); (root, version)."""
    global _apt_updated
    report(f"apt-get download {package}", 0.1)
    try:
        run_tool(dataset, ["apt-get", "download", package], work)
    except PrepareError as exc:
        stale = "Unable to locate package" in str(exc) or "no installation candidate" in str(exc)
        if not stale or _apt_updated or os.geteuid() != 0:
            hint = "; run `apt-get update` first" if stale else ""
            raise PrepareError(f"{exc}{hint}") from None
        report("apt-get update", 0.15)
        run_tool(dataset, ["apt-get", "update", "-qq"], work)
        _apt_updated = True
        run_tool(dataset, ["apt-get", "download", package], work)
    debs = sorted(work.glob(f"{package}_*.deb"))
    if not debs:
        raise PrepareError(f"{dataset}: `apt-get download {package}` left no .deb in {work}")
    report(f"dpkg-deb -x {debs[0].name}", 0.4)
    root = work / "root"
    run_tool(dataset, ["dpkg-deb", "-x", str(debs[0]), str(root)], work)
    version = urllib.parse.unquote(debs[0].name.split("_")[1])
    return root, version
