"""Count the statements of a method (for the "at most N statements" bonus)."""
from __future__ import annotations

import ast

from autograder.submission import regions


def _method(tree: ast.AST, cls: str, method: str
            ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and item.name == method:
                    return item
    return None


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and \
        isinstance(node.value, ast.Constant) and \
        isinstance(node.value.value, str)


def count_statements(source: str, cls: str, method: str) -> int | None:
    """The number of statements in ``cls.method``'s body, counted
    recursively: a compound statement (``if``, ``for``, ``with``, ...)
    counts itself plus every statement inside it. The docstring does not
    count; a statement spread over several lines counts once.

    Returns None if the source does not parse or the method is missing.
    """
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None     # the module does not import either
    func = _method(tree, cls, method)
    if func is None:
        return None
    body = func.body
    if body and _is_docstring(body[0]):
        body = body[1:]
    # ast.walk visits every nested node; only statements are counted (an
    # except handler or match case is not a statement, its body is).
    return sum(isinstance(node, ast.stmt)
               for stmt in body for node in ast.walk(stmt))
