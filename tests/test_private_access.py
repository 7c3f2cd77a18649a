"""No product module reaches into another object's private fields.

Why: state that any module may read and write has no owner; the closed loop was once split by
the line cap into modules that took ``loop: Any`` and set its ``_budget``, ``_pending`` and
``_over_since`` (about 105 such accesses). Now each part owns its fields and offers methods, and
this scan keeps it so: an attribute ``X._name`` (not a dunder) is an access into another
object's privates unless ``X`` is ``self`` or ``cls``.

Two kinds are not ours to rename and are exempt by rule, not by site: a standard-library
module's own names (``os._exit``, the ``argparse._SubParsersAction`` type that
``add_subparsers`` returns), and the named-tuple API (``_asdict``, ``_replace``, ...: documented
public, underscored only so they cannot clash with a field). Nothing else is allowed. The first
test proves the scan on a small package written here; the second runs it on the product.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("fleet", "clients", "strategies", "deployment", "simulations", "benchmarks")
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}


def _stdlib_modules(tree: ast.Module) -> set[str]:
    """The names this module binds to standard-library modules (``import os``, ``import x as
    y`` binds y)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in sys.stdlib_module_names:
                    bound.add(alias.asname or top)
    return bound


def private_accesses(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``path:line: expr`` for every access into another object's private attribute."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            stdlib = _stdlib_modules(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Attribute):
                    continue
                name = node.attr
                if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                    continue
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if isinstance(owner, ast.Name) and owner.id in stdlib:
                    continue  # the standard library's own name
                if name in NAMEDTUPLE_API:
                    continue
                rel = path.relative_to(root).as_posix()
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_what_reaches_in_and_spares_what_does_not(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "parts.py").write_text(
        "import os\n"
        "import argparse as ap\n"
        "class Part:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    @classmethod\n"
        "    def make(cls):\n"
        "        return cls._default\n"
        "    def __repr__(self):\n"
        "        return other.__class__.__name__\n"
        "def poke(loop, rec):\n"
        "    loop._budget = 2\n"  # line 12: a write into another object's field
        "    x = rec._asdict()\n"
        "    os._exit(0)\n"
        "    s: ap._SubParsersAction = None\n"
        "    return loop.sampler._hook\n"  # line 16: through a public attribute, still private
    )
    assert private_accesses(tmp_path, ("app",)) == [
        "app/parts.py:12: loop._budget",
        "app/parts.py:16: loop.sampler._hook",
    ]


def test_no_product_module_reaches_into_another_objects_private_fields():
    found = private_accesses(ROOT, SCANNED)
    assert not found, "private attributes reached from outside their object:\n" + "\n".join(found)
