"""Whether a shape trace can be trusted, and what ran while it was taken.

The shape recorder lives in the worker, beside student code that may
reach it; it keeps nothing there (each record is sent to the parent as it
is made, and the parent rebuilds the table: ``sandbox/shape_table.py``),
but code can still stop it or write records of its own. The parent
therefore checks each traced call that returned: the canary, a record the
worker makes through the recorder at every function entry with a shape drawn
from a nonce the parent chose (``Probe.canary``), must be there, and every
statement that runs on any path through the task's ``forward`` (its
top-level statements up to the first that may leave it) must have been
recorded. Its content is checked too: a line holding as many records as
the recorder keeps (``LIMITS.shapes_per_line``: a table filled ahead of
the code hides what ran), or a ``return`` of ``forward`` whose records do
not hold the shapes of what the call returned (the parent has its
output), is a forgery. A trace that fails any of these is not evidence:
the shape-comment deduction applies.

The trace also records the first line of every function of the submission
that ran (and of every lambda outside a function): the functions a task's
code actually ran, however it called them (a dict, ``getattr``, a lambda),
are graded with it (``regions.graded_regions``, ``ran``).
"""
from __future__ import annotations

import ast
from typing import Any

from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import CANARY_LINE, canary_shape
from autograder.submission import regions

__all__ = ["CANARY_LINE", "canary_shape", "expected_lines", "return_lines",
           "trace_problem"]


def _forward(source: str, cls: str) -> ast.FunctionDef | None:
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    # The class wherever Python defines it (under ``if True:`` too).
    return next((item for node in regions.flatten(tree.body)
                 if isinstance(node, ast.ClassDef) and node.name == cls
                 for item in regions.flatten(node.body)
                 if isinstance(item, ast.FunctionDef)
                 and item.name == "forward"), None)


def return_lines(source: str, cls: str) -> set[int]:
    """The lines of ``cls.forward``'s own ``return`` statements (not those
    of functions or lambdas it defines)."""
    forward = _forward(source, cls)
    if forward is None:
        return set()
    found, stack = set(), list(forward.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.add(node.lineno)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return found


def expected_lines(source: str, cls: str) -> set[int]:
    """Lines the trace of any call of ``cls.forward`` that returned must
    hold: the ``def`` line (its entry) and the recorded statements of its
    body that run on every path, up to the first statement that may leave
    it (a ``return``, ``raise`` or a block holding one)."""
    forward = _forward(source, cls)
    if forward is None:
        return set()
    lines = {forward.lineno}
    for stmt in forward.body:
        if regions.recorded(stmt):
            lines.add(stmt.lineno)
        if isinstance(stmt, (ast.Return, ast.Raise)) or any(
                isinstance(n, (ast.Return, ast.Raise))
                for n in ast.walk(stmt)):
            break
    return lines


def trace_problem(source: str, cls: str, nonce: int,
                  shapes: dict[int, list],
                  returned: list[Any] | None = None) -> str | None:
    """Why the trace of a call of ``cls`` that returned cannot be trusted
    (student-facing words), or None. ``returned``: the tensors the call
    returned (its outputs), whose shapes a ``return`` of ``forward`` must
    have recorded."""
    if shapes.get(CANARY_LINE) != [[canary_shape(nonce)]]:
        return "the grader's check record is missing or altered"
    missing = sorted(expected_lines(source, cls) - set(shapes))
    if missing:
        shown = ", ".join(map(str, missing[:5]))
        return (f"line{'s' * (len(missing) > 1)} {shown} ran but "
                f"{'were' if len(missing) > 1 else 'was'} not recorded")
    full = sorted(int(line) for line, runs in shapes.items()
                  if len(runs) >= LIMITS.shapes_per_line)
    if full:
        return (f"line {full[0]} holds more records than the grader "
                f"keeps, which no attention module's code makes")
    if returned:
        want = [[int(d) for d in t.shape] for t in returned]
        lines = return_lines(source, cls)
        if lines and not any(want in shapes.get(line, [])
                             for line in lines):
            return ("the shapes recorded where forward returns are not "
                    "those of what it returned")
    return None
