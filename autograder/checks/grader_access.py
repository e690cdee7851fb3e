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
import collections
import functools
import re
from dataclasses import dataclass

from autograder.checks.scopes import Scopes
from autograder.checks.static_strings import Strings, could_be
# Modules whose import is the finding: the interpreter's back doors, code
# loaded by name, and the grader itself (the worker's audit's list, kept
# in the lower layer).
from autograder.sandbox.audit import MODULES
from autograder.submission import regions

# Built-in functions whose call (or mere mention) is the finding, where
# the name is the built-in's (a local variable called ``compile`` is not).
CALLS = frozenset({"exec", "eval", "compile", "__import__", "globals",
                   "vars"})
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
    "__dict__", "__getattribute__",   # any attribute by name
    "builtins",     # a module's own import of it (``dataclasses.builtins``)
})
# Calls that take an attribute's name: the name is judged however it is
# built (``"__glob" + "als__"``, a variable, an f-string).
NAME_TAKERS = frozenset({"getattr", "setattr", "hasattr", "delattr",
                         "attrgetter", "methodcaller", "__getattribute__",
                         "__getattr__"})
# Of them, the built-ins that are findings when passed around as values
# (``f = getattr``): their name argument is then out of sight.
PASSED = frozenset({"getattr", "setattr", "delattr"})
# What a name given to the getattr family must not spell; a string built
# at run time must not spell these nor a forbidden built-in's name.
REACHABLE = ATTRIBUTES | SYS_ATTRIBUTES | NAMES
SPELLED = REACHABLE | CALLS
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


def _import_finding(node: ast.AST) -> str | None:
    for name in _module_names(node):
        root = name.split(".")[0]
        if root in MODULES or name == ".":
            return f"`import {name}`"
        if root in ("sys", "threading") and isinstance(node, ast.ImportFrom):
            bad = [a.name for a in node.names
                   if a.name in SYS_ATTRIBUTES or a.name == "*"]
            if bad:
                return f"`from {name} import {bad[0]}`"
        if root == "operator" and isinstance(node, ast.ImportFrom):
            bad = [a.name for a in node.names if a.name == "*"]
            if bad:
                return f"`from {name} import *`"
    return None


