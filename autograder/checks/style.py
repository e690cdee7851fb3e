"""PEP 8 violations (pycodestyle, its default configuration plus the
rubric's ``ignore`` and ``max_line_length``) per class."""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

import pycodestyle

from autograder.submission import regions

MAX_LINE_LENGTH = 79
# Codes about the file as a whole (its last line): no class is to blame.
FILE_LEVEL_CODES = frozenset({"W391", "W292"})
# pycodestyle skips a line marked "# noqa" (or "# nopep8"); the grader's
# rule has no such switch, so the marks are defused before checking (one
# character changed, so every column and line length stays the same).
_NOQA = re.compile(r"(#\s*n)(o)((?:qa|pep8)\b)", re.IGNORECASE)


@dataclass(frozen=True)
class StyleIssue:
    """One pycodestyle violation."""

    line: int
    column: int      # 1-based, as pycodestyle prints it
    code: str        # "E501"
    text: str        # "line too long (84 > 79 characters)"

    @property
    def message(self) -> str:
        """``line 42:80 E501 line too long (84 > 79 characters)``."""
        return f"line {self.line}:{self.column} {self.code} {self.text}"


class _Collect(pycodestyle.BaseReport):
    """A report that keeps the violations instead of printing them."""

    def __init__(self, options) -> None:
        super().__init__(options)
        self.found: list[StyleIssue] = []

    def error(self, line_number, offset, text, check):  # noqa: D102
        code = super().error(line_number, offset, text, check)
        if code:
            self.found.append(StyleIssue(line_number, offset + 1, code,
                                         text[5:]))
        return code


def _options(ignore: tuple[str, ...], max_line_length: int):
    # Pin every option a user or project config file could change, so the
    # result depends on the source and the rubric alone. The rubric's codes
    # add to pycodestyle's default list (its --ignore would replace it,
    # turning on W503 and W504, which no line break satisfies both of).
    guide = pycodestyle.StyleGuide(
        quiet=True, max_line_length=max_line_length, max_doc_length=None,
        hang_closing=False, indent_size=4, select=(),
        ignore=tuple(pycodestyle.DEFAULT_IGNORE.split(",")) + ignore)
    return guide.options


# pycodestyle costs about 20 ms per KB of dense code: a file longer than
# this (7 times the reference) is not checked, and the deduction applies
# (see ``too_long``), so the check's time stays bounded.
MAX_STYLE_CHARS = 100_000


def too_long(source: str) -> str | None:
    """Why ``source`` is too long to check, or None."""
    if len(source) <= MAX_STYLE_CHARS:
        return None
    return (f"the file is {len(source):,} characters long; the style check "
            f"reads files of at most {MAX_STYLE_CHARS:,} characters, so the "
            f"deduction applies")


def all_style_issues(source: str, ignore: tuple[str, ...] = (),
                     max_line_length: int = MAX_LINE_LENGTH
                     ) -> list[StyleIssue]:
    """Every pycodestyle violation of ``source``, in line order, with the
    codes ``ignore`` ignored besides pycodestyle's default list and lines
    up to ``max_line_length`` characters allowed."""
    return list(_pycodestyle(source, ignore, max_line_length))


@functools.lru_cache(maxsize=8)
def _pycodestyle(source: str, ignore: tuple[str, ...],
                 max_line_length: int) -> tuple[StyleIssue, ...]:
    # Cached: the grader asks once per class of the same source.
    options = _options(ignore, max_line_length)
    report = _Collect(options)
    # The lines Python sees (regions.python_lines): str.splitlines() would
    # also split at form feeds and the like, moving every violation below
    # them off its line (and out of its class).
    lines = regions.python_lines(_NOQA.sub(r"\g<1>0\g<3>", source),
                                 keepends=True)
    checker = pycodestyle.Checker(lines=lines, options=options,
                                  report=report)
    checker.check_all()
    return tuple(sorted(report.found,
                        key=lambda i: (i.line, i.column, i.code)))


