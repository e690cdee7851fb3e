"""Code that reaches into the grader, found on the parsed module.

The worker runs student code beside the grader's own objects (the shape
recorder, the probe's state): code that reaches for them can change what
the grader records about it. No attention module needs to, so the rubric
states it as a rule (kind ``grader_access``) and this module finds it on
the AST, never by running the code: the interpreter's back doors
(``builtins``, frames, ``gc``, tracing and profiling hooks, ``ctypes``),
code run from strings (``exec``, ``eval``, ``compile``, ``__import__``,
``importlib``) and the grader's own packages. The trace's integrity
check (``trace_integrity``) stays as a second line behind it.

Names are matched where Python binds them, not as text: ``torch.compile``,
``self.eval()`` and a comment saying "exec" are not findings; ``getattr``
with a constant string naming a forbidden attribute is.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from autograder.submission import regions

# Modules whose import is the finding: the interpreter's back doors, code
# loaded by name, and the grader itself (a package and its submodules).
MODULES = frozenset({
    "builtins", "gc", "inspect", "ctypes", "importlib", "imp",
    "autograder", "kit", "_thread", "sysconfig", "code", "codeop",
    "runpy", "pickle", "marshal", "tracemalloc", "faulthandler",
})
# Built-in functions whose call (or mere mention) is the finding.
CALLS = frozenset({"exec", "eval", "compile", "__import__", "globals"})
# Names that hold the interpreter's own tables.
NAMES = frozenset({"__builtins__", "__loader__", "__spec__"})
# Attributes of ``sys`` (and ``threading``) that reach frames, hooks and
# loaded modules.
SYS_ATTRIBUTES = frozenset({
    "_getframe", "_current_frames", "settrace", "setprofile", "gettrace",
    "getprofile", "monitoring", "modules", "meta_path", "path_hooks",
    "path_importer_cache", "addaudithook", "_xoptions",
    "excepthook", "displayhook", "exc_info", "exception", "last_traceback",
})
# Attributes of any object that lead to frames, globals, code or the
# class graph (the usual ways out of a sandboxed namespace).
ATTRIBUTES = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
    "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame",
    "__builtins__", "__globals__", "__code__", "__closure__",
    "__subclasses__", "__import__", "__loader__", "__spec__", "__mro__",
    "__bases__", "__base__", "co_consts", "_getframe", "settrace",
    "setprofile", "__self__",     # print.__self__ is the builtins module
})
MAX_SHOWN = 5      # findings quoted per task


@dataclass(frozen=True)
class Finding:
    """One place where the code reaches into the grader."""

    line: int
    what: str        # "`import gc`", "`exec(...)`", "`.f_back`"

    @property
    def message(self) -> str:
        """``line 12: `exec(...)` ``."""
        return f"line {self.line}: {self.what}"


def _module_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        # A relative import (``from . import x``) can only name the
        # submission's own package: the grader's when it is one.
        return [node.module or "."] if node.level == 0 else ["."]
    return []


def _finding(node: ast.AST) -> str | None:
    """What ``node`` reaches for (student-facing), or None."""
    for name in _module_names(node):
        root = name.split(".")[0]
        if root in MODULES or name == ".":
            return f"`import {name}`"
        if root in ("sys", "threading") and isinstance(node, ast.ImportFrom):
            bad = [a.name for a in node.names
                   if a.name in SYS_ATTRIBUTES or a.name == "*"]
            if bad:
                return f"`from {name} import {bad[0]}`"
    if isinstance(node, ast.Name):
        if node.id in CALLS:
            return f"`{node.id}`"
        if node.id in NAMES:
            return f"`{node.id}`"
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and \
                node.value.id in ("sys", "threading") and \
                node.attr in SYS_ATTRIBUTES:
            return f"`{node.value.id}.{node.attr}`"
        if node.attr in ATTRIBUTES:
            return f"`.{node.attr}`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ("getattr", "setattr", "hasattr", "delattr") \
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
            and node.args[1].value in ATTRIBUTES | SYS_ATTRIBUTES:
        return f"`{node.func.id}(..., {node.args[1].value!r})`"
    return None


@functools.lru_cache(maxsize=8)
def findings(source: str) -> tuple[Finding, ...]:
    """Every place of ``source`` that reaches into the grader, in line
    order (one walk of the tree per source text). Raises SyntaxError as
    ``ast.parse``; RecursionError or MemoryError on code nested too deeply
    for the parser."""
    tree = regions.parse(source)
    found = []
    for node in ast.walk(tree):
        what = _finding(node)
        if what is not None:
            found.append(Finding(node.lineno, what))
    return tuple(sorted(set(found), key=lambda f: (f.line, f.what)))


def task_spans(source: str, cls: str) -> tuple[tuple[int, int], ...]:
    """The lines of every definition named ``cls`` (a class at any depth,
    or a function: Part 3's factory), decorators included."""
    return _spans(source).get(cls, ())


@functools.lru_cache(maxsize=8)
def _spans(source: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """Name -> the lines of every class or function of that name: one
    walk of the tree per source text, not one per task (which made the
    check quadratic in the tasks times the source)."""
    found: dict[str, list[tuple[int, int]]] = {}
    for node in ast.walk(regions.parse(source)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno
                                         for d in node.decorator_list])
            found.setdefault(node.name, []).append((first, node.end_lineno))
    return {name: tuple(spans) for name, spans in found.items()}


def access_issues(source: str, cls: str, tasks: tuple[str, ...]
                  ) -> list[Finding]:
    """The findings charged to the task of class ``cls``: those inside
    its definition, and those outside every task's definition (module
    code and helpers run for every task). ``tasks``: every task's class
    (or function) name."""
    own = task_spans(source, cls)
    others = [span for name in tasks if name != cls
              for span in task_spans(source, name)]
    return [f for f in findings(source)
            if any(a <= f.line <= b for a, b in own) or
            not any(a <= f.line <= b for a, b in others)]
