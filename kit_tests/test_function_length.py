"""No function of the grader or the staff tools is longer than a reader
can hold: 80 lines, from ``def`` to its last line (docstring included)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("autograder", "kit", "kinds")   # kinds: a homework's own
LIMIT = 80
# Functions being split elsewhere, by qualified name -> why; this list
# only shrinks (an entry that is short again fails below).
ALLOWED: dict[str, str] = {}


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function, methods and nested
    functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def lengths() -> dict[str, int]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for name, lines in functions(ast.parse(path.read_text())):
                found[f"{where}:{name}"] = lines
    return found


def test_no_function_is_over_80_lines():
    long = {name: lines for name, lines in lengths().items()
            if lines > LIMIT and name not in ALLOWED}
    assert long == {}, (f"functions over {LIMIT} lines (split each into "
                        f"steps named for what they do)")


def test_the_allowed_list_holds_only_long_functions():
    found = lengths()
    stale = [name for name in ALLOWED if found.get(name, 0) <= LIMIT]
    assert stale == [], "no longer long (or gone): remove from ALLOWED"
