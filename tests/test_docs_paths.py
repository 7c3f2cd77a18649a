"""The map is true: every file or folder the README and docs/architecture.md name exists.

A newcomer reads the README's folder table and the architecture page before the code; a path
there that does not exist sends them nowhere. The check is literal: every backticked token that
looks like a repository path (has a ``/`` or ends in a file suffix) must exist, either from the
repository root or, on the architecture page, under the folder of the section it appears in
(``### `fleet/agent/`: ...`` makes ``devices/base.py`` mean ``fleet/agent/devices/base.py``), or
under the folder named in the first cell of its table row. A bare file name (``profile.py``)
must be the name of some tracked file. Placeholders (``<run-dir>``, globs, absolute paths, URLs,
``$VARS``, run outputs) are not paths of the repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/architecture.md"]
TOP = sorted(
    {
        t.split("/")[0]
        for t in subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True
        ).stdout.split()
        if "/" in t
    }
)


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.split()


def _candidates(text: str) -> list[tuple[int, str, str | None, str | None]]:
    """(line, token, section folder, row folder) for every backticked token that names a path
    into the repository: it starts with one of the repository's top-level folders, or it is a
    Python module file (``x.py``, ``devices/x.py``, ``fleet/core/x.py``)."""
    found = []
    section = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            m = re.search(r"`([\w./-]+/)`", line)
            section = m.group(1) if m else None
        row = None
        if line.startswith("|"):
            m = re.search(r"`([\w./-]+/)`", line.split("|")[1])
            row = m.group(1) if m else None
        for token in re.findall(r"`([^`\s]+)`", line):
            token = token.rstrip(",.;:")
            if not re.fullmatch(r"[\w][\w./-]*", token):
                continue
            if token.split("/")[0] in TOP and "/" in token or token.endswith(".py"):
                found.append((lineno, token, section, row))
    return found


def _exists(token: str, section: str | None, row: str | None, names: set[str]) -> bool:
    bases = [ROOT]
    for folder in (section, row):
        if folder:
            bases += [ROOT / folder, ROOT / (section or "") / folder]
    forms = [token]
    m = re.fullmatch(r"(.*/\w+)\.([A-Za-z_]\w*)", token)  # module.attribute
    if m and not token.endswith(".py"):
        forms.append(m.group(1) + ".py")
    if any((base / form).exists() for base in bases for form in forms):
        return True
    return "/" not in token and token in names


def missing_paths(doc: Path, tracked: list[str]) -> list[str]:
    names = {Path(t).name for t in tracked}
    return [
        f"{doc.relative_to(ROOT)}:{lineno}: `{token}` does not exist"
        for lineno, token, section, row in _candidates(doc.read_text())
        if not _exists(token, section, row, names)
    ]


def test_the_checker_finds_a_missing_path_and_accepts_real_ones():
    doc = ROOT / "docs" / "_probe_for_test.md"
    text = (
        "### `fleet/agent/`: on the board\n"
        "| `devices/base.py` | real, under the section |\n"
        "| `fleet/fleetconfig.py` | gone |\n"
        "See `tests/test_docs_paths.py`, `fleet/budgets/nowhere.read_budget` and `trust.py`.\n"
        "Run output `runs/<name>/report.json` is no repository path.\n"
    )
    doc.write_text(text)
    try:
        bad = missing_paths(doc, _tracked())
    finally:
        doc.unlink()
    assert [b.split(": ", 1)[1] for b in bad] == [
        "`fleet/fleetconfig.py` does not exist",
        "`fleet/budgets/nowhere.read_budget` does not exist",
        "`trust.py` does not exist",
    ]


@pytest.mark.parametrize("name", DOCS)
def test_every_path_the_docs_name_exists(name):
    bad = missing_paths(ROOT / name, _tracked())
    assert not bad, "\n".join(bad)
