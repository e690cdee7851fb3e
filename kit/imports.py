"""The import graph of the checkout's Python: every import statement of a
module, at module level or inside a function (``if TYPE_CHECKING`` too),
resolved to the checkout's module it names.

Read by the layering test (``kit_tests/test_layers.py``: no import runs
up the floors docs/architecture.md draws, no cycle) and by the
module -> test table of docs/testing.md (``python -m kit.test_table``).
Importing ``a.b.c`` counts as an import of ``a.b.c`` alone, not of the
packages above it (their ``__init__`` runs first, but a package that
imports its children only inside functions forms no cycle with them).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Import:
    """One import of one module: who imports what, and where."""

    source: str        # the importing module (dotted)
    target: str        # the imported module of the checkout (dotted)
    path: Path         # the importing file
    line: int          # the statement's line

    def where(self) -> str:
        """``file:line`` relative to the checkout."""
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of a file under ``root`` (a package is its
    ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(folders: tuple[str, ...] = ("autograder", "kit"),
            root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module under ``folders``."""
    return {module_name(p, root): p
            for folder in folders
            for p in sorted((root / folder).rglob("*.py"))
            if "__pycache__" not in p.parts}


def _resolve(name: str, known: set[str]) -> str:
    """The longest known module ``name`` names (``a.b.func`` -> ``a.b``),
    or ""."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def imports(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import statement of module ``name`` (file ``path``) that
    names a module of ``known``, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, Import] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name, known) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [_resolve(f"{base}.{a.name}", known) or
                       _resolve(base, known) for a in node.names]
        else:
            continue
        for target in targets:
            if target and target != name and target not in found:
                found[target] = Import(name, target, path, node.lineno)
    return sorted(found.values(), key=lambda i: (i.line, i.target))


def graph(known: dict[str, Path]) -> dict[str, list[Import]]:
    """Module -> its imports of the other ``known`` modules."""
    names = set(known)
    return {name: imports(name, path, names) for name, path in known.items()}


def cycle(edges: dict[str, list[Import]]) -> list[Import]:
    """The imports of one cycle of ``edges`` (each leads to the next and the
    last back to the first), or []."""
    state: dict[str, str] = {}
    path: list[Import] = []

    def visit(node: str) -> list[Import]:
        state[node] = "open"
        for step in edges.get(node, []):
            if state.get(step.target) == "open":
                start = next((i for i, s in enumerate(path)
                              if s.source == step.target), len(path))
                return path[start:] + [step]
            if step.target not in state:
                path.append(step)
                if found := visit(step.target):
                    return found
                path.pop()
        state[node] = "done"
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return []
