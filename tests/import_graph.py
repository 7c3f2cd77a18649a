"""The product's import graph, built from the source with ``ast`` (not a regex, not by importing).

Why from the source: importing would hide function-level imports until they run, and a regex
misreads strings, comments and relative imports. Every ``import`` and ``from ... import`` node
counts, wherever it sits (module level, inside a function, under ``TYPE_CHECKING``), because any
of them can close a cycle at run time or tie a lower layer to a higher one.

The layers are declared once, in docs/architecture.md (the fenced ``layers`` block, lowest
first); ``tests/test_architecture.py`` checks the graph against them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (the longest known module the import names)
    path: Path  # the importing file
    line: int


def modules(root: Path, packages: list[str]) -> dict[str, Path]:
    """``dotted name -> file`` for every .py file under the given top-level packages."""
    found: dict[str, Path] = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = f
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a product module (``a.b.c`` -> ``a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:  # relative: resolved against the importing module's package
            pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        # ``from pkg import sub`` names the submodule when one exists, else the package
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return [t for t in (_known(n, known) for n in names) if t is not None]


def edges(root: Path, packages: list[str]) -> list[Edge]:
    """Every import between product modules (self-imports dropped), in file order."""
    known = modules(root, packages)
    out: list[Edge] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, path, node, known):
                    if target != module:
                        out.append(Edge(module, target, path, node.lineno))
    return out


def cycles(graph_edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in graph_edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def read_layers(doc: Path) -> list[str]:
    """The fenced ``layers`` block of the architecture page: one package per line, lowest
    first; ``#`` starts a comment."""
    m = re.search(r"```layers\n(.*?)```", doc.read_text(), re.S)
    if not m:
        raise ValueError(f"{doc}: no ```layers block")
    return [ln.split("#")[0].strip() for ln in m.group(1).splitlines() if ln.split("#")[0].strip()]


def layer_of(module: str, layers: list[str]) -> int | None:
    """Index of the most specific declared layer that holds ``module`` (None: undeclared)."""
    best: int | None = None
    for i, layer in enumerate(layers):
        if module == layer or module.startswith(layer + "."):
            if best is None or len(layer) > len(layers[best]):
                best = i
    return best


def against_layers(graph_edges: list[Edge], layers: list[str]) -> list[Edge]:
    """Imports from a lower layer of a higher one."""
    bad = []
    for e in graph_edges:
        src, dst = layer_of(e.source, layers), layer_of(e.target, layers)
        if src is not None and dst is not None and dst > src:
            bad.append(e)
    return bad
