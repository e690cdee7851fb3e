"""docs/architecture.md draws the grader's modules: the drawing names every
module of autograder/ and nothing that is not there, so a move or a new
module that forgets the doc fails here."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def drawn() -> set[str]:
    """Paths (relative to the repository) of the tree under ``autograder/``
    in the doc's fenced block."""
    block = re.search(r"```\nautograder/\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/architecture.md has no ```autograder/ tree"
    paths, folders = set(), ["autograder"]
    for line in block.group(1).splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            paths.add("/".join([*folders, name]))
    return paths


def test_the_drawing_is_the_package():
    # a sub-package's __init__.py is drawn as its folder
    modules = {p.relative_to(ROOT).as_posix()
               for p in (ROOT / "autograder").rglob("*.py")
               if "__pycache__" not in p.parts and not (
                   p.name == "__init__.py" and p.parent.name != "autograder")}
    tree = drawn()
    assert modules - tree == set(), "modules the doc does not draw"
    assert {p for p in tree if not (ROOT / p).exists()} == set(), \
        "drawn but missing"
