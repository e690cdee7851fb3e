"""Where the student wrote code: the marked regions and their statements.

Shared by the worker (which instruments these statements to record shapes)
and by the static checks (shape comments, statement counts), so that both
agree on what "student code" is.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

START_MARKER = "# YOUR CODE STARTS HERE"
END_MARKER = "# YOUR CODE ENDS HERE"
_TASK_HEADER = re.compile(r"#\s*Task\s+(\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Region:
    """Lines ``start``..``end`` (1-based, inclusive) written by the student."""

    start: int
    end: int
    task: str    # "1.2", from the nearest "# Task 1.2" header above
    cls: str     # enclosing class name ("" at module level)
    function: str  # enclosing function name ("" if none)


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _enclosing(tree: ast.AST, line: int) -> tuple[str, str]:
    # Only module-level classes and functions (and methods) hold regions;
    # looking at those alone keeps this linear in the file's size.
    cls = func = ""
    for node in getattr(tree, "body", []):
        if not node.lineno <= line <= node.end_lineno:
            continue
        if isinstance(node, ast.ClassDef):
            cls = node.name
            for item in node.body:
                if isinstance(item, _FUNCS) and \
                        item.lineno <= line <= item.end_lineno:
                    func = item.name
        elif isinstance(node, _FUNCS):
            func = node.name
    return cls, func


def owner_of_line(source: str, line: int | None) -> str:
    """The module-level class or function whose code holds ``line`` ("" if
    none, or if ``source`` does not parse): which unit an exception came
    from, so that it is charged to that unit's item."""
    if line is None:
        return ""
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    cls, func = _enclosing(tree, line)
    return cls or func


@functools.lru_cache(maxsize=4)
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


def find_regions(source: str, tree: ast.AST | None = None) -> list[Region]:
    """The marked student regions of ``source``, in file order.

    A START marker without a matching END runs to the end of its function.
    Raises SyntaxError if ``source`` does not parse and ``tree`` is None.
    """
    tree = tree if tree is not None else ast.parse(source)
    lines = source.splitlines()
    regions = []
    task = ""
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        header = _TASK_HEADER.search(text)
        if header and text.startswith("#"):
            task = header.group(1)
        if text == START_MARKER:
            start = i + 2  # 1-based line after the marker
            cls, func = _enclosing(tree, i + 1)
            j = i + 1
            while j < len(lines) and lines[j].strip() != END_MARKER \
                    and lines[j].strip() != START_MARKER:
                j += 1
            end = j  # 1-based line before END (or last line)
            if j == len(lines) or lines[j].strip() == START_MARKER:
                end = _function_end(tree, i + 1) or len(lines)
            regions.append(Region(start, min(end, j), task, cls, func))
            # Resume after END; without one, rescan the lines up to the
            # next START so that START and its task header are seen.
            if j < len(lines) and lines[j].strip() == END_MARKER:
                i = j
        i += 1
    return regions


def _function_end(tree: ast.AST, line: int) -> int | None:
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno > best.lineno:
                best = node
    return best.end_lineno if best else None


_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


def student_statements(tree: ast.AST,
                       regions: list[Region]) -> list[tuple[Region, ast.stmt]]:
    """Simple statements (assignments, returns, expressions) whose first line
    lies in a region, including those nested in if/for/with blocks there."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, _SIMPLE):
            continue
        for region in regions:
            if region.start <= node.lineno <= region.end:
                found.append((region, node))
                break
    found.sort(key=lambda pair: pair[1].lineno)
    return found
