"""The package layout keeps its shape: no import cycles, no import against the declared layers,
no product module grown past what one job needs.

The layers are the fenced ``layers`` block of docs/architecture.md (lowest first): a module may
import its own layer and the ones below it, never one above. The graph comes from the source
(``tests/import_graph.py``), so a function-level import counts as much as a top-level one. The
first tests prove the checker on small packages written here, with a known cycle and a known
upward import; the last ones run it on the product.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import against_layers, cycles, edges, layer_of, modules, read_layers

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
LAYERS = read_layers(DOC)
PACKAGES = sorted({layer.split(".")[0] for layer in LAYERS})
MAX_LINES = 500  # a product module holds one job; data tables are declared below
DATA_TABLES: set[str] = set()  # modules that are generated data, exempt from MAX_LINES


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    root = _package(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/a.py": "from app.b import f\n",
            "app/b.py": "def f():\n    from app import c\n    return c\n",
            "app/c.py": "from . import a\n",  # relative: app.a
            "app/d.py": "import app.a\n",  # imports into the cycle, not part of it
        },
    )
    graph = edges(root, ["app"])
    assert cycles(graph) == [["app.a", "app.b", "app.c"]]
    by_pair = {(e.source, e.target): e.line for e in graph}
    assert by_pair[("app.b", "app.c")] == 2  # the function-level import, with its line
    assert ("app.d", "app.a") in by_pair


def test_checker_finds_an_import_against_the_layers(tmp_path):
    root = _package(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/base.py": "X = 1\n",
            "low/bad.py": "if False:\n    from high.top import Y\n",
            "high/__init__.py": "",
            "high/top.py": "from low.base import X\nY = X\n",
        },
    )
    layers = ["low", "high"]
    bad = against_layers(edges(root, ["low", "high"]), layers)
    assert [(e.source, e.target, e.path.name, e.line) for e in bad] == [
        ("low.bad", "high.top", "bad.py", 2)
    ]
    assert layer_of("high.top", layers) == 1 and layer_of("other.mod", layers) is None


def test_the_architecture_page_declares_every_product_package():
    """A new package is placed in the layers on purpose, not by accident."""
    known = modules(ROOT, PACKAGES)
    undeclared = sorted(m for m in known if layer_of(m, LAYERS) is None)
    assert not undeclared, f"not in the layers block of {DOC}: {undeclared}"
    missing = [layer for layer in LAYERS if layer not in known]
    assert not missing, f"declared in {DOC} but not in the tree: {missing}"


@pytest.mark.slow
def test_the_product_has_no_import_cycle():
    found = cycles(edges(ROOT, PACKAGES))
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.slow
def test_no_import_runs_against_the_layers():
    bad = against_layers(edges(ROOT, PACKAGES), LAYERS)
    lines = [f"{e.path.relative_to(ROOT)}:{e.line}: {e.source} imports {e.target}" for e in bad]
    assert not lines, "imports against the layers of docs/architecture.md:\n" + "\n".join(lines)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_product_module_holds_more_than_one_job(package):
    sizes = {
        m: len(p.read_text().splitlines())
        for m, p in modules(ROOT, [package]).items()
        if m not in DATA_TABLES
    }
    big = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them by job): {big}"


def test_the_kernel_is_the_ground_floor_and_imports_only_the_standard_library():
    """The method's kernel runs on a JetPack 4.6 board as well as on the coordinator: it may
    import the standard library and itself, nothing else (not numpy, not the rest of the
    project), and it is the lowest layer of the page."""
    import ast
    import sys

    assert LAYERS[0] == "fleet.method"
    kernel = ROOT / "fleet" / "method"
    foreign = []
    for path in sorted(kernel.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if name.startswith("fleet.method") or top in sys.stdlib_module_names:
                    continue
                foreign.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}")
    assert not foreign, "\n".join(foreign)