@functools.lru_cache(maxsize=8)
def _spans_by_name(source: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """Name -> line spans (decorators to last line) of every class and
    module-level function of ``source``: a task's code lives in a class,
    or (Part 3's factory) in a module-level function of that name. Once
    per source text; raises SyntaxError as ast.parse."""
    tree = regions.parse(source)
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    nodes += [n for n in regions.flatten(tree.body)
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    spans: dict[str, list[tuple[int, int]]] = {}
    for node in nodes:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        spans.setdefault(node.name, []).append((first, node.end_lineno))
    return {name: tuple(found) for name, found in spans.items()}


def style_issues(source: str, cls: str,
                 methods: dict[str, tuple[str, ...]],
                 ran: dict[str, frozenset[int]] | None = None, *,
                 ignore: tuple[str, ...] = (),
                 max_line_length: int = MAX_LINE_LENGTH
                 ) -> list[StyleIssue]:
    """The violations on lines of class ``cls`` (decorators to last line)
    and of the module-level functions its code calls or ran (``methods``:
    the graded rubric's task methods, ``GradingConfig.task_methods``;
    ``ran``: what ran while each task's traced calls ran, as for
    ``regions.graded_regions``).

    ``cls=""`` gives the violations outside every class, including the
    file-level ones (W391, W292), which are never attributed to a class.
    Returns [] if the source does not parse: the grader reports syntax
    errors elsewhere. ``ignore`` and ``max_line_length`` are pycodestyle's
    options, as for ``all_style_issues``.
    """
    try:
        tree = regions.parse(source)
        by_name = _spans_by_name(source)
    except SyntaxError:
        return []
    issues = all_style_issues(source, ignore, max_line_length)
    if not cls:
        classes = {n.name for n in ast.walk(tree)
                   if isinstance(n, ast.ClassDef)}
        spans = [span for name in classes for span in by_name[name]]
        return [i for i in issues if i.code in FILE_LEVEL_CODES or
                not any(a <= i.line <= b for a, b in spans)]
    # The module-level functions the class's code calls are graded with
    # it (regions.graded_regions' helpers): a helper moved out of the
    # class must not escape the style check.
    table = tuple(sorted(methods.items()))
    # Its base classes defined in the file are its code too: a
    # constructor moved into a base must not escape the check (a base
    # that is another task's class is that task's, charged once).
    spans = tuple(span for name in _bases(source, cls)
                  if name not in methods for span in by_name.get(name, ()))
    spans += by_name.get(cls, ()) + tuple(
        span for owner, name in _helpers(source, table) if owner == cls
        for span in by_name.get(name, ())
        if not any(a <= span[0] <= b for a, b in by_name.get(cls, ())))
    if ran:
        key = tuple(sorted((k, tuple(sorted(v))) for k, v in ran.items()))
        spans += tuple(span for owner, span in _ran_spans(source, table, key)
                       if owner == cls)
    return [i for i in issues if i.code not in FILE_LEVEL_CODES and
            any(a <= i.line <= b for a, b in spans)]


@functools.lru_cache(maxsize=32)
def _bases(source: str, cls: str) -> tuple[str, ...]:
    """The classes of ``source`` that ``cls`` inherits from, directly or
    through others of the file (by the names its bases are written as)."""
    classes = {n.name: n for n in ast.walk(regions.parse(source))
               if isinstance(n, ast.ClassDef)}
    found: list[str] = []
    queue = [cls]
    while queue:
        node = classes.get(queue.pop())
        for base in node.bases if node is not None else ():
            name = base.id if isinstance(base, ast.Name) else getattr(
                base, "attr", "")
            if name in classes and name != cls and name not in found:
                found.append(name)
                queue.append(name)
    return tuple(found)


@functools.lru_cache(maxsize=8)
def _ran_spans(source: str, table: tuple, ran: tuple
               ) -> tuple[tuple[str, tuple[int, int]], ...]:
    """(owner class, lines) of every helper found by what ran (a dict,
    ``getattr`` or lambda call that names nothing): once per source."""
    try:
        return tuple((r.cls, (r.first, r.end)) for r in
                     regions.graded_regions(source, methods=dict(table),
                                            ran=dict(ran))
                     if r.helper and r.first)
    except (SyntaxError, RecursionError, MemoryError):
        return ()


@functools.lru_cache(maxsize=8)
def _helpers(source: str, table: tuple) -> tuple[tuple[str, str], ...]:
    """(owner class, function) of every helper the graded code calls:
    once per source, not once per task."""
    try:
        return tuple((r.cls, r.function) for r in regions.graded_regions(
            source, methods=dict(table)) if r.helper)
    except (SyntaxError, RecursionError, MemoryError):
        return ()
