"""The floors docs/architecture.md draws: every import statement of the
grader and the kit (inside functions too, ``kit/imports.py``) goes to
its own floor or one below, none forms a cycle, and the kit never
imports its tests. Each failure names the import, its file and line, and
the fix."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from kit import imports

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# Imports that run up today, each with what removes it (none now; an
# entry no longer found fails test_the_allowed_upward_imports_are_still_there).
ALLOWED_UP: set[tuple[str, str]] = set()


def floors(text: str | None = None) -> dict[str, int]:
    """Path prefix (``autograder/checks/``, ``autograder/grade.py``) ->
    floor, from the doc's ```floors block."""
    block = re.search(r"```floors\n(.*?)```",
                      DOC.read_text() if text is None else text, re.S)
    assert block, "docs/architecture.md has no ```floors block"
    table = {}
    for line in block.group(1).splitlines():
        floor, *paths = line.split()
        for path in paths:
            assert path not in table, f"{path} drawn on two floors"
            table[path] = int(floor)
    return table


def floor_of(path: Path, table: dict[str, int],
             root: Path = ROOT) -> tuple[str, int] | None:
    """The longest drawn prefix holding ``path``, and its floor."""
    rel = path.relative_to(root).as_posix()
    held = [p for p in table if rel == p or
            (p.endswith("/") and rel.startswith(p))]
    if not held:
        return None
    best = max(held, key=len)
    return best, table[best]


@functools.lru_cache(maxsize=1)
def everything() -> dict[str, Path]:
    return imports.modules(("autograder", "kit", "kit_tests"))


@functools.lru_cache(maxsize=1)
def the_graph() -> dict[str, list[imports.Import]]:
    return imports.graph(everything())


def upward(graph: dict[str, list[imports.Import]], known: dict[str, Path],
           table: dict[str, int], root: Path = ROOT) -> list[str]:
    """One line per import that runs up the floors, with its fix."""
    found = []
    for name in sorted(graph):
        for step in graph[name]:
            here = floor_of(known[name], table, root)
            there = floor_of(known[step.target], table, root)
            if here is None or there is None or there[1] <= here[1] or \
                    (name, step.target) in ALLOWED_UP:
                continue
            found.append(
                f"{step.where()}: {name} (floor {here[1]}, {here[0]}) "
                f"imports {step.target} (floor {there[1]}, {there[0]}), "
                f"above it: move what it needs down to a floor both may "
                f"import, pass it in as an argument, or raise an exception "
                f"of its own floor that the higher one translates "
                f"(docs/architecture.md, The floors)")
    return found


def test_every_module_has_a_floor():
    table = floors()
    missing = sorted(str(p.relative_to(ROOT)) for p in everything().values()
                     if floor_of(p, table) is None)
    assert missing == [], (
        "modules on no floor: add them (or their folder) to the ```floors "
        "block of docs/architecture.md")


def test_every_drawn_path_exists():
    assert [p for p in floors() if not (ROOT / p).exists()] == []


def test_no_import_runs_up_the_floors():
    known = everything()
    problems = upward(the_graph(), known, floors())
    assert problems == [], "\n".join(problems)


def test_the_allowed_upward_imports_are_still_there():
    # an exception that no longer applies is removed with it
    graph = the_graph()
    present = {(s.source, s.target) for steps in graph.values()
               for s in steps}
    assert ALLOWED_UP - present == set(), "remove these from ALLOWED_UP"


def test_no_import_cycle():
    found = imports.cycle(the_graph())
    assert found == [], (
        "an import cycle: " + " -> ".join(
            f"{s.source} ({s.where()})" for s in found)
        + f" -> {found[0].source if found else ''}: break it by moving "
        "what both need into a module both import, or by passing it in")


def test_the_kit_never_imports_its_tests():
    graph = the_graph()
    found = [f"{s.where()}: {s.source} imports {s.target}: move what both "
             "use into kit/ (as kit/corpus/grading_batch.py)"
             for name, steps in graph.items() if not name.startswith(
                 "kit_tests") for s in steps
             if s.target.split(".")[0] == "kit_tests"]
    assert found == [], "\n".join(found)


# The walk itself, on made-up modules: what it must see.

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high.py").write_text("import os\n\n\ndef f():\n"
                                 "    from pkg.low import base\n")
    (pkg / "low" / "base.py").write_text(
        "def g():\n    from ..high import f\n    return f\n")
    return tmp_path


def test_the_walk_sees_imports_inside_functions_and_relative(tree):
    known = imports.modules(("pkg",), root=tree)
    graph = imports.graph(known)
    assert [(s.target, s.line) for s in graph["pkg.high"]] == \
        [("pkg.low.base", 5)]
    assert [s.target for s in graph["pkg.low.base"]] == ["pkg.high"]
    assert [s.source for s in imports.cycle(graph)] == \
        ["pkg.high", "pkg.low.base"]


def test_an_upward_import_is_named_with_its_line_and_fix(tree):
    known = imports.modules(("pkg",), root=tree)
    table = floors("```floors\n1  pkg/high.py\n0  pkg/low/ "
                   "pkg/__init__.py\n```")
    lines = upward(imports.graph(known), known, table, root=tree)
    assert len(lines) == 1
    assert lines[0].startswith(f"{tree}/pkg/low/base.py:2: pkg.low.base "
                               "(floor 0, pkg/low/) imports pkg.high "
                               "(floor 1, pkg/high.py), above it: move")
