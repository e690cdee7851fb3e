"""The packages a submission may import, and the imports it may not.

The list is data (the profile's ``[data] imports``,
``autograder/imports.toml``): the Python standard library, if it says so,
and named packages, each pinned in every grader environment. This module
reads it and finds, on the parsed source, every import of anything else:

- ``refusal``: ``check``'s and ``make submission``'s refusal, naming each
  package and its line, before the student submits;
- ``grader_note``: the grader's feedback when the module failed to import
  and imports a package off the list;
- ``allowed_words``: the list in words (the rubric and the READMEs say
  it, written by ``make facts``).

An import the grader never runs is no refusal: one under
``if __name__ == "__main__":`` or in a ``try`` whose handler catches
ImportError (a fallback). A relative import is the grader_access rule's.
"""
from __future__ import annotations

import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autograder import homework

MAX_SOURCE = 200_000     # characters read (the reference: ~14,000)


@dataclass(frozen=True)
class Allowed:
    """What a submission may import: the standard library (``stdlib``)
    and the packages named, each with its pin."""

    stdlib: bool
    packages: dict[str, str]     # import name -> requirement ("einops==…")

    def allows(self, top: str) -> bool:
        """Whether ``import top`` (a top-level name) is allowed."""
        return top in self.packages or (
            self.stdlib and top in sys.stdlib_module_names)


def load_allowed(path: Path | None = None) -> Allowed:
    """The list, read and checked (ValueError naming the file and the
    entry that is wrong)."""
    path = path or homework.current().imports
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    packages: dict[str, str] = {}
    for entry in data.get("package", []):
        name, pin = entry.get("name"), entry.get("requirement")
        if not (isinstance(name, str) and name.isidentifier()
                and isinstance(pin, str) and pin.startswith(name)):
            raise ValueError(f"{path}: each [[package]] needs `name` (what "
                             f"`import` names) and `requirement` (its pin, "
                             f"e.g. \"einops==0.8.2\"); got {entry!r}")
        packages[name] = pin
    if not isinstance(data.get("stdlib", False), bool):
        raise ValueError(f"{path}: `stdlib` must be true or false")
    return Allowed(bool(data.get("stdlib", False)), packages)


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception",
             "BaseException"}
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) \
            else [handler.type]
        if any(kind is None or (isinstance(kind, ast.Name)
                                and kind.id in names) for kind in kinds):
            return True
    return False


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return isinstance(test, ast.Compare) and \
        isinstance(test.left, ast.Name) and test.left.id == "__name__" \
        and any(isinstance(c, ast.Constant) and c.value == "__main__"
                for c in test.comparators)


def _imports(node: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level name) of every absolute import the grader may run
    under ``node``."""
    found: list[tuple[int, str]] = []
    if isinstance(node, ast.Import):
        found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
        found.append((node.lineno, node.module.split(".")[0]))
    if isinstance(node, ast.Try) and _catches_import_error(node):
        children: list[ast.AST] = [*node.handlers, *node.orelse,
                                   *node.finalbody]
    elif isinstance(node, ast.If) and _is_main_guard(node):
        children = list(node.orelse)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        found += _imports(child)
    return found


def refused(source: str, allowed: Allowed | None = None
            ) -> list[tuple[int, str]]:
    """(line, package) of each import in ``source`` off the list, the
    first line of each package; none when the source does not parse (the
    import check says why then) or is too long to read."""
    allowed = allowed or load_allowed()
    if len(source) > MAX_SOURCE:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    try:
        found = _imports(tree)
    except RecursionError:
        return []
    first: dict[str, int] = {}
    for line, top in sorted(found):
        if not allowed.allows(top):
            first.setdefault(top, line)
    return [(line, top) for top, line in first.items()]


def allowed_words(allowed: Allowed | None = None) -> str:
    """"the Python standard library, torch and einops"."""
    allowed = allowed or load_allowed()
    names = (["the Python standard library"] if allowed.stdlib else []) + \
        [f"`{name}`" for name in allowed.packages]
    if len(names) < 2:
        return "".join(names) or "nothing"
    return ", ".join(names[:-1]) + " and " + names[-1]


def _said(source: str, allowed: Allowed | None, words: str) -> str:
    """"your module imports `x` (line n), ``words``" with the list after
    it, or "" when ``source`` imports nothing off the list."""
    allowed = allowed or load_allowed()
    found = refused(source, allowed)
    if not found:
        return ""
    listed = ", ".join(f"`{top}` (line {line})" for line, top in found)
    return words.format(listed=listed, allowed=allowed_words(allowed))


def refusal(source: str, allowed: Allowed | None = None) -> str:
    """Why the module cannot be submitted as it is ("" if it can): each
    package off the list, its line, and what the grader has."""
    return _said(source, allowed,
                 "your module imports {listed}, which the grader does not "
                 "have: there it would not import, and every item would "
                 "score 0. A submission may import {allowed} "
                 "(autograder/imports.toml). Remove the import, or write "
                 "what you used it for with those, and run again.")


def grader_note(source: str, allowed: Allowed | None = None) -> str:
    """For a module that failed to import on the grader: the packages it
    imports that are off the list ("" if none)."""
    return _said(source, allowed,
                 "your module imports {listed}, which is not among the "
                 "packages a submission may import: {allowed}.")


__all__ = ["Allowed", "allowed_words", "grader_note", "load_allowed",
           "refusal", "refused"]