def _call_name(func: ast.AST) -> str | None:
    """``getattr`` for ``getattr(...)``, ``attrgetter`` for
    ``operator.attrgetter(...)`` and ``attrgetter(...)``, ..."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Reader:
    """The findings of one parsed module."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.scopes = Scopes(tree)
        self.strings = Strings(self.scopes)
        # Names of the getattr family called directly: their name
        # arguments are judged; the same names passed around are findings.
        self.called: set[int] = set()
        # Name arguments already charged as such (not again as strings).
        self.judged: set[int] = set()

    def _builtin(self, node: ast.AST, names) -> str | None:
        """The name if ``node`` is a load of the built-in (or module
        global Python gives every module) of one of ``names``."""
        if isinstance(node, ast.Name) and node.id in names and \
                isinstance(node.ctx, ast.Load) and \
                self.scopes.is_builtin(node):
            return node.id
        return None

    def _names_reached(self, call: ast.Call) -> list[str]:
        """The forbidden attributes a call of the getattr family (or
        ``attrgetter``, ``methodcaller``, ``__getattribute__``) may name,
        however the name is built."""
        name = _call_name(call.func)
        if name in NAME_TAKERS and (
                isinstance(call.func, ast.Attribute) or
                name in ("attrgetter", "methodcaller") or
                self._builtin(call.func, NAME_TAKERS)):
            args = call.args[1:2] if name in ("getattr", "setattr",
                                              "hasattr", "delattr") \
                else call.args
            if isinstance(call.func, ast.Attribute) and \
                    name in ("__getattribute__", "__getattr__") and \
                    len(call.args) > 1:
                args = call.args[1:2]
            found = []
            for arg in args:
                patterns = self.strings.patterns(arg)
                if patterns is None:
                    continue
                if name == "attrgetter":     # "a.__globals__": each part
                    patterns = [q for p in patterns
                                for q in re.split(r"\\\.", p)]
                found += could_be(patterns, REACHABLE)
            if found:
                self.judged.update(id(arg) for arg in args)
            return found
        return []

    def finding(self, node: ast.AST) -> str | None:
        """What ``node`` reaches for (student-facing), or None."""
        what = _import_finding(node)
        if what is not None:
            return what
        if isinstance(node, ast.Name):
            name = self._builtin(node, CALLS | NAMES)
            if name is not None:
                return f"`{name}`"
            name = self._builtin(node, PASSED)
            if name is not None and id(node) not in self.called:
                return f"`{name}` passed as a value"
            if node.id in NAMES and not isinstance(node.ctx, ast.Load):
                return f"`{node.id}`"
            if node.id in ("attrgetter", "methodcaller") and \
                    isinstance(node.ctx, ast.Load) and \
                    id(node) not in self.called:
                return f"`{node.id}` passed as a value"
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and \
                    node.value.id in ("sys", "threading") and \
                    node.attr in SYS_ATTRIBUTES:
                return f"`{node.value.id}.{node.attr}`"
            if node.attr in ATTRIBUTES:
                return f"`.{node.attr}`"
            if node.attr in ("attrgetter", "methodcaller") and \
                    id(node) not in self.called:
                return f"`.{node.attr}` passed as a value"
        if isinstance(node, ast.Call):
            self.called.add(id(node.func))
            reached = self._names_reached(node)
            if reached:
                return (f"`{_call_name(node.func)}(...)` of "
                        f"`{reached[0]}`")
        # A frame, code or globals attribute's name as a string, wherever
        # it goes (``_get(frame, "f_locals")`` through the student's own
        # getattr wrapper, whose parameter hides the name): no honest use
        # here, and it is how a reach-in names its way out.
        if isinstance(node, ast.Constant) and node.value in ATTRIBUTES \
                and id(node) not in self.judged:
            return f"the name `{node.value}` as a string"
        if isinstance(node, ast.expr) and self.strings.built(node):
            patterns = self.strings.patterns(node)
            reached = could_be(patterns, SPELLED) if patterns else []
            if reached:
                return f"a string built to spell `{reached[0]}`"
        return None

    def read(self) -> list[Finding]:
        """Every finding outside the code Python never runs here."""
        skipped = _never_run(self.tree, self.scopes)
        found = []
        # Breadth first (as ast.walk), so a call is seen before the name
        # it calls: the getattr family called directly is judged by its
        # arguments, passed around it is a finding.
        queue = collections.deque([self.tree])
        while queue:
            node = queue.popleft()
            if id(node) in skipped:
                continue
            what = self.finding(node)
            if what is not None:
                found.append(Finding(getattr(node, "lineno", 0), what))
            queue.extend(ast.iter_child_nodes(node))
        return found


def _never_run(tree: ast.Module, scopes: Scopes) -> set[int]:
    """The bodies of ``if __name__ == "__main__":`` blocks: the grader
    imports the submission under another name, so they never run while it
    grades, unless the module can rename itself (it binds ``__name__``
    or sets attributes by name, ``setattr``, ``.__name__ = ...``): then
    they are read as the rest."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "__name__" \
                and not isinstance(node.ctx, ast.Load) or \
                isinstance(node, ast.Name) and node.id in (
                    "setattr", "delattr", "locals") or \
                isinstance(node, ast.Attribute) and node.attr in (
                    "__setattr__", "__delattr__"):
            return set()
    if "__name__" in scopes.module.bound:
        return set()
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            skipped.update(id(stmt) for stmt in node.body)
    return skipped


def _is_main_test(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and
            isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" and
               isinstance(b, ast.Constant) and b.value == "__main__"
               for a, b in (sides, sides[::-1]))


@functools.lru_cache(maxsize=8)
def findings(source: str) -> tuple[Finding, ...]:
    """Every place of ``source`` that reaches into the grader, in line
    order (one walk of the tree per source text), code the grader never
    runs (an ``if __name__ == "__main__":`` block) aside. Raises
    SyntaxError as ``ast.parse``; RecursionError or MemoryError on code
    nested too deeply for the parser."""
    found = _Reader(regions.parse(source)).read()
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
