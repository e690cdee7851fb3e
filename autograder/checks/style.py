"""PEP 8 violations (pycodestyle, default configuration) per class."""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

import pycodestyle

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


def _options():
    # Pin every option a user or project config file could change, so the
    # result depends on the source alone.
    guide = pycodestyle.StyleGuide(
        quiet=True, max_line_length=MAX_LINE_LENGTH, max_doc_length=None,
        hang_closing=False, indent_size=4, select=(),
        ignore=tuple(pycodestyle.DEFAULT_IGNORE.split(",")))
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


def all_style_issues(source: str) -> list[StyleIssue]:
    """Every pycodestyle violation of ``source``, in line order."""
    return list(_pycodestyle(source))


@functools.lru_cache(maxsize=8)
def _pycodestyle(source: str) -> tuple[StyleIssue, ...]:
    # Cached: the grader asks once per class of the same source.
    options = _options()
    report = _Collect(options)
    lines = _NOQA.sub(r"\g<1>0\g<3>", source).splitlines(keepends=True)
    checker = pycodestyle.Checker(lines=lines, options=options,
                                  report=report)
    checker.check_all()
    return tuple(sorted(report.found,
                        key=lambda i: (i.line, i.column, i.code)))


def _class_spans(tree: ast.AST, cls: str) -> list[tuple[int, int]]:
    # A task's code lives in a class, or (Part 3's factory) in a
    # module-level function of that name.
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    nodes += [n for n in getattr(tree, "body", [])
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    spans = []
    for node in nodes:
        if node.name == cls:
            first = min([node.lineno] +
                        [d.lineno for d in node.decorator_list])
            spans.append((first, node.end_lineno))
    return spans


def style_issues(source: str, cls: str) -> list[StyleIssue]:
    """The violations on lines of class ``cls`` (decorators to last line).

    ``cls=""`` gives the violations outside every class, including the
    file-level ones (W391, W292), which are never attributed to a class.
    Returns [] if the source does not parse: the grader reports syntax
    errors elsewhere.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    issues = all_style_issues(source)
    if not cls:
        spans = [span for node in ast.walk(tree)
                 if isinstance(node, ast.ClassDef)
                 for span in _class_spans(tree, node.name)]
        return [i for i in issues if i.code in FILE_LEVEL_CODES or
                not any(a <= i.line <= b for a, b in spans)]
    spans = _class_spans(tree, cls)
    return [i for i in issues if i.code not in FILE_LEVEL_CODES and
            any(a <= i.line <= b for a, b in spans)]
